// run_flash_fwd<__half, 128>: one dtype and head dim per file, so that they compile in parallel.
#include <attnzoo/kernels/flash_attn/flash_fwd_kernel.cuh>

namespace attnzoo::kernels {

template cudaError_t run_flash_fwd<__half, 128>(const FlashFwdParams& params, cudaStream_t stream);

}  // namespace attnzoo::kernels
