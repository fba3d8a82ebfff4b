// Tier 3 of the fused residual add + LayerNorm, CUDA part: turns tensors into AddLayerNormParams
// and AddLayerNormBwdParams and calls the launchers of tier 2. Registered for
// attnzoo::_add_layer_norm_forward and attnzoo::_add_layer_norm_backward, which
// attnzoo::add_layer_norm and its autograd formula call. Compiled only when the CUDA kernels are
// built (ATTNZOO_WITH_CUDA); without it, CUDA tensors take the LibTorch reference registered in
// add_layer_norm_op.cpp.
#include <attnzoo/kernels/add_layer_norm/add_layer_norm_op.h>
#include <attnzoo/kernels/add_layer_norm/add_layer_norm_params.h>
#include <attnzoo/kernels/common/cuda_dispatch.h>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <optional>

namespace attnzoo::kernels {
namespace {

const void* data_or_null(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? t->const_data_ptr() : nullptr;
}

std::optional<at::Tensor> contiguous(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? std::optional<at::Tensor>(t->contiguous()) : std::nullopt;
}

// x, residual: [..., N], weight, bias: [N]
//   -> sum [..., N], normed [..., N] (contiguous), mean [...], rstd [...] (float32)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> add_layer_norm_forward_cuda(
    const at::Tensor& x_arg, const at::Tensor& residual_arg,
    const std::optional<at::Tensor>& weight_arg, const std::optional<at::Tensor>& bias_arg,
    double eps) {
  check_add_layer_norm_inputs(x_arg, residual_arg, weight_arg, bias_arg, eps);
  if (x_arg.scalar_type() == at::kDouble) {
    // No fp64 instantiation: fp64 models are for checking, not speed.
    return add_layer_norm_reference(x_arg, residual_arg, weight_arg, bias_arg, eps);
  }
  const c10::cuda::CUDAGuard device_guard(x_arg.device());

  const std::optional<int64_t> x_stride = detail::collapsed_row_stride(x_arg);
  const std::optional<int64_t> residual_stride = detail::collapsed_row_stride(residual_arg);
  const at::Tensor x = x_stride ? x_arg : x_arg.contiguous();
  const at::Tensor residual = residual_stride ? residual_arg : residual_arg.contiguous();
  const std::optional<at::Tensor> weight = contiguous(weight_arg);
  const std::optional<at::Tensor> bias = contiguous(bias_arg);
  const int64_t cols = x.size(-1);
  const auto contiguous_format = x.options().memory_format(at::MemoryFormat::Contiguous);
  at::Tensor sum = at::empty(x.sizes(), contiguous_format);
  at::Tensor normed = at::empty(x.sizes(), contiguous_format);
  const auto leading = x.sizes().slice(0, x.dim() - 1);
  at::Tensor mean = at::empty(leading, x.options().dtype(at::kFloat));
  at::Tensor rstd = at::empty(leading, x.options().dtype(at::kFloat));
  if (sum.numel() == 0) {
    return {sum, normed, mean, rstd};
  }

  AddLayerNormParams params;
  params.x = x.const_data_ptr();
  params.residual = residual.const_data_ptr();
  params.weight = data_or_null(weight);
  params.bias = data_or_null(bias);
  params.sum = sum.mutable_data_ptr();
  params.normed = normed.mutable_data_ptr();
  params.mean = mean.mutable_data_ptr<float>();
  params.rstd = rstd.mutable_data_ptr<float>();
  params.rows = sum.numel() / cols;
  params.cols = cols;
  params.x_row_stride = x_stride.value_or(cols);
  params.residual_row_stride = residual_stride.value_or(cols);
  params.eps = static_cast<float>(eps);

  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  detail::dispatch_float_types(x.scalar_type(), "attnzoo::add_layer_norm", [&](auto tag) {
    run_add_layer_norm<decltype(tag)>(params, stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {sum, normed, mean, rstd};
}

// d_sum, d_normed, sum: [..., N], mean, rstd: [...] (float32), weight: [N]
//   -> d_x [..., N] (contiguous), d_weight [N], d_bias [N]
std::tuple<std::optional<at::Tensor>, std::optional<at::Tensor>, std::optional<at::Tensor>>
add_layer_norm_backward_cuda(const std::optional<at::Tensor>& d_sum_arg,
                             const at::Tensor& d_normed_arg, const at::Tensor& sum_arg,
                             const at::Tensor& mean_arg, const at::Tensor& rstd_arg,
                             const std::optional<at::Tensor>& weight_arg, bool need_x,
                             bool need_weight, bool need_bias) {
  check_add_layer_norm_backward_inputs(d_sum_arg, d_normed_arg, sum_arg, mean_arg, rstd_arg,
                                       weight_arg);
  const int64_t cols = sum_arg.size(-1);
  const bool has_weight = weight_arg && weight_arg->defined();
  need_weight = need_weight && has_weight;
  if (sum_arg.scalar_type() == at::kDouble || cols > kAddLayerNormBwdMaxCols ||
      sum_arg.numel() == 0 || !(need_x || need_weight || need_bias)) {
    // fp64 (no instantiation), rows too long for the kernel's registers, nothing to do.
    return add_layer_norm_backward_reference(d_sum_arg, d_normed_arg, sum_arg, mean_arg, rstd_arg,
                                             weight_arg, need_x, need_weight, need_bias);
  }
  const c10::cuda::CUDAGuard device_guard(sum_arg.device());

  const at::Tensor sum = sum_arg.contiguous();
  const at::Tensor d_normed = d_normed_arg.contiguous();
  const std::optional<at::Tensor> d_sum = contiguous(d_sum_arg);
  const std::optional<at::Tensor> weight = contiguous(weight_arg);
  const at::Tensor mean = mean_arg.contiguous();
  const at::Tensor rstd = rstd_arg.contiguous();
  const int64_t rows = sum.numel() / cols;
  // Enough warps to fill the GPU (about as many blocks as fit at once), few enough that the
  // partials stay small next to the rows themselves.
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t blocks =
      std::min((rows + kAddLayerNormBwdWarpsPerBlock - 1) / kAddLayerNormBwdWarpsPerBlock, 4 * sms);
  const int64_t num_warps = blocks * kAddLayerNormBwdWarpsPerBlock;
  const auto float_options = sum.options().dtype(at::kFloat);
  at::Tensor d_x =
      at::empty(sum.sizes(), sum.options().memory_format(at::MemoryFormat::Contiguous));
  at::Tensor weight_partial =
      need_weight ? at::empty({num_warps, cols}, float_options) : at::Tensor();
  at::Tensor bias_partial = need_bias ? at::empty({num_warps, cols}, float_options) : at::Tensor();

  AddLayerNormBwdParams params;
  params.d_sum = data_or_null(d_sum);
  params.d_normed = d_normed.const_data_ptr();
  params.sum = sum.const_data_ptr();
  params.mean = mean.const_data_ptr<float>();
  params.rstd = rstd.const_data_ptr<float>();
  params.weight = data_or_null(weight);
  params.d_x = d_x.mutable_data_ptr();
  params.d_weight_partial = need_weight ? weight_partial.mutable_data_ptr<float>() : nullptr;
  params.d_bias_partial = need_bias ? bias_partial.mutable_data_ptr<float>() : nullptr;
  params.rows = rows;
  params.cols = cols;
  params.num_warps = num_warps;

  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  detail::dispatch_float_types(
      sum.scalar_type(), "attnzoo::_add_layer_norm_backward",
      [&](auto tag) { run_add_layer_norm_backward<decltype(tag)>(params, stream); });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  std::optional<at::Tensor> d_weight;
  std::optional<at::Tensor> d_bias;
  if (need_weight) {
    d_weight = weight_partial.sum(0).to(sum.scalar_type());
  }
  if (need_bias) {
    d_bias = bias_partial.sum(0).to(sum.scalar_type());
  }
  return {need_x ? std::optional<at::Tensor>(d_x) : std::nullopt, d_weight, d_bias};
}

}  // namespace
}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CUDA, m) {
  m.impl("_add_layer_norm_forward", TORCH_FN(attnzoo::kernels::add_layer_norm_forward_cuda));
  m.impl("_add_layer_norm_backward", TORCH_FN(attnzoo::kernels::add_layer_norm_backward_cuda));
}
