// Tier 3 of the Conformer convolution module's middle, CUDA part: turns tensors into
// GluDwConvParams and calls the launcher of tier 2. Compiled only when the CUDA kernels are built
// (ATTNZOO_WITH_CUDA); without it, CUDA tensors take the LibTorch reference registered in
// glu_dwconv_op.cpp.
#include <attnzoo/kernels/common/cuda_dispatch.h>
#include <attnzoo/kernels/glu_dwconv/glu_dwconv_op.h>
#include <attnzoo/kernels/glu_dwconv/glu_dwconv_params.h>

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

// x: [B, T, 2C] (any strides), weight: [C, K], bias, scale, shift: [C], lengths: integer [B]
//   -> [B, T, C] (contiguous)
at::Tensor glu_dwconv_cuda(const at::Tensor& x, const at::Tensor& weight_arg,
                           const std::optional<at::Tensor>& bias_arg, const at::Tensor& scale_arg,
                           const at::Tensor& shift_arg, int64_t left_pad,
                           const std::optional<at::Tensor>& lengths_arg) {
  check_glu_dwconv_swish_inputs(x, weight_arg, bias_arg, scale_arg, shift_arg, left_pad,
                                lengths_arg);
  if (x.scalar_type() == at::kDouble) {
    // No fp64 instantiation: fp64 models are for checking, not speed.
    return glu_dwconv_swish_reference(x, weight_arg, bias_arg, scale_arg, shift_arg, left_pad,
                                      lengths_arg);
  }
  const c10::cuda::CUDAGuard device_guard(x.device());

  // x is read by its strides, whatever they are (channels last, or the transposed view of a
  // channels-first tensor): never copied. The small tensors are made contiguous.
  const at::Tensor weight = weight_arg.contiguous();
  const at::Tensor bias = bias_arg ? bias_arg->contiguous() : at::Tensor();
  const at::Tensor scale = scale_arg.contiguous();
  const at::Tensor shift = shift_arg.contiguous();
  const at::Tensor lengths = lengths_arg ? lengths_arg->to(at::kLong).contiguous() : at::Tensor();
  const int64_t batch = x.size(0);
  const int64_t time = x.size(1);
  const int64_t channels = x.size(2) / 2;
  at::Tensor y =
      at::empty({batch, time, channels}, x.options().memory_format(at::MemoryFormat::Contiguous));
  if (y.numel() == 0) {
    return y;
  }

  GluDwConvParams params;
  params.x = x.const_data_ptr();
  params.weight = weight.const_data_ptr();
  params.bias = bias.defined() ? bias.const_data_ptr() : nullptr;
  params.scale = scale.const_data_ptr();
  params.shift = shift.const_data_ptr();
  params.lengths = lengths.defined() ? lengths.const_data_ptr<int64_t>() : nullptr;
  params.y = y.mutable_data_ptr();
  params.batch = batch;
  params.time = time;
  params.channels = channels;
  params.kernel_size = weight.size(1);
  params.left_pad = left_pad;
  params.x_batch_stride = x.stride(0);
  params.x_time_stride = x.stride(1);
  params.x_channel_stride = x.stride(2);

  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  detail::dispatch_float_types(x.scalar_type(), "attnzoo::glu_dwconv_swish",
                               [&](auto tag) { run_glu_dwconv<decltype(tag)>(params, stream); });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

}  // namespace
}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CUDA, m) {
  m.impl("glu_dwconv_swish", TORCH_FN(attnzoo::kernels::glu_dwconv_cuda));
}
