// Tier 3 of the fused residual add + LayerNorm, device-independent part: input checks, the
// LibTorch reference (registered for every backend without a fused kernel), the autograd formula,
// and the C++ entry point. The CUDA implementation is in add_layer_norm_cuda.cpp.
//
// Three schemas: attnzoo::add_layer_norm -> (sum, normed) is the op; its forward,
// attnzoo::_add_layer_norm_forward, also returns the row statistics (mean, rstd) that its
// backward, attnzoo::_add_layer_norm_backward, reuses. Only those two have per-backend
// implementations (the LibTorch reference; the CUDA kernels); add_layer_norm calls the forward
// through the dispatcher, below autograd, and its autograd formula calls the backward.
#include <attnzoo/kernels/add_layer_norm/add_layer_norm_op.h>

#include <attnzoo/kernels/ops.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>

namespace attnzoo::kernels {
namespace {

using AddLayerNormForwardSignature = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
    const std::optional<at::Tensor>&, double);
using AddLayerNormSignature = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&,
                                                                 const at::Tensor&,
                                                                 const std::optional<at::Tensor>&,
                                                                 const std::optional<at::Tensor>&,
                                                                 double);

const c10::TypedOperatorHandle<AddLayerNormForwardSignature>& forward_handle() {
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("attnzoo::_add_layer_norm_forward", "")
                                 .typed<AddLayerNormForwardSignature>();
  return handle;
}

using AddLayerNormBackwardSignature =
    std::tuple<std::optional<at::Tensor>, std::optional<at::Tensor>, std::optional<at::Tensor>>(
        const std::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
        const at::Tensor&, const std::optional<at::Tensor>&, bool, bool, bool);

const c10::TypedOperatorHandle<AddLayerNormBackwardSignature>& backward_handle() {
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("attnzoo::_add_layer_norm_backward", "")
                                 .typed<AddLayerNormBackwardSignature>();
  return handle;
}

const c10::TypedOperatorHandle<AddLayerNormSignature>& add_layer_norm_handle() {
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("attnzoo::add_layer_norm", "")
                                 .typed<AddLayerNormSignature>();
  return handle;
}

