// run_bias_gelu<__nv_bfloat16>: one dtype per file so that the dtypes compile in parallel.
#include <attnzoo/kernels/bias_gelu/bias_gelu_kernel.cuh>

namespace attnzoo::kernels {

template void run_bias_gelu<__nv_bfloat16>(const BiasGeluParams& params, cudaStream_t stream);

}  // namespace attnzoo::kernels
