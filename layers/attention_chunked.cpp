// The `chunked` backend: exact softmax attention without the [B, H, L, S] score matrix.
//
// Queries and keys are taken options.chunk_size at a time. Each query chunk streams over the key
// chunks with an online softmax — a running row maximum m, a running denominator ℓ and an output
// accumulator rescaled by exp(m_old − m_new) whenever the maximum grows — as in Rabe & Staats 2021,
// "Self-attention Does Not Need O(n²) Memory", and Dao et al. 2022/2023, FlashAttention(-2),
// Algorithm 1. Masks and the bias are sliced or rebuilt per (query chunk, key chunk) tile, never
// expanded to [B, H, L, S]; tiles that exclude every (query, key) pair (above a causal diagonal,
// past the longest key_lengths entry) are skipped.
//
// Backward: a custom autograd function saves q, k, v, the output and the per-row log-sum-exp, and
// recomputes each tile's probabilities from them (FlashAttention-2, Algorithm 2):
//   P = exp(S − lse),  dV += Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − rowsum(dO ∘ O)),
//   dQ += scale · dS K,  dK += scale · dSᵀ Q,  d(bias) += dS (summed over broadcast dims).
// Memory, forward and backward: O(B·H·chunk²) for one tile plus O(B·H·(L + S)·E) for the inputs,
// outputs, gradients and the [B, H, L, 1] statistics. Only first-order gradients are provided.
//
// Dropout is not supported (this path serves inference and memory-bound training without attention
// dropout); nor are the probabilities (need_weights), which are exactly what it avoids building.
#include <attnzoo/layers/attention_backend.h>
#include <attnzoo/layers/attention_internal.h>
#include <attnzoo/layers/attention_tiles.h>

#include <torch/autograd.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