at::ScalarType stat_type(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

std::optional<at::Tensor> to_type(const std::optional<at::Tensor>& t, at::ScalarType type) {
  return t ? std::optional<at::Tensor>(t->to(type)) : std::nullopt;
}

// Registered for all backends (CompositeExplicitAutograd): CPU and Meta (shape inference) always,
// and CUDA when the CUDA kernels are not built, so a CPU-only build still runs on GPU tensors.
// x, residual: [..., N], weight, bias: [N] -> sum, normed [..., N], mean, rstd [...]
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> forward_checked_reference(
    const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps) {
  check_add_layer_norm_inputs(x, residual, weight, bias, eps);
  return add_layer_norm_reference(x, residual, weight, bias, eps);
}

// The backward's reference, registered as the forward's is.
std::tuple<std::optional<at::Tensor>, std::optional<at::Tensor>, std::optional<at::Tensor>>
backward_checked_reference(const std::optional<at::Tensor>& d_sum, const at::Tensor& d_normed,
                           const at::Tensor& sum, const at::Tensor& mean, const at::Tensor& rstd,
                           const std::optional<at::Tensor>& weight, bool need_x, bool need_weight,
                           bool need_bias) {
  check_add_layer_norm_backward_inputs(d_sum, d_normed, sum, mean, rstd, weight);
  return add_layer_norm_backward_reference(d_sum, d_normed, sum, mean, rstd, weight, need_x,
                                           need_weight, need_bias);
}

// add_layer_norm on every backend, below autograd: the forward without its statistics.
// x, residual: [..., N], weight, bias: [N] -> sum, normed [..., N]
std::tuple<at::Tensor, at::Tensor> add_layer_norm_composite(const at::Tensor& x,
                                                            const at::Tensor& residual,
                                                            const std::optional<at::Tensor>& weight,
                                                            const std::optional<at::Tensor>& bias,
                                                            double eps) {
  auto [sum, normed, mean, rstd] = forward_handle().call(x, residual, weight, bias, eps);
  return {std::move(sum), std::move(normed)};
}

// The backward (attnzoo::_add_layer_norm_backward: a fused kernel on CUDA, LibTorch ops
// elsewhere) computes, with xhat = (sum - mean) * rstd and
// g = d_normed * weight (per row, N = row length),
//   d_sum_total = d_sum + rstd * (g - mean(g) - xhat * mean(g * xhat)),
//   d_weight = sum over rows of d_normed * xhat,   d_bias = sum over rows of d_normed,
// and d_x = d_residual = d_sum_total. It reuses the forward's statistics, except under
// create_graph, where the LibTorch ops run on statistics recomputed from the saved sum, so that
// they carry their own derivatives (double backward).
class AddLayerNormFunction : public torch::autograd::Function<AddLayerNormFunction> {
 public:
  // x, residual: [..., N], weight, bias: [N] -> {sum [..., N], normed [..., N]}
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& x, const at::Tensor& residual,
                                                const std::optional<at::Tensor>& weight,
                                                const std::optional<at::Tensor>& bias, double eps) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [sum, normed, mean, rstd] = forward_handle().call(x, residual, weight, bias, eps);
    // sum is an output (saved as such); mean and rstd are not differentiable and never returned.
    ctx->save_for_backward({sum, mean, rstd, weight.value_or(at::Tensor())});
    // needs_input_grad counts only the tensors that were passed (an absent optional has no edge).
    const bool has_weight = weight.has_value() && weight->defined();
    const bool has_bias = bias.has_value() && bias->defined();
    ctx->saved_data["weight_edge"] = has_weight ? int64_t{2} : int64_t{-1};
    ctx->saved_data["bias_edge"] = has_bias ? (has_weight ? int64_t{3} : int64_t{2}) : int64_t{-1};
    ctx->saved_data["eps"] = eps;
    // Either output may be unused: its gradient then arrives undefined instead of as zeros.
    ctx->set_materialize_grads(false);
    return {sum, normed};
  }

  // grads: {d_sum [..., N] or undefined, d_normed [..., N] or undefined}
  //   -> {d_x [..., N], d_residual [..., N], d_weight [N], d_bias [N], none}
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& sum = saved[0];
    const at::Tensor& weight = saved[3];
    const at::Tensor& d_sum = grads[0];
    const at::Tensor& d_normed = grads[1];
    const int64_t weight_edge = ctx->saved_data["weight_edge"].toInt();
    const int64_t bias_edge = ctx->saved_data["bias_edge"].toInt();
    const bool need_x = ctx->needs_input_grad(0) || ctx->needs_input_grad(1);
    const bool need_weight = weight_edge >= 0 && ctx->needs_input_grad(weight_edge);
    const bool need_bias = bias_edge >= 0 && ctx->needs_input_grad(bias_edge);

    at::Tensor d_total;  // d loss / d sum, through both outputs
    at::Tensor d_weight;
    at::Tensor d_bias;
    const std::optional<at::Tensor> d_sum_opt =
        d_sum.defined() ? std::optional<at::Tensor>(d_sum) : std::nullopt;
    const std::optional<at::Tensor> weight_opt =
        weight.defined() ? std::optional<at::Tensor>(weight) : std::nullopt;
    std::tuple<std::optional<at::Tensor>, std::optional<at::Tensor>, std::optional<at::Tensor>>
        result;
    if (!d_normed.defined()) {
      d_total = d_sum;  // undefined too when neither output was used
    } else if (at::GradMode::is_enabled()) {
      // create_graph: LibTorch ops on statistics recomputed from the saved sum, so that the
      // gradients are themselves differentiable in sum (hence x, residual) and weight.
      const auto s = sum.to(saved[1].scalar_type());
      const auto mean = s.mean(-1);
      const auto rstd = at::rsqrt(at::var(s, -1, /*unbiased=*/false, /*keepdim=*/false) +
                                  ctx->saved_data["eps"].toDouble());
      result = add_layer_norm_backward_reference(d_sum_opt, d_normed, sum, mean, rstd, weight_opt,
                                                 need_x, need_weight, need_bias);
    } else {
      result = backward_handle().call(d_sum_opt, d_normed, sum, saved[1], saved[2], weight_opt,
                                      need_x, need_weight, need_bias);
    }
    if (d_normed.defined()) {
      d_total = std::get<0>(result).value_or(at::Tensor());
      d_weight = std::get<1>(result).value_or(at::Tensor());
      d_bias = std::get<2>(result).value_or(at::Tensor());
    }
    at::Tensor d_x;
    at::Tensor d_residual;
    if (ctx->needs_input_grad(0)) {
      d_x = d_total;
    }
    if (ctx->needs_input_grad(1)) {
      d_residual = d_total;
    }
    return {d_x, d_residual, d_weight, d_bias, at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> add_layer_norm_autograd(const at::Tensor& x,
                                                           const at::Tensor& residual,
                                                           const std::optional<at::Tensor>& weight,
                                                           const std::optional<at::Tensor>& bias,
                                                           double eps) {
  auto outputs = AddLayerNormFunction::apply(x, residual, weight, bias, eps);
  return {outputs[0], outputs[1]};
}

}  // namespace

