// Tier 3 of flash attention, device-independent part: input checks, the LibTorch reference
// (registered for every backend without a fused kernel), the autograd formula and the C++ entry.
// The CUDA implementation is in flash_attn_cuda.cpp.
#include <attnzoo/kernels/flash_attn/flash_attn_op.h>

#include <attnzoo/kernels/ops.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>

namespace attnzoo::kernels {
namespace {

using FlashSignature = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                          const at::Tensor&,
                                                          const std::optional<at::Tensor>&,
                                                          const std::optional<at::Tensor>&, bool,
                                                          bool, std::optional<double>);

const c10::TypedOperatorHandle<FlashSignature>& flash_handle() {
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("attnzoo::flash_attention", "")
                                 .typed<FlashSignature>();
  return handle;
}

using FlashBackwardSignature =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, std::optional<at::Tensor>>(
        const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
        const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
        const std::optional<at::Tensor>&, bool, bool, std::optional<double>, bool);

const c10::TypedOperatorHandle<FlashBackwardSignature>& flash_backward_handle() {
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("attnzoo::flash_attention_backward", "")
                                 .typed<FlashBackwardSignature>();
  return handle;
}

double resolved_scale(const at::Tensor& q, std::optional<double> scale) {
  return scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
}

// q [B, L, H, E], k [B, S, H, E] -> logits [B, H, L, S] (float32 for half inputs) with the bias
// added and the invisible keys at -inf.
at::Tensor masked_logits(const at::Tensor& q, const at::Tensor& k,
                         const std::optional<at::Tensor>& key_lengths,
                         const std::optional<at::Tensor>& bias, bool causal, bool bottom_right,
                         double scale) {
  const auto compute = at::isReducedFloatingType(q.scalar_type()) ? at::kFloat : q.scalar_type();
  const auto qh = q.transpose(1, 2).to(compute);  // [B, H, L, E]
  const auto kh = k.transpose(1, 2).to(compute);  // [B, H, S, E]
  auto logits = at::matmul(qh, kh.transpose(-2, -1)).mul_(scale);
  if (bias) logits.add_(bias->to(compute));
  const auto visible = flash_visible_mask(q.size(0), q.size(1), k.size(1), key_lengths, causal,
                                          bottom_right, q.device());
  if (visible.defined()) logits.masked_fill_(visible.logical_not(), -INFINITY);
  return logits;
}

// softmax(logits), 0 on rows without a visible key (lse = -inf). Normalised against the row's
// maximum, so that a row sums to 1 however large its logits: exp(logits - lse) would not once lse
// has lost log(S) to rounding (a row whose every logit is near -1e9).
at::Tensor probabilities(const at::Tensor& logits, const at::Tensor& lse) {
  const auto p = at::softmax(logits, -1);
  return at::where(at::isfinite(lse).unsqueeze(-1), p, at::zeros_like(p));
}

// v [B, S, H, E] as [B, H, S, E] in `compute`, with the rows past each entry's key length zeroed:
// their probabilities are 0, but 0 times whatever padding holds (NaN, inf) must not leak in.
at::Tensor visible_values(const at::Tensor& v, const std::optional<at::Tensor>& key_lengths,
                          at::ScalarType compute) {
  auto vh = v.transpose(1, 2).to(compute);
  if (!key_lengths) return vh;
  const auto keys = at::arange(v.size(1), v.options().dtype(at::kLong)).view({1, 1, -1, 1});
  const auto valid = keys < key_lengths->to(v.device(), at::kLong).view({-1, 1, 1, 1});
  return at::where(valid, vh, at::zeros({}, vh.options()));
}

// Registered for all backends (CompositeExplicitAutograd): CPU and Meta always, and CUDA when the
// CUDA kernels are not built.
std::tuple<at::Tensor, at::Tensor> flash_checked_reference(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, const std::optional<at::Tensor>& bias,
    bool causal, bool bottom_right, std::optional<double> scale) {
  check_flash_attention_inputs(q, k, v, key_lengths, bias);
  return flash_attention_reference(q, k, v, key_lengths, bias, causal, bottom_right,
                                   resolved_scale(q, scale));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, std::optional<at::Tensor>>
flash_backward_checked_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& out, const at::Tensor& d_out,
                                 const at::Tensor& lse,
                                 const std::optional<at::Tensor>& key_lengths,
                                 const std::optional<at::Tensor>& bias, bool causal,
                                 bool bottom_right, std::optional<double> scale,
                                 bool bias_requires_grad) {
  check_flash_attention_backward_inputs(q, k, v, out, d_out, lse, key_lengths, bias);
  return flash_attention_backward_reference(q, k, v, out, d_out, key_lengths, bias, causal,
                                            bottom_right, resolved_scale(q, scale),
                                            bias_requires_grad);
}

// The autograd formula: the backward is the op attnzoo::flash_attention_backward, through the
// dispatcher (the fused kernel on CUDA, the LibTorch reference elsewhere).
class FlashFunction : public torch::autograd::Function<FlashFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& v,
                                                const std::optional<at::Tensor>& key_lengths,
                                                const std::optional<at::Tensor>& bias, bool causal,
                                                bool bottom_right, std::optional<double> scale) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, lse] = flash_handle().call(q, k, v, key_lengths, bias, causal, bottom_right, scale);
    ctx->save_for_backward(
        {q, k, v, out, lse, key_lengths.value_or(at::Tensor()), bias.value_or(at::Tensor())});
    // needs_input_grad counts only the tensors that were passed (an absent optional has no edge).
    ctx->saved_data["bias_input"] = static_cast<int64_t>(key_lengths ? 4 : 3);
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["bottom_right"] = bottom_right;
    ctx->saved_data["scale"] = resolved_scale(q, scale);
    ctx->mark_non_differentiable({lse});
    return {out, lse};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const std::optional<at::Tensor> key_lengths =
        saved[5].defined() ? std::optional<at::Tensor>(saved[5]) : std::nullopt;
    const std::optional<at::Tensor> bias =
        saved[6].defined() ? std::optional<at::Tensor>(saved[6]) : std::nullopt;
    const bool bias_requires_grad =
        bias && ctx->needs_input_grad(ctx->saved_data["bias_input"].toInt());
    at::Tensor d_q, d_k, d_v, d_bias;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      auto [dq, dk, dv, db] = flash_backward_handle().call(
          q, k, v, out, grads[0], lse, key_lengths, bias, ctx->saved_data["causal"].toBool(),
          ctx->saved_data["bottom_right"].toBool(), ctx->saved_data["scale"].toDouble(),
          bias_requires_grad);
      d_q = ctx->needs_input_grad(0) ? dq : at::Tensor();
      d_k = ctx->needs_input_grad(1) ? dk : at::Tensor();
      d_v = ctx->needs_input_grad(2) ? dv : at::Tensor();
      if (bias_requires_grad) d_bias = db.value_or(at::Tensor());
    }
    return {d_q, d_k, d_v, at::Tensor(), d_bias, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> flash_autograd(const at::Tensor& q, const at::Tensor& k,
                                                  const at::Tensor& v,
                                                  const std::optional<at::Tensor>& key_lengths,
                                                  const std::optional<at::Tensor>& bias,
                                                  bool causal, bool bottom_right,
                                                  std::optional<double> scale) {
  auto outputs = FlashFunction::apply(q, k, v, key_lengths, bias, causal, bottom_right, scale);
  return {outputs[0], outputs[1]};
}

}  // namespace