namespace attnzoo {
namespace {

using detail::accumulation_type;
using detail::as_4d;
using detail::reduce_to;
using detail::tile_of;
using detail::TileMasks;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Everything besides q, k, v and the bias that the tiles need, on the device of q.
struct ChunkedSpec {
  TileMasks masks;
  double scale = 1.0;
  int64_t chunk = 256;
};

// Scores of one tile: scale·q·kᵀ + bias, excluded pairs at −inf. q_tile is already scaled.
// q_tile: [B, H, lc, E], k_tile: [B, H, sc, E] -> [B, H, lc, sc]
torch::Tensor tile_scores(const ChunkedSpec& spec, const torch::Tensor& q_tile,
                          const torch::Tensor& k_tile, const torch::Tensor& bias4, int64_t i0,
                          int64_t j0) {
  const int64_t lc = q_tile.size(2), sc = k_tile.size(2);
  auto s = torch::matmul(q_tile, k_tile.transpose(-2, -1));
  if (bias4.defined()) s.add_(tile_of(bias4, i0, lc, j0, sc).to(s.scalar_type()));
  if (auto allowed = spec.masks.allowed(i0, lc, j0, sc, s.device())) {
    s.masked_fill_(allowed->logical_not(), -kInf);
  }
  return s;
}

class ChunkedAttentionFunction : public torch::autograd::Function<ChunkedAttentionFunction> {
 public:
  // query: [B, H, L, E], key: [B, H, S, E], value: [B, H, S, Ev], bias broadcastable to
  // [B, H, L, S] -> [B, H, L, Ev]
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& query,
                               const torch::Tensor& key, const torch::Tensor& value,
                               const std::optional<torch::Tensor>& bias, const ChunkedSpec& spec) {
    const auto acc = accumulation_type(query.scalar_type());
    const auto q = query.to(acc), k = key.to(acc), v = value.to(acc);
    const auto bias4 = bias ? as_4d(*bias) : torch::Tensor();
    const int64_t b = q.size(0), h = q.size(1), l = q.size(2), s = k.size(2), ev = v.size(3);
    const int64_t chunk = spec.chunk;
    auto out = torch::empty({b, h, l, ev}, q.options());
    auto lse = torch::empty({b, h, l, 1}, q.options());  // log Σ_j exp(S_ij) per row
    for (int64_t i0 = 0; i0 < l; i0 += chunk) {
      const int64_t lc = std::min(chunk, l - i0);
      const auto q_tile = q.narrow(2, i0, lc) * spec.scale;
      auto row_max = torch::full({b, h, lc, 1}, -kInf, q.options());
      auto row_sum = torch::zeros({b, h, lc, 1}, q.options());
      auto acc_out = torch::zeros({b, h, lc, ev}, q.options());
      for (int64_t j0 = 0; j0 < s; j0 += chunk) {
        if (spec.masks.excluded(i0, lc, j0)) continue;
        const int64_t sc = std::min(chunk, s - j0);
        const auto scores = tile_scores(spec, q_tile, k.narrow(2, j0, sc), bias4, i0, j0);
        const auto new_max = torch::maximum(row_max, scores.amax(-1, /*keepdim=*/true));
        // A row with no allowed key so far keeps its maximum at −inf; shifting it by 0 instead
        // makes exp() give 0 rather than exp(−inf − (−inf)) = NaN.
        const auto shift = new_max.masked_fill(torch::isneginf(new_max), 0.0);
        const auto probs = (scores - shift).exp_();  // unnormalised, [B, H, lc, sc]
        const auto rescale = (row_max - shift).exp_();
        row_sum.mul_(rescale).add_(probs.sum(-1, /*keepdim=*/true));
        acc_out.mul_(rescale).add_(torch::matmul(probs, v.narrow(2, j0, sc)));
        row_max = new_max;
      }
      // Each row with an allowed key has a term exp(max − max) = 1 in its sum, so a zero sum marks
      // exactly the rows that exclude every key: their output is zero (acc_out is zero there) and
      // their lse +inf, which makes the backward's recomputed probabilities exp(S − lse) zero.
      const auto empty_row = row_sum == 0;
      out.narrow(2, i0, lc).copy_(acc_out / row_sum.masked_fill(empty_row, 1.0));
      lse.narrow(2, i0, lc).copy_((row_max + row_sum.log()).masked_fill(empty_row, kInf));
    }
    out = out.to(query.scalar_type());
    ctx->save_for_backward({query, key, value, bias ? *bias : torch::Tensor(), out, lse});
    save_spec(ctx, spec);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    // The backward below is written with plain tensor ops on saved values; traced for a second
    // derivative it would treat lse as a constant and give wrong results, so refuse instead.
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "attention backend 'chunked': double backward (create_graph=true) is not "
                "supported; use the math or sdpa backend");
    const auto spec = load_spec(ctx);
    const auto saved = ctx->get_saved_variables();
    const auto& query = saved[0];
    const auto& key = saved[1];
    const auto& value = saved[2];
    const auto& bias = saved[3];
    const auto acc = accumulation_type(query.scalar_type());
    const auto q = query.to(acc), k = key.to(acc), v = value.to(acc);
    const auto out = saved[4].to(acc);
    const auto& lse = saved[5];
    const auto bias4 = bias.defined() ? as_4d(bias) : torch::Tensor();
    const auto d_out = grads[0].to(acc);  // [B, H, L, Ev]
    const int64_t l = q.size(2), s = k.size(2);
    const int64_t chunk = spec.chunk;