void check_add_layer_norm_inputs(const at::Tensor& x, const at::Tensor& residual,
                                 const std::optional<at::Tensor>& weight,
                                 const std::optional<at::Tensor>& bias, double eps) {
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0,
              "attnzoo::add_layer_norm: x must have shape [..., N] with N > 0, got shape ",
              x.sizes());
  TORCH_CHECK(x.is_floating_point(),
              "attnzoo::add_layer_norm: x must be a floating-point tensor, got ", x.scalar_type());
  TORCH_CHECK(residual.sizes() == x.sizes(),
              "attnzoo::add_layer_norm: residual must have x's shape ", x.sizes(), ", got shape ",
              residual.sizes());
  TORCH_CHECK(residual.scalar_type() == x.scalar_type(),
              "attnzoo::add_layer_norm: residual must have x's dtype ", x.scalar_type(), ", got ",
              residual.scalar_type());
  TORCH_CHECK(residual.device() == x.device(),
              "attnzoo::add_layer_norm: residual must be on x's device ", x.device(), ", got ",
              residual.device());
  const std::pair<const char*, const std::optional<at::Tensor>*> params[] = {{"weight", &weight},
                                                                             {"bias", &bias}};
  for (const auto& [name, param] : params) {
    if (!param->has_value() || !(*param)->defined()) {
      continue;
    }
    const at::Tensor& p = **param;
    TORCH_CHECK(p.dim() == 1 && p.size(0) == x.size(-1), "attnzoo::add_layer_norm: ", name,
                " must be 1-D of shape [N] = [", x.size(-1), "] (N = last dim of x, shape ",
                x.sizes(), "), got shape ", p.sizes());
    TORCH_CHECK(p.scalar_type() == x.scalar_type(), "attnzoo::add_layer_norm: ", name,
                " must have x's dtype ", x.scalar_type(), ", got ", p.scalar_type());
    TORCH_CHECK(p.device() == x.device(), "attnzoo::add_layer_norm: ", name,
                " must be on x's device ", x.device(), ", got ", p.device());
  }
  TORCH_CHECK(std::isfinite(eps) && eps >= 0,
              "attnzoo::add_layer_norm: eps must be finite and >= 0, got ", eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> add_layer_norm_reference(
    const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps) {
  const auto sum = (x + residual).contiguous();
  const auto stat = stat_type(x);
  const auto leading = x.sizes().slice(0, x.dim() - 1);
  if (x.is_meta()) {
    // Shapes and dtypes only: LibTorch's layer_norm has no Meta kernel.
    return {sum, at::empty_like(sum), at::empty(leading, sum.options().dtype(stat)),
            at::empty(leading, sum.options().dtype(stat))};
  }
  // LibTorch's layer_norm on the widened sum: on CPU, its statistics of a bf16/fp16 input would
  // come back rounded to that dtype.
  auto [out, mean, rstd] = at::native_layer_norm(sum.to(stat), {x.size(-1)}, to_type(weight, stat),
                                                 to_type(bias, stat), eps);
  return {sum, out.to(x.scalar_type()), mean.reshape(leading), rstd.reshape(leading)};
}

void check_add_layer_norm_backward_inputs(const std::optional<at::Tensor>& d_sum,
                                          const at::Tensor& d_normed, const at::Tensor& sum,
                                          const at::Tensor& mean, const at::Tensor& rstd,
                                          const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(sum.dim() >= 1 && sum.size(-1) > 0 && sum.is_floating_point(),
              "attnzoo::_add_layer_norm_backward: sum must be a floating-point [..., N] with N > "
              "0, got ",
              sum.scalar_type(), " ", sum.sizes());
  TORCH_CHECK(d_normed.sizes() == sum.sizes() && d_normed.scalar_type() == sum.scalar_type() &&
                  d_normed.device() == sum.device(),
              "attnzoo::_add_layer_norm_backward: d_normed must have sum's shape ", sum.sizes(),
              ", dtype ", sum.scalar_type(), " and device ", sum.device(), ", got ",
              d_normed.sizes(), ", ", d_normed.scalar_type(), ", ", d_normed.device());
  if (d_sum && d_sum->defined()) {
    TORCH_CHECK(d_sum->sizes() == sum.sizes() && d_sum->scalar_type() == sum.scalar_type() &&
                    d_sum->device() == sum.device(),
                "attnzoo::_add_layer_norm_backward: d_sum must have sum's shape ", sum.sizes(),
                ", dtype ", sum.scalar_type(), " and device ", sum.device(), ", got ",
                d_sum->sizes(), ", ", d_sum->scalar_type(), ", ", d_sum->device());
  }
  const auto leading = sum.sizes().slice(0, sum.dim() - 1);
  for (const auto& [name, stat] : {std::pair<const char*, const at::Tensor*>{"mean", &mean},
                                   std::pair<const char*, const at::Tensor*>{"rstd", &rstd}}) {
    TORCH_CHECK(stat->sizes() == leading && stat->scalar_type() == stat_type(sum) &&
                    stat->device() == sum.device(),
                "attnzoo::_add_layer_norm_backward: ", name, " must be ", stat_type(sum), " ",
                leading, " on ", sum.device(), ", got ", stat->scalar_type(), " ", stat->sizes(),
                " on ", stat->device());
  }
  if (weight && weight->defined()) {
    TORCH_CHECK(weight->dim() == 1 && weight->size(0) == sum.size(-1) &&
                    weight->scalar_type() == sum.scalar_type() && weight->device() == sum.device(),
                "attnzoo::_add_layer_norm_backward: weight must be ", sum.scalar_type(), " [",
                sum.size(-1), "] on ", sum.device(), ", got ", weight->scalar_type(), " ",
                weight->sizes(), " on ", weight->device());
  }
}

std::tuple<std::optional<at::Tensor>, std::optional<at::Tensor>, std::optional<at::Tensor>>
add_layer_norm_backward_reference(const std::optional<at::Tensor>& d_sum,
                                  const at::Tensor& d_normed, const at::Tensor& sum,
                                  const at::Tensor& mean, const at::Tensor& rstd,
                                  const std::optional<at::Tensor>& weight, bool need_x,
                                  bool need_weight, bool need_bias) {
  const auto stat = mean.scalar_type();
  const int64_t n = sum.size(-1);
  const auto m = mean.unsqueeze(-1);
  const auto r = rstd.unsqueeze(-1);
  const auto xhat = (sum.to(stat) - m) * r;
  const auto dn = d_normed.to(stat);
  const bool has_weight = weight && weight->defined();
  std::optional<at::Tensor> d_x;
  std::optional<at::Tensor> d_weight;
  std::optional<at::Tensor> d_bias;
  if (need_x) {
    const auto g = has_weight ? dn * weight->to(stat) : dn;
    auto d_s =
        r * (g - g.mean(-1, /*keepdim=*/true) - xhat * (g * xhat).mean(-1, /*keepdim=*/true));
    if (d_sum && d_sum->defined()) {
      d_s = d_s + d_sum->to(stat);  // one rounding to sum's dtype, below
    }
    d_x = d_s.to(sum.scalar_type());
  }
  if (need_weight && has_weight) {
    d_weight = (dn * xhat).reshape({-1, n}).sum(0).to(sum.scalar_type());
  }
  if (need_bias) {
    d_bias = dn.reshape({-1, n}).sum(0).to(sum.scalar_type());
  }
  return {d_x, d_weight, d_bias};
}

std::tuple<torch::Tensor, torch::Tensor> add_layer_norm(const torch::Tensor& x,
                                                        const torch::Tensor& residual,
                                                        const std::optional<torch::Tensor>& weight,
                                                        const std::optional<torch::Tensor>& bias,
                                                        double eps) {
  return add_layer_norm_handle().call(x, residual, weight, bias, eps);
}

}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CompositeExplicitAutograd, m) {
  m.impl("_add_layer_norm_forward", TORCH_FN(attnzoo::kernels::forward_checked_reference));
  m.impl("add_layer_norm", TORCH_FN(attnzoo::kernels::add_layer_norm_composite));
  m.impl("_add_layer_norm_backward", TORCH_FN(attnzoo::kernels::backward_checked_reference));
}

TORCH_LIBRARY_IMPL(attnzoo, Autograd, m) {
  m.impl("add_layer_norm", TORCH_FN(attnzoo::kernels::add_layer_norm_autograd));
}
