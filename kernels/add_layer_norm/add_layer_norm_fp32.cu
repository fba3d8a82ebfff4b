// run_add_layer_norm<float> and its backward: one dtype per file so that the dtypes compile in
// parallel.
#include <attnzoo/kernels/add_layer_norm/add_layer_norm_kernel.cuh>

namespace attnzoo::kernels {

template void run_add_layer_norm<float>(const AddLayerNormParams& params, cudaStream_t stream);

template void run_add_layer_norm_backward<float>(const AddLayerNormBwdParams& params,
                                                 cudaStream_t stream);

}  // namespace attnzoo::kernels