    // rowsum(dO ∘ O) = rowsum(P ∘ dP): the softmax Jacobian's correction term (FA-2, Alg. 2).
    const auto delta = (d_out * out).sum(-1, /*keepdim=*/true);  // [B, H, L, 1]
    auto dq = torch::zeros_like(q), dk = torch::zeros_like(k), dv = torch::zeros_like(v);
    const bool bias_grad = bias.defined() && bias.requires_grad();
    auto d_bias4 = bias_grad ? torch::zeros(bias4.sizes(), q.options()) : torch::Tensor();
    for (int64_t i0 = 0; i0 < l; i0 += chunk) {
      const int64_t lc = std::min(chunk, l - i0);
      const auto q_tile = q.narrow(2, i0, lc) * spec.scale;
      const auto d_out_tile = d_out.narrow(2, i0, lc);
      const auto lse_tile = lse.narrow(2, i0, lc);
      const auto delta_tile = delta.narrow(2, i0, lc);
      auto dq_tile = torch::zeros_like(q_tile);
      for (int64_t j0 = 0; j0 < s; j0 += chunk) {
        if (spec.masks.excluded(i0, lc, j0)) continue;
        const int64_t sc = std::min(chunk, s - j0);
        const auto k_tile = k.narrow(2, j0, sc);
        const auto v_tile = v.narrow(2, j0, sc);
        const auto probs = (tile_scores(spec, q_tile, k_tile, bias4, i0, j0) - lse_tile).exp_();
        dv.narrow(2, j0, sc).add_(torch::matmul(probs.transpose(-2, -1), d_out_tile));
        const auto d_probs = torch::matmul(d_out_tile, v_tile.transpose(-2, -1));
        const auto d_scores = probs.mul_(d_probs.sub_(delta_tile));  // [B, H, lc, sc]
        if (bias_grad) {
          tile_of(d_bias4, i0, lc, j0, sc)
              .add_(reduce_to(d_scores, tile_of(bias4, i0, lc, j0, sc)));
        }
        dq_tile.add_(torch::matmul(d_scores, k_tile));
        // q_tile carries the scale already: dK = scale · dSᵀ Q.
        dk.narrow(2, j0, sc).add_(torch::matmul(d_scores.transpose(-2, -1), q_tile));
      }
      dq.narrow(2, i0, lc).copy_(dq_tile.mul_(spec.scale));
    }
    torch::Tensor d_bias;
    if (bias_grad) d_bias = d_bias4.view(bias.sizes()).to(bias.scalar_type());
    return {dq.to(query.scalar_type()), dk.to(key.scalar_type()), dv.to(value.scalar_type()),
            d_bias, torch::Tensor()};
  }

 private:
  static void save_spec(torch::autograd::AutogradContext* ctx, const ChunkedSpec& spec) {
    spec.masks.save(ctx, "");
    ctx->saved_data["scale"] = spec.scale;
    ctx->saved_data["chunk"] = spec.chunk;
  }

  static ChunkedSpec load_spec(torch::autograd::AutogradContext* ctx) {
    ChunkedSpec spec;
    spec.masks = TileMasks::load(ctx, "");
    spec.scale = ctx->saved_data.at("scale").toDouble();
    spec.chunk = ctx->saved_data.at("chunk").toInt();
    return spec;
  }
};

class ChunkedAttention final : public AttentionBackend {
 public:
  std::string name() const override { return "chunked"; }
  // Below sdpa (whose fused kernels are faster and also O(N) in memory) and above math: "auto"
  // takes it when sdpa cannot.
  int priority() const override { return 5; }

  std::string unsupported_reason(const AttentionProblem& p) const override {
    if (p.need_weights) {
      return "it never forms the [B, H, L, S] attention weights (need_weights); use math";
    }
    if (p.dropout_p > 0.0) {
      return "dropout on the attention probabilities is not supported (the chunked path is for "
             "inference and memory-bound training without attention dropout); set attn_drop to 0 "
             "or use sdpa or math";
    }
    return {};
  }

  AttentionResult run(const AttentionProblem& p) const override {
    const auto& mask = p.mask;
    const auto device = p.query.device();
    ChunkedSpec spec;
    spec.masks = TileMasks::of(mask, p.query_len(), p.key_len(), device);
    spec.scale = p.scale;
    spec.chunk = p.options.chunk_size();
    std::optional<torch::Tensor> bias;
    if (mask.bias().defined()) bias = mask.bias().to(device);
    AttentionResult result;
    result.output = ChunkedAttentionFunction::apply(p.query, p.key, p.value, bias, spec);
    return result;
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_chunked_attention_backend() {
  return std::make_unique<ChunkedAttention>();
}

}  // namespace attnzoo
