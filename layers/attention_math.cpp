// The `math` backend: explicit scores, softmax and weighted sum. The reference every other backend
// is tested against, and the only one that returns the probabilities (need_weights).
#include <attnzoo/layers/attention_backend.h>

#include <limits>

namespace attnzoo {
namespace {

class MathAttention final : public AttentionBackend {
 public:
  std::string name() const override { return "math"; }
  int priority() const override { return 0; }  // the fallback of "auto"
  std::string unsupported_reason(const AttentionProblem&) const override { return {}; }

  AttentionResult run(const AttentionProblem& p) const override {
    // Scaling q (L·E values) rather than the scores (L·S) is cheaper and matches
    // torch.nn.MultiheadAttention's order of operations.
    auto scores = torch::matmul(p.query * p.scale, p.key.transpose(-2, -1));  // [B, H, L, S]
    const auto& mask = p.mask;
    if (mask.bias().defined()) scores = scores + mask.bias().to(scores.scalar_type());
    std::optional<SafeAllowedMask> safe;
    if (auto allowed = mask.allowed(p.query_len(), p.key_len(), scores.device())) {
      safe = make_safe(*allowed);
      scores =
          scores.masked_fill(safe->allowed.logical_not(), -std::numeric_limits<double>::infinity());
    }
    auto probs = torch::softmax(scores, -1);
    if (safe) probs = probs.masked_fill(safe->fully_masked, 0.0);
    AttentionResult result;
    if (p.need_weights) result.weights = probs;
    if (p.dropout_p > 0.0) probs = torch::dropout(probs, p.dropout_p, /*train=*/true);
    result.output = torch::matmul(probs, p.value);
    return result;
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_math_attention_backend() {
  return std::make_unique<MathAttention>();
}

}  // namespace attnzoo
