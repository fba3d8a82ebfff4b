// run_flash_bwd<__nv_bfloat16, 128>: one dtype and head dim per file, so that they compile in
// parallel.
#include <attnzoo/kernels/flash_attn/flash_bwd_kernel.cuh>

namespace attnzoo::kernels {

template cudaError_t run_flash_bwd<__nv_bfloat16, 128>(const FlashBwdParams& params,
                                                       cudaStream_t stream);

}  // namespace attnzoo::kernels
