// Multi-head attention (Vaswani et al. 2017, "Attention Is All You Need", section 3.2.2), the one
// attention layer that both ViT and Conformer are built on.
//
// Self-attention projects q, k and v with one fused [3·H·E, D] linear layer (timm's `qkv`) and
// splits its output into heads by views; cross-attention projects the queries with `q` and the
// keys and values with one fused [2·H·E, D_kv] layer `kv`. The attention itself runs on a backend
// chosen by name (attention_backend.h): `math`, `sdpa`, or `auto`.
#pragma once

#include <attnzoo/layers/attention_backend.h>
#include <attnzoo/layers/attention_mask.h>
#include <attnzoo/layers/packed_linear.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any_module_holder.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <string>
#include <vector>

namespace attnzoo {

// How MultiheadAttention draws its parameters.
enum class AttentionInit {
  kTruncNormal,  // "trunc_normal" (timm): truncated normal, std 0.02; zero biases
  kXavierQk,  // "xavier_qk": Xavier-uniform q, k and output, normal(0, v_init_std) v; zero biases
  kJax,       // "jax": Xavier-uniform on each of q, k, v and the output; zero biases
};
const char* to_string(AttentionInit init);

struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads) {}

  // Model width D: input and output feature size.
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(int64_t, num_heads);
  // Per-head width E; 0 = embed_dim / num_heads (which must then divide evenly).
  TORCH_ARG(int64_t, head_dim) = 0;
  // Cross-attention: queries from one sequence, keys and values from another of width kv_dim
  // (0 = embed_dim). Self-attention otherwise.
  TORCH_ARG(bool, cross_attention) = false;
  TORCH_ARG(int64_t, kv_dim) = 0;
  // Biases of the q/k/v projection(s) and of the output projection.
  TORCH_ARG(bool, qkv_bias) = true;
  TORCH_ARG(bool, proj_bias) = true;
  // LayerNorm over head_dim on q and k before the product (timm's qk_norm; ViT-22B).
  TORCH_ARG(bool, qk_norm) = false;
  TORCH_ARG(double, norm_eps) = 1e-6;
  // Scores scale; std::nullopt = 1/sqrt(head_dim).
  TORCH_ARG(std::optional<double>, scale) = std::nullopt;
  // Dropout on the attention probabilities and after the output projection (training only).
  TORCH_ARG(double, attn_drop) = 0.0;
  TORCH_ARG(double, proj_drop) = 0.0;
  // "auto", "math", "sdpa", "chunked", "block_local", "linear", or any registered backend
  // (attention_backend_names()), and the settings of those that take any.
  TORCH_ARG(std::string, backend) = "auto";
  TORCH_ARG(AttentionBackendOptions, backend_options) = {};
  // Dynamic head gating: per-sample softmax gates over the heads, computed from the mean of the
  // query sequence over its valid positions by a linear layer `head_gate` [H, D], scale each head's
  // output before the output projection. Gates are multiplied by H so that uniform gates leave the
  // layer unchanged; `head_gate` starts at zero, i.e. uniform.
  TORCH_ARG(bool, head_gating) = false;
  // Parameter initialisation (AttentionInit).
  TORCH_ARG(AttentionInit, init) = AttentionInit::kTruncNormal;
  TORCH_ARG(double, v_init_std) = 0.02;
};

// What forward_with_weights returns.
struct AttentionOutput {
  torch::Tensor output;      // [B, L, D]
  torch::Tensor weights;     // [B, H, L, S], per-head probabilities (before dropout)
  torch::Tensor head_gates;  // [B, H], softmax gates (sum to 1) when head_gating, else undefined
};

// One attention call seen by an AttentionRecorder.
struct AttentionRecord {
  // [B, H, L, S] probabilities before dropout, as the configured backend computes them (through
  // math, under its equivalent mask); not part of any autograd graph. Undefined when the backend
  // approximates softmax attention and has no probabilities.
  torch::Tensor weights;
  // bool, broadcastable to [B, H, L, S]: true where the mask lets query i see key j (key padding,
  // attn_mask, causal and a backend's pattern together); undefined when every key is allowed.
  torch::Tensor allowed;
  // bool [B, L]: false for the queries that are padding themselves (self-attention with key
  // padding: the queries are the last L keys); undefined when every query is valid.
  torch::Tensor valid_queries;
};

