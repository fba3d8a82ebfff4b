// The `linear` backend: linear attention, Katharopoulos et al. 2020, "Transformers are RNNs: Fast
// Autoregressive Transformers with Linear Attention". It APPROXIMATES softmax attention (exact()
// is false, so "auto" never picks it): the similarity exp(q·k) is replaced by the kernel
// φ(q)·φ(k) with the feature map φ(x) = elu(x) + 1 (the paper's §3.2), so that
//   out_i = φ(q_i)ᵀ (Σ_j φ(k_j) v_jᵀ) / (φ(q_i)ᵀ Σ_j φ(k_j))
// and the key sums are shared by every query: O(N) time and memory instead of O(N²).
//
// problem.scale is NOT applied: φ is applied to q and k as they are, as in the paper. (Scaling q
// before φ would change the kernel itself, not a softmax temperature, and has no softmax meaning.)
//
// Masks: excluded keys (key_lengths, key_padding_mask) have φ(k) and v zeroed, so they contribute
// to no sum. Causal masks use the paper's prefix sums (§3.3), here in the chunked form: the
// sums over earlier key chunks are carried as a state [B, H, E, Ev] (and [B, H, E, 1]), and the
// keys a query chunk sees beyond that state are handled by a small quadratic tile with the causal
// mask. Both alignments and L ≠ S are supported: query i sees the key prefix j <= i + offset.
// A per-pair attn_mask or additive bias cannot be folded into the key sums: unsupported.
// A query with no visible key has a zero denominator and yields zeros (guarded, no NaN).
//
// Memory: non-causal O(B·H·(L + S)·E + B·H·E·Ev). Causal, forward: one tile
// O(B·H·chunk²) plus the state; under autograd each query chunk keeps its own copy of the state,
// O(B·H·(L/chunk)·E·Ev), and its tile, O(B·H·L·chunk) in all — never [L, E, Ev] per position.
#include <attnzoo/layers/attention_backend.h>
#include <attnzoo/layers/attention_internal.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace attnzoo {
namespace {

using detail::accumulation_type;

// φ(x) = elu(x) + 1 > 0 (Katharopoulos et al., §3.2): a denominator is 0 only without keys.
torch::Tensor feature_map(const torch::Tensor& x) { return torch::elu(x) + 1.0; }

// Keys that take part, [B, 1, S, 1]; std::nullopt when every key does.
std::optional<torch::Tensor> valid_keys(const AttentionMask& mask, int64_t key_len,
                                        torch::Device device) {
  std::optional<torch::Tensor> valid;
  if (mask.key_lengths().defined()) {
    const auto keys =
        torch::arange(key_len, torch::TensorOptions().dtype(torch::kLong).device(device));
    valid = keys.view({1, key_len}) < mask.key_lengths().to(device, torch::kLong).view({-1, 1});
  }
  if (mask.key_padding_mask().defined()) {
    const auto kept = mask.key_padding_mask().to(device).logical_not();
    valid = valid ? torch::logical_and(*valid, kept) : kept;
  }
  if (valid) valid = valid->view({-1, 1, key_len, 1});
  return valid;
}

class LinearAttention final : public AttentionBackend {
 public:
  std::string name() const override { return "linear"; }
  int priority() const override { return -20; }
  bool exact() const override { return false; }

  std::string unsupported_reason(const AttentionProblem& p) const override {
    if (p.need_weights) {
      return "linear attention forms no attention weights (need_weights); use math";
    }
    if (p.dropout_p > 0.0) {
      return "dropout on the attention probabilities is undefined for linear attention (there are "
             "no probabilities); set attn_drop to 0";
    }
    const char* why =
        " cannot be expressed: linear attention sums the keys into a state shared by every query, "
        "so only key padding (key_lengths, key_padding_mask) and causal masks are supported";
    if (p.mask.attn_mask().defined()) return std::string("an attn_mask") + why;
    if (p.mask.bias().defined()) return std::string("an additive bias") + why;
    return {};
  }

