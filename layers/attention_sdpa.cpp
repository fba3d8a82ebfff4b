// The `sdpa` backend: LibTorch's scaled_dot_product_attention, which dispatches to fused kernels
// (the CPU flash kernel; on CUDA flash, memory-efficient, cuDNN) and falls back to its own math.
// Masks are merged into the single mask SDPA accepts; rows that exclude every key are re-opened
// for the call and zeroed afterwards, since SDPA's fused kernels return NaN (or garbage) there.
#include <attnzoo/layers/attention_backend.h>

#include <limits>

namespace attnzoo {
namespace {

class SdpaAttention final : public AttentionBackend {
 public:
  std::string name() const override { return "sdpa"; }
  int priority() const override { return 10; }

  std::string unsupported_reason(const AttentionProblem& p) const override {
    if (p.need_weights) return "it does not return attention weights (need_weights); use math";
    return {};
  }

  AttentionResult run(const AttentionProblem& p) const override {
    const auto& mask = p.mask;
    std::optional<torch::Tensor> sdpa_mask;
    torch::Tensor fully_masked;
    bool is_causal = false;
    // Top-left causal alone never excludes a whole row: hand it to SDPA as is_causal, which lets
    // the fused kernels skip the masked tiles instead of reading a mask.
    const bool causal_only = mask.causal() &&
                             mask.causal_alignment() == CausalAlignment::kTopLeft &&
                             !mask.key_lengths().defined() && !mask.key_padding_mask().defined() &&
                             !mask.attn_mask().defined();
    if (causal_only && !mask.bias().defined()) {
      is_causal = true;
    } else {
      const auto allowed = mask.allowed(p.query_len(), p.key_len(), p.query.device());
      std::optional<SafeAllowedMask> safe;
      if (allowed) {
        safe = make_safe(*allowed);
        fully_masked = safe->fully_masked;
      }
      if (mask.bias().defined()) {
        auto bias = mask.bias().to(p.query.device(), p.query.scalar_type());
        if (safe) {
          bias = bias.masked_fill(safe->allowed.logical_not(),
                                  -std::numeric_limits<double>::infinity());
        }
        sdpa_mask = bias;
      } else if (safe) {
        sdpa_mask = safe->allowed;  // SDPA's bool convention: true = takes part
      }
    }
    AttentionResult result;
    result.output = at::scaled_dot_product_attention(p.query, p.key, p.value, sdpa_mask,
                                                     p.dropout_p, is_causal, p.scale);
    if (fully_masked.defined()) result.output = result.output.masked_fill(fully_masked, 0.0);
    return result;
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_sdpa_attention_backend() {
  return std::make_unique<SdpaAttention>();
}

}  // namespace attnzoo