at::Tensor flash_visible_mask(int64_t batch, int64_t q_len, int64_t k_len,
                              const std::optional<at::Tensor>& key_lengths, bool causal,
                              bool bottom_right, const at::Device& device) {
  at::Tensor visible;
  const auto options = at::TensorOptions().dtype(at::kLong).device(device);
  const auto keys = at::arange(k_len, options);
  if (key_lengths) {
    // [B, 1, 1, S]
    visible =
        keys.view({1, 1, 1, k_len}) < key_lengths->to(device, at::kLong).view({batch, 1, 1, 1});
  }
  if (causal) {
    const int64_t offset = bottom_right ? k_len - q_len : 0;
    const auto rows = at::arange(q_len, options).view({q_len, 1});
    const auto allowed = (keys.view({1, k_len}) <= rows + offset).view({1, 1, q_len, k_len});
    visible = visible.defined() ? visible.logical_and(allowed) : allowed;
  }
  return visible;
}

void check_flash_attention_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const std::optional<at::Tensor>& key_lengths,
                                  const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "attnzoo::flash_attention: q, k and v must be [B, L, H, E] / [B, S, H, E], got ",
              q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  TORCH_CHECK(q.is_floating_point(), "attnzoo::flash_attention: q must be floating-point, got ",
              q.scalar_type());
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              "attnzoo::flash_attention: k and v must have q's dtype ", q.scalar_type(), ", got ",
              k.scalar_type(), " and ", v.scalar_type());
  TORCH_CHECK(k.device() == q.device() && v.device() == q.device(),
              "attnzoo::flash_attention: k and v must be on q's device ", q.device());
  TORCH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && k.size(2) == q.size(2) &&
                  v.size(2) == q.size(2),
              "attnzoo::flash_attention: q, k and v must share B and H, got ", q.sizes(), ", ",
              k.sizes(), ", ", v.sizes());
  TORCH_CHECK(k.size(3) == q.size(3) && v.size(3) == q.size(3) && q.size(3) > 0,
              "attnzoo::flash_attention: q, k and v must share the head dim E > 0, got ", q.sizes(),
              ", ", k.sizes(), ", ", v.sizes());
  TORCH_CHECK(v.size(1) == k.size(1),
              "attnzoo::flash_attention: k and v must have the same S, got ", k.size(1), " and ",
              v.size(1));
  if (key_lengths) {
    TORCH_CHECK(key_lengths->dim() == 1 && key_lengths->size(0) == q.size(0) &&
                    !key_lengths->is_floating_point() && key_lengths->scalar_type() != at::kBool,
                "attnzoo::flash_attention: key_lengths must be integer [B] = [", q.size(0),
                "], got ", key_lengths->scalar_type(), " ", key_lengths->sizes());
    TORCH_CHECK(key_lengths->device() == q.device(),
                "attnzoo::flash_attention: key_lengths must be on q's device ", q.device());
  }
  if (bias) {
    const auto& b = *bias;
    TORCH_CHECK(b.dim() == 4 && (b.size(0) == 1 || b.size(0) == q.size(0)) &&
                    (b.size(1) == 1 || b.size(1) == q.size(2)) && b.size(2) == q.size(1) &&
                    b.size(3) == k.size(1),
                "attnzoo::flash_attention: bias must be [1|B, 1|H, L, S] = [1|", q.size(0), ", 1|",
                q.size(2), ", ", q.size(1), ", ", k.size(1), "], got ", b.sizes());
    TORCH_CHECK((b.scalar_type() == q.scalar_type() || b.scalar_type() == at::kFloat) &&
                    b.device() == q.device(),
                "attnzoo::flash_attention: bias must have q's dtype (or float32) and q's device, "
                "got ",
                b.scalar_type(), " on ", b.device());
  }
}

