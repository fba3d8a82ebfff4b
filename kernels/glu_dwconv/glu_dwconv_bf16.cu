// run_glu_dwconv<__nv_bfloat16>: one dtype per file so that the dtypes compile in parallel.
#include <attnzoo/kernels/glu_dwconv/glu_dwconv_kernel.cuh>

namespace attnzoo::kernels {

template void run_glu_dwconv<__nv_bfloat16>(const GluDwConvParams& params, cudaStream_t stream);

}  // namespace attnzoo::kernels
