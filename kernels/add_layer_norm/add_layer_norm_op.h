#pragma once
// Shared by the implementations of attnzoo::add_layer_norm, of its forward with statistics
// (attnzoo::_add_layer_norm_forward) and of its backward (attnzoo::_add_layer_norm_backward), in
// add_layer_norm_op.cpp and add_layer_norm_cuda.cpp.
#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace attnzoo::kernels {

// TORCH_CHECKs of every backend: a direct dispatcher call (torch.ops.attnzoo.add_layer_norm) does
// not pass through the C++ entry in ops.h, so the checks cannot live there.
void check_add_layer_norm_inputs(const at::Tensor& x, const at::Tensor& residual,
                                 const std::optional<at::Tensor>& weight,
                                 const std::optional<at::Tensor>& bias, double eps);

// The pure-LibTorch definition of the op's forward, and the oracle of its tests. No checks.
// sum = x + residual (x's dtype), normed = at::layer_norm(sum) over the last dim, computed in
// float32 (float64 for float64 inputs) and rounded to x's dtype; mean and rstd are the statistics
// of sum in that same dtype, shaped like x without its last dim.
// x, residual: [..., N], weight, bias: [N]
//   -> sum [..., N], normed [..., N], mean [...], rstd [...] (float32, or float64)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> add_layer_norm_reference(
    const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps);

// The checks of attnzoo::_add_layer_norm_backward, which autograd calls with the forward's saved
// tensors: an internal op, but a direct call must not read out of bounds either.
void check_add_layer_norm_backward_inputs(const std::optional<at::Tensor>& d_sum,
                                          const at::Tensor& d_normed, const at::Tensor& sum,
                                          const at::Tensor& mean, const at::Tensor& rstd,
                                          const std::optional<at::Tensor>& weight);

// The backward in LibTorch ops (differentiable, which double backward relies on). With
// xhat = (sum - mean) * rstd and g = d_normed * weight, per row:
//   d_x = d_sum + rstd * (g - mean(g) - xhat * mean(g * xhat)),
//   d_weight = sum over rows of d_normed * xhat, d_bias = sum over rows of d_normed;
// each only when asked for (need_*; d_weight only with a weight), else nullopt. In the dtype of
// mean (float32, or float64), rounded to sum's dtype at the end.
// d_sum, d_normed, sum: [..., N], mean, rstd: [...], weight: [N]
//   -> d_x [..., N], d_weight [N], d_bias [N]
std::tuple<std::optional<at::Tensor>, std::optional<at::Tensor>, std::optional<at::Tensor>>
add_layer_norm_backward_reference(const std::optional<at::Tensor>& d_sum,
                                  const at::Tensor& d_normed, const at::Tensor& sum,
                                  const at::Tensor& mean, const at::Tensor& rstd,
                                  const std::optional<at::Tensor>& weight, bool need_x,
                                  bool need_weight, bool need_bias);

}  // namespace attnzoo::kernels