void check_flash_attention_backward_inputs(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, const at::Tensor& out,
                                           const at::Tensor& d_out, const at::Tensor& lse,
                                           const std::optional<at::Tensor>& key_lengths,
                                           const std::optional<at::Tensor>& bias) {
  check_flash_attention_inputs(q, k, v, key_lengths, bias);
  TORCH_CHECK(out.sizes() == q.sizes() && d_out.sizes() == q.sizes(),
              "attnzoo::flash_attention_backward: out and d_out must be q's shape ", q.sizes(),
              ", got ", out.sizes(), " and ", d_out.sizes());
  TORCH_CHECK(out.scalar_type() == q.scalar_type() && d_out.scalar_type() == q.scalar_type() &&
                  out.device() == q.device() && d_out.device() == q.device(),
              "attnzoo::flash_attention_backward: out and d_out must have q's dtype ",
              q.scalar_type(), " and device ", q.device(), ", got ", out.scalar_type(), " and ",
              d_out.scalar_type());
  TORCH_CHECK(
      lse.dim() == 3 && lse.size(0) == q.size(0) && lse.size(1) == q.size(2) &&
          lse.size(2) == q.size(1) && lse.scalar_type() == at::kFloat && lse.device() == q.device(),
      "attnzoo::flash_attention_backward: lse must be float32 [B, H, L] = [", q.size(0), ", ",
      q.size(2), ", ", q.size(1), "] on q's device, got ", lse.scalar_type(), " ", lse.sizes());
}

