// Masks and additive biases for attention, in one value type shared by every backend.
//
// Conventions follow torch.nn.MultiheadAttention, so that masks port unchanged from Python:
// a `true` in key_padding_mask or attn_mask means "this key is excluded". (LibTorch's
// scaled_dot_product_attention uses the opposite sense for its boolean mask; backends translate.)
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>

namespace attnzoo {

// Where the diagonal of a causal mask sits when the query and key lengths differ.
enum class CausalAlignment {
  kTopLeft,     // query i sees keys j <= i (torch's is_causal; training on whole sequences)
  kBottomRight  // query i sees keys j <= i + (S - L) (the last query sees every key: KV caches)
};

// A limited attention context, true = excluded: [L, S] bool on `device`; query i, at key position
// S − L + i (the last L keys: L = S without a cache), sees keys from `left` before to `right`
// after it (a negative bound: unlimited on that side; NeMo's att_context_size). Undefined when
// both are unlimited.
torch::Tensor band_attention_mask(int64_t query_len, int64_t key_len, int64_t left, int64_t right,
                                  torch::Device device = torch::kCPU);

struct AttentionMask {
  // Valid keys per batch entry: key j of entry b is padding when j >= key_lengths[b]. [B],
  // integral.
  AttentionMask& key_lengths(torch::Tensor lengths) {
    key_lengths_ = std::move(lengths);
    return *this;
  }
  // true = padding (excluded). [B, S], bool.
  AttentionMask& key_padding_mask(torch::Tensor mask) {
    key_padding_mask_ = std::move(mask);
    return *this;
  }
  // true = excluded. bool, broadcastable to [B, H, L, S] (e.g. [L, S], [B, 1, L, S]).
  AttentionMask& attn_mask(torch::Tensor mask) {
    attn_mask_ = std::move(mask);
    return *this;
  }
  // Added to the scaled scores before the softmax: relative position terms, ALiBi, float masks.
  // Floating point, broadcastable to [B, H, L, S]. May require grad.
  AttentionMask& bias(torch::Tensor bias) {
    bias_ = std::move(bias);
    return *this;
  }
  AttentionMask& causal(bool on = true, CausalAlignment alignment = CausalAlignment::kTopLeft) {
    causal_ = on;
    causal_alignment_ = alignment;
    return *this;
  }

  const torch::Tensor& key_lengths() const { return key_lengths_; }
  const torch::Tensor& key_padding_mask() const { return key_padding_mask_; }
  const torch::Tensor& attn_mask() const { return attn_mask_; }
  const torch::Tensor& bias() const { return bias_; }
  bool causal() const { return causal_; }
  CausalAlignment causal_alignment() const { return causal_alignment_; }

  // True when some key may be excluded (the bias alone excludes nothing).
  bool has_exclusions() const {
    return key_lengths_.defined() || key_padding_mask_.defined() || attn_mask_.defined() || causal_;
  }
  bool empty() const { return !has_exclusions() && !bias_.defined(); }

  // Checks every tensor against the problem's sizes; throws naming the argument, the expected and
  // the actual shape or dtype. `who` prefixes the messages.
  void validate(int64_t batch, int64_t heads, int64_t query_len, int64_t key_len,
                const std::string& who) const;

  // The combined boolean mask, true = the key takes part, broadcastable to [B, H, L, S] (each dim
  // either full or 1), on `device`; std::nullopt when no key is excluded.
  std::optional<torch::Tensor> allowed(int64_t query_len, int64_t key_len,
                                       torch::Device device) const;

 private:
  torch::Tensor key_lengths_;
  torch::Tensor key_padding_mask_;
  torch::Tensor attn_mask_;
  torch::Tensor bias_;
  bool causal_ = false;
  CausalAlignment causal_alignment_ = CausalAlignment::kTopLeft;
};

// The allowed-mask with rows that would exclude every key re-opened, and those rows marked.
// Backends compute such rows over all keys (finite everywhere, forward and backward) and then set
// their output and probabilities to zero: a fully masked query yields zeros, never NaN, and never
// an average over padding (the -1e9 trick's result).
struct SafeAllowedMask {
  torch::Tensor allowed;       // bool, broadcastable to [B, H, L, S]
  torch::Tensor fully_masked;  // bool, broadcastable to [B, H, L, 1]
};
SafeAllowedMask make_safe(const torch::Tensor& allowed);

// "[2, 3, 4]"
std::string shape_string(torch::IntArrayRef sizes);

}  // namespace attnzoo