  AttentionResult run(const AttentionProblem& p) const override {
    const auto acc = accumulation_type(p.query.scalar_type());
    const auto device = p.query.device();
    auto fq = feature_map(p.query.to(acc));  // [B, H, L, E]
    auto fk = feature_map(p.key.to(acc));    // [B, H, S, E]
    auto v = p.value.to(acc);                // [B, H, S, Ev]
    // masked_fill rather than a product: a padded key or value that is inf must not give NaN.
    if (auto valid = valid_keys(p.mask, p.key_len(), device)) {
      const auto excluded = valid->logical_not();
      fk = fk.masked_fill(excluded, 0.0);
      v = v.masked_fill(excluded, 0.0);
    }
    torch::Tensor numerator, denominator;  // [B, H, L, Ev], [B, H, L, 1]
    if (p.mask.causal()) {
      std::tie(numerator, denominator) = causal_sums(p, fq, fk, v);
    } else {
      const auto state = torch::matmul(fk.transpose(-2, -1), v);  // Σ_j φ(k_j) v_jᵀ: [B, H, E, Ev]
      const auto norm = fk.sum(2, /*keepdim=*/true).transpose(-2, -1);  // Σ_j φ(k_j): [B, H, E, 1]
      numerator = torch::matmul(fq, state);
      denominator = torch::matmul(fq, norm);
    }
    // φ > 0, so the denominator is zero exactly when the query sees no key (or φ underflowed);
    // such rows yield zeros. Dividing by 1 there keeps the gradient finite as well.
    const auto has_keys = denominator > 0;
    const auto out =
        torch::where(has_keys, numerator / denominator.masked_fill(has_keys.logical_not(), 1.0),
                     torch::zeros_like(numerator));
    AttentionResult result;
    result.output = out.to(p.query.scalar_type());
    return result;
  }

 private:
  // Causal numerator and denominator, chunk by chunk over the queries. Query i sees the key prefix
  // [0, visible(i)); visible() grows by at most one per query, so the keys a chunk of c queries
  // needs beyond the carried state number at most c − 1.
  // fq: [B, H, L, E], fk: [B, H, S, E], v: [B, H, S, Ev] -> [B, H, L, Ev], [B, H, L, 1]
  static std::pair<torch::Tensor, torch::Tensor> causal_sums(const AttentionProblem& p,
                                                             const torch::Tensor& fq,
                                                             const torch::Tensor& fk,
                                                             const torch::Tensor& v) {
    const int64_t l = p.query_len(), s = p.key_len(), chunk = p.options.chunk_size();
    const int64_t offset = p.mask.causal_alignment() == CausalAlignment::kBottomRight ? s - l : 0;
    const auto visible = [&](int64_t i) { return std::clamp<int64_t>(i + offset + 1, 0, s); };
    const auto index_options = torch::TensorOptions().dtype(torch::kLong).device(fq.device());
    // Σ_{j < summed} φ(k_j) v_jᵀ and Σ_{j < summed} φ(k_j): the RNN state of the paper's §3.4.
    auto state = torch::zeros({fk.size(0), fk.size(1), fk.size(3), v.size(3)}, fk.options());
    auto norm = torch::zeros({fk.size(0), fk.size(1), fk.size(3), 1}, fk.options());
    int64_t summed = 0;
    std::vector<torch::Tensor> numerators, denominators;
    for (int64_t i0 = 0; i0 < l; i0 += chunk) {
      const int64_t lc = std::min(chunk, l - i0);
      const int64_t lo = visible(i0), hi = visible(i0 + lc - 1);
      if (lo > summed) {  // every query of this chunk sees keys [summed, lo): into the state
        const auto fk_new = fk.narrow(2, summed, lo - summed);
        state = state + torch::matmul(fk_new.transpose(-2, -1), v.narrow(2, summed, lo - summed));
        norm = norm + fk_new.sum(2, /*keepdim=*/true).transpose(-2, -1);
        summed = lo;
      }
      const auto fq_chunk = fq.narrow(2, i0, lc);
      auto numerator = torch::matmul(fq_chunk, state);   // [B, H, lc, Ev]
      auto denominator = torch::matmul(fq_chunk, norm);  // [B, H, lc, 1]
      if (hi > lo) {  // keys [lo, hi), seen by some queries of the chunk: a masked tile
        const auto rows = torch::arange(i0, i0 + lc, index_options).view({lc, 1});
        const auto cols = torch::arange(lo, hi, index_options).view({1, hi - lo});
        const auto tile = torch::matmul(fq_chunk, fk.narrow(2, lo, hi - lo).transpose(-2, -1))
                              .masked_fill(cols > rows + offset, 0.0);  // [B, H, lc, hi − lo]
        numerator = numerator + torch::matmul(tile, v.narrow(2, lo, hi - lo));
        denominator = denominator + tile.sum(-1, /*keepdim=*/true);
      }
      numerators.push_back(numerator);
      denominators.push_back(denominator);
    }
    return {torch::cat(numerators, 2), torch::cat(denominators, 2)};
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_linear_attention_backend() {
  return std::make_unique<LinearAttention>();
}

}  // namespace attnzoo