// FlashAttention's formulas on the recomputed probabilities: dV = P^T dO, dP = dO V^T,
// dS = P (dP - rowsum(dO O)), dQ = scale dS K, dK = scale dS^T Q, d(bias) = dS summed over its
// broadcast dims. Materialises [B, H, L, S].
std::tuple<at::Tensor, at::Tensor, at::Tensor, std::optional<at::Tensor>>
flash_attention_backward_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& out, const at::Tensor& d_out_arg,
                                   const std::optional<at::Tensor>& key_lengths,
                                   const std::optional<at::Tensor>& bias, bool causal,
                                   bool bottom_right, double scale, bool bias_requires_grad) {
  const auto compute = at::isReducedFloatingType(q.scalar_type()) ? at::kFloat : q.scalar_type();
  // The probabilities again, normalised in the compute dtype (the saved lse is float32).
  const auto logits = masked_logits(q, k, key_lengths, bias, causal, bottom_right, scale);
  const auto p = probabilities(logits, at::logsumexp(logits, -1));
  const auto d_out = d_out_arg.transpose(1, 2).to(compute);  // [B, H, L, E]
  const auto vh = visible_values(v, key_lengths, compute);
  const auto d_v = at::matmul(p.transpose(-2, -1), d_out);  // [B, H, S, E]
  const auto d_p = at::matmul(d_out, vh.transpose(-2, -1));
  const auto row = (d_out * out.transpose(1, 2).to(compute)).sum(-1, /*keepdim=*/true);
  const auto d_s = p * (d_p - row);  // [B, H, L, S]
  const auto d_q = at::matmul(d_s, visible_values(k, key_lengths, compute))
                       .mul_(scale)
                       .transpose(1, 2)
                       .to(q.scalar_type());
  const auto d_k = at::matmul(d_s.transpose(-2, -1), q.transpose(1, 2).to(compute))
                       .mul_(scale)
                       .transpose(1, 2)
                       .to(k.scalar_type());
  const auto d_v_out = d_v.transpose(1, 2).to(v.scalar_type());
  std::optional<at::Tensor> d_bias;
  if (bias && bias_requires_grad) {
    // Summed over the dims the bias was broadcast along.
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < 2; ++d) {
      if (bias->size(d) == 1 && d_s.size(d) != 1) dims.push_back(d);
    }
    d_bias = (dims.empty() ? d_s : d_s.sum(dims, /*keepdim=*/true)).to(bias->scalar_type());
  }
  return {d_q, d_k, d_v_out, d_bias};
}

std::tuple<at::Tensor, at::Tensor> flash_attention_reference(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, const std::optional<at::Tensor>& bias,
    bool causal, bool bottom_right, double scale) {
  const auto logits = masked_logits(q, k, key_lengths, bias, causal, bottom_right, scale);
  const auto lse = at::logsumexp(logits, -1);  // -inf on rows without a visible key
  const auto p = probabilities(logits, lse);
  const auto out = at::matmul(p, visible_values(v, key_lengths, logits.scalar_type()));
  return {out.transpose(1, 2).to(q.scalar_type()).contiguous(), lse.to(at::kFloat).contiguous()};
}

std::tuple<torch::Tensor, torch::Tensor> flash_attention(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const std::optional<torch::Tensor>& key_lengths, const std::optional<torch::Tensor>& bias,
    bool causal, bool bottom_right, std::optional<double> scale) {
  return flash_handle().call(q, k, v, key_lengths, bias, causal, bottom_right, scale);
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, std::optional<torch::Tensor>>
flash_attention_backward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         const torch::Tensor& out, const torch::Tensor& d_out,
                         const torch::Tensor& lse, const std::optional<torch::Tensor>& key_lengths,
                         const std::optional<torch::Tensor>& bias, bool causal, bool bottom_right,
                         std::optional<double> scale, bool bias_requires_grad) {
  return flash_backward_handle().call(q, k, v, out, d_out, lse, key_lengths, bias, causal,
                                      bottom_right, scale, bias_requires_grad);
}

}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CompositeExplicitAutograd, m) {
  m.impl("flash_attention", TORCH_FN(attnzoo::kernels::flash_checked_reference));
  m.impl("flash_attention_backward", TORCH_FN(attnzoo::kernels::flash_backward_checked_reference));
}

TORCH_LIBRARY_IMPL(attnzoo, Autograd, m) {
  m.impl("flash_attention", TORCH_FN(attnzoo::kernels::flash_autograd));
}