// Collects the attention probabilities of every attention call that runs on this thread while it
// is alive (MultiheadAttention and ConformerAttention, in call order: one record per block of a
// ViT or Conformer forward), for diagnostics and attention maps. Opt-in: without a recorder the
// layers check one thread-local pointer and compute nothing more. With one, each call also runs
// the math backend on the same problem, without dropout and without gradients, so the layer's
// own output, its autograd graph and the random number stream are exactly those of an unrecorded
// forward. Recorders nest: the innermost one records.
class AttentionRecorder {
 public:
  AttentionRecorder();
  ~AttentionRecorder();
  AttentionRecorder(const AttentionRecorder&) = delete;
  AttentionRecorder& operator=(const AttentionRecorder&) = delete;

  // The recorder of this thread, or nullptr.
  static AttentionRecorder* active();

  // Records the probabilities of `problem` as `backend` computes them; `self_attention`: the
  // queries are the last L of the S keys, so the key padding marks padded queries too.
  void record(const AttentionProblem& problem, const std::string& backend, bool self_attention);

  const std::vector<AttentionRecord>& records() const { return records_; }
  std::vector<AttentionRecord> take() { return std::move(records_); }

 private:
  std::vector<AttentionRecord> records_;
  AttentionRecorder* previous_ = nullptr;
};

class MultiheadAttentionImpl : public torch::nn::Cloneable<MultiheadAttentionImpl> {
 public:
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttentionImpl(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  explicit MultiheadAttentionImpl(MultiheadAttentionOptions options);

  void reset() override;
  // Re-draws every parameter with options.init().
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  // Self-attention. x: [B, L, D] -> [B, L, D]
  torch::Tensor forward(const torch::Tensor& x, const AttentionMask& mask = {});
  // Cross-attention. query: [B, L, D], memory: [B, S, kv_dim] -> [B, L, D]
  // (A name of its own: LibTorch's module holder cannot call an overloaded forward.)
  torch::Tensor forward_cross(const torch::Tensor& query, const torch::Tensor& memory,
                              const AttentionMask& mask = {});
  // Either (memory undefined = self-attention), with per-head probabilities [B, H, L, S]. Runs
  // on the math backend, whatever options.backend() says, as only it materialises them.
  AttentionOutput forward_with_weights(const torch::Tensor& query, const torch::Tensor& memory = {},
                                       const AttentionMask& mask = {});

  // The per-head width E and the total projected width H·E.
  int64_t head_dim() const { return head_dim_; }
  int64_t inner_dim() const { return head_dim_ * options.num_heads(); }
  // Switches the backend of a built layer (e.g. from a YAML override); validated.
  void set_backend(const std::string& backend);
  // head_gating: softmax gates [B, H] from the mean of query [B, L, D] over its valid positions
  // (self-attention: memory undefined, the mask's key padding describes the queries too).
  torch::Tensor head_gates(const torch::Tensor& query, const torch::Tensor& memory,
                           const AttentionMask& mask);

  MultiheadAttentionOptions options;

  // Self-attention: qkv [3·H·E, D]. Cross-attention: q [H·E, D] and kv [2·H·E, kv_dim].
  torch::nn::Linear qkv{nullptr};
  torch::nn::Linear q{nullptr};
  torch::nn::Linear kv{nullptr};
  torch::nn::LayerNorm q_norm{nullptr};  // over E, when qk_norm
  torch::nn::LayerNorm k_norm{nullptr};
  torch::nn::Linear head_gate{nullptr};  // [H, D], when head_gating
  torch::nn::Linear proj{nullptr};       // [D, H·E]
  torch::nn::Dropout proj_drop{nullptr};
  // The inference fast path of the projections (layers/packed_linear.h), for layers built on
  // this one (ConformerAttention) too: qkv_packed(qkv, x) == qkv(x).
  PackedLinear qkv_packed, q_packed, kv_packed, proj_packed;
  // The projections in int8 at inference (PackedLinear::set_int8); returns how many this layer
  // has (qkv and proj, or q, kv and proj).
  int64_t set_int8(bool on);

 private:
  AttentionOutput run(const torch::Tensor& query, const torch::Tensor& memory,
                      const AttentionMask& mask, bool need_weights);

  int64_t head_dim_ = 0;
};

TORCH_MODULE(MultiheadAttention);

}  // namespace attnzoo
