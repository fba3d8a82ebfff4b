// Tier 3 of the bias + GELU epilogue, CUDA part: turns tensors into BiasGeluParams and calls the
// launcher of tier 2. Compiled only when the CUDA kernels are built (ATTNZOO_WITH_CUDA); without
// it, CUDA tensors take the LibTorch reference registered in bias_gelu_op.cpp.
#include <attnzoo/kernels/bias_gelu/bias_gelu_op.h>
#include <attnzoo/kernels/bias_gelu/bias_gelu_params.h>
#include <attnzoo/kernels/common/cuda_dispatch.h>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <optional>

namespace attnzoo::kernels {
namespace {

// x: [..., N], bias: [N] -> [..., N] (contiguous)
at::Tensor bias_gelu_cuda(const at::Tensor& x_arg, const at::Tensor& bias_arg,
                          c10::string_view approximate) {
  check_bias_gelu_inputs(x_arg, bias_arg, approximate);
  if (x_arg.scalar_type() == at::kDouble) {
    // No fp64 instantiation: fp64 models are for checking, not speed.
    return bias_gelu_reference(x_arg, bias_arg, approximate);
  }
  const c10::cuda::CUDAGuard device_guard(x_arg.device());

  const std::optional<int64_t> row_stride = detail::collapsed_row_stride(x_arg);
  const at::Tensor x = row_stride ? x_arg : x_arg.contiguous();
  const at::Tensor bias = bias_arg.contiguous();
  const int64_t cols = x.size(-1);
  at::Tensor y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  if (y.numel() == 0) {
    return y;
  }

  BiasGeluParams params;
  params.x = x.const_data_ptr();
  params.bias = bias.const_data_ptr();
  params.y = y.mutable_data_ptr();
  params.rows = y.numel() / cols;
  params.cols = cols;
  params.x_row_stride = row_stride.value_or(cols);
  params.y_row_stride = cols;
  params.tanh_approximation = approximate == "tanh";

  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  detail::dispatch_float_types(x.scalar_type(), "attnzoo::bias_gelu",
                               [&](auto tag) { run_bias_gelu<decltype(tag)>(params, stream); });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

}  // namespace
}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CUDA, m) {
  m.impl("bias_gelu", TORCH_FN(attnzoo::kernels::bias_gelu_cuda));
}
