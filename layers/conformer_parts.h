// The parts of a Conformer block (Gulati et al. 2020, "Conformer: Convolution-augmented
// Transformer for Speech Recognition", arXiv 2005.08100, section 2): the macaron feed-forward
// module, the convolution module, and self-attention with relative sinusoidal positions
// (Transformer-XL, Dai et al. 2019, section 3.3) on the shared attention layer.
//
// Padding never leaks: every part that mixes frames (the depthwise convolution, the batch and group
// normalisation statistics, attention) sees only the valid frames of each utterance, so a batch of
// unequal lengths computes on its valid frames what each utterance computes alone.
#pragma once

#include <attnzoo/layers/attention.h>
#include <attnzoo/layers/attention_relative.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <tuple>

namespace attnzoo {

// true where frame t of utterance b is valid (t < lengths[b]): [B, T] bool; undefined when
// lengths is undefined (every frame valid). lengths: [B], integral.
torch::Tensor valid_frames(const torch::Tensor& lengths, int64_t num_frames);

// ---------------------------------------------------------------------------------------------
// Feed-forward module (paper section 2.3): LayerNorm → Linear(D, ffn) → Swish → dropout →
// Linear(ffn, D) → dropout. The block adds it with a ½ weight (macaron).
struct ConformerFeedForwardOptions {
  ConformerFeedForwardOptions(int64_t dim, int64_t hidden_dim)
      : dim_(dim), hidden_dim_(hidden_dim) {}
  TORCH_ARG(int64_t, dim);
  TORCH_ARG(int64_t, hidden_dim);
  TORCH_ARG(double, dropout) = 0.0;
  TORCH_ARG(double, norm_eps) = 1e-5;
  TORCH_ARG(bool, bias) = true;  // of linear1 and linear2
};

class ConformerFeedForwardImpl : public torch::nn::Cloneable<ConformerFeedForwardImpl> {
 public:
  explicit ConformerFeedForwardImpl(ConformerFeedForwardOptions options);
  void reset() override;
  // x: [..., D] -> [..., D]
  torch::Tensor forward(const torch::Tensor& x);
  // The module after its LayerNorm, for callers that computed h = norm(x) themselves (fused with
  // a residual add: kernels/ops.h add_layer_norm). h: [..., D] -> [..., D]
  torch::Tensor forward_normed(const torch::Tensor& h);
  // linear1 and linear2 in int8 at inference (PackedLinear::set_int8); returns 2.
  int64_t set_int8(bool on);

  ConformerFeedForwardOptions options;
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear linear1{nullptr};  // [ffn, D]
  torch::nn::Linear linear2{nullptr};  // [D, ffn]
  torch::nn::Dropout dropout{nullptr};

 private:
  PackedLinear linear1_packed_, linear2_packed_;  // the inference fast path
};
TORCH_MODULE(ConformerFeedForward);

// ---------------------------------------------------------------------------------------------
// The normalisation after the depthwise convolution, over valid frames only:
//   kBatchNorm  "batch_norm": per channel over (B, valid T); running statistics in evaluation
//               (BatchNorm1d's parameters and buffers, updated in training from the valid frames
//               only)
//   kGroupNorm  "group_norm": GroupNorm(1), per utterance over (C, its valid T) (torchaudio's
//               use_group_norm)
//   kLayerNorm  "layer_norm": per frame over C (WeNet's option), which no padding can reach.
// Parameters are named as torch.nn's norms name them (weight, bias, running_mean, running_var,
// num_batches_tracked), so checkpoints map onto them one to one.
enum class ConvNormKind { kBatchNorm, kGroupNorm, kLayerNorm };
const char* to_string(ConvNormKind kind);

struct ConvNormOptions {
  explicit ConvNormOptions(int64_t channels) : channels_(channels) {}
  TORCH_ARG(int64_t, channels);
  TORCH_ARG(ConvNormKind, kind) = ConvNormKind::kBatchNorm;
  TORCH_ARG(double, eps) = 1e-5;
  // BatchNorm's running-statistics momentum: running = (1 − m)·running + m·batch.
  TORCH_ARG(double, momentum) = 0.1;
};

class ConvNormImpl : public torch::nn::Cloneable<ConvNormImpl> {
 public:
  explicit ConvNormImpl(ConvNormOptions options);
  void reset() override;
  // x: [B, C, T], valid: [B, T] bool or undefined (all valid) -> [B, C, T]. Values at invalid
  // frames are normalised too but take no part in any statistic.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& valid = {});

  ConvNormOptions options;
  torch::Tensor weight;               // [C]
  torch::Tensor bias;                 // [C]
  torch::Tensor running_mean;         // [C], batch_norm only
  torch::Tensor running_var;          // [C], batch_norm only
  torch::Tensor num_batches_tracked;  // [], int64, batch_norm only
};
TORCH_MODULE(ConvNorm);

// ---------------------------------------------------------------------------------------------
// Convolution module (paper section 2.2, figure 2): LayerNorm → pointwise conv D→2D → GLU →
// depthwise conv → ConvNorm → Swish → pointwise conv D→D → dropout.
//
// Padding of the depthwise convolution (kernel K), so that the output keeps T frames:
//   non-causal  (K − 1) / 2 frames on the left and K / 2 on the right (integer division): "same"
//               padding for odd K; for even K (the paper's 32) the one extra frame of context is
//               on the right, i.e. output t sees inputs t − (K/2 − 1) ... t + K/2.
//   causal      K − 1 frames on the left, none on the right (output t sees no future input), the
//               layout of streaming with a convolution cache. Where those frames are zeros
//               (causal_context(), CausalPadding): at the module's input, before pointwise_conv1,
//               as WeNet's causal module, so that the depthwise kernel sees the GLU of
//               pointwise_conv1's bias left of the first frame; or at the depthwise convolution's
//               input, as NeMo's CausalConv1D (and its zero cache_last_time).
// Frames beyond each utterance's length are zeroed before the depthwise convolution, so that
// they reach valid frames exactly as the zero padding of an utterance alone would.
enum class CausalPadding {
  kModuleInput,    // "module_input": WeNet's
  kDepthwiseInput  // "depthwise_input": NeMo's
};
const char* to_string(CausalPadding padding);

struct ConformerConvModuleOptions {
  ConformerConvModuleOptions(int64_t dim, int64_t kernel_size)
      : dim_(dim), kernel_size_(kernel_size) {}
  TORCH_ARG(int64_t, dim);
  TORCH_ARG(int64_t, kernel_size);
  TORCH_ARG(bool, causal) = false;
  TORCH_ARG(CausalPadding, causal_padding) = CausalPadding::kModuleInput;
  TORCH_ARG(ConvNormKind, norm) = ConvNormKind::kBatchNorm;
  TORCH_ARG(bool, bias) = true;
  TORCH_ARG(double, dropout) = 0.0;
  // eps of the LayerNorm in front, and of the norm after the depthwise convolution.
  TORCH_ARG(double, norm_eps) = 1e-5;
  TORCH_ARG(double, conv_norm_eps) = 1e-5;
};

class ConformerConvModuleImpl : public torch::nn::Cloneable<ConformerConvModuleImpl> {
 public:
  explicit ConformerConvModuleImpl(ConformerConvModuleOptions options);
  void reset() override;
  // x: [B, T, D], valid: [B, T] bool or undefined (all valid) -> [B, T, D]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& valid = {});
  // The module after its LayerNorm, given h = norm(x) (as ConformerFeedForward::forward_normed).
  // h: [B, T, D], valid as forward -> [B, T, D]
  torch::Tensor forward_normed(const torch::Tensor& h, const torch::Tensor& valid = {});

  // Streaming (causal only): x [B, T, D] continues the frames whose last K − 1 depthwise inputs
  // are `cache` [B, D, K − 1] (undefined at the start: the left padding of forward).
  // -> (output [B, T, D], new cache [B, D, K − 1]). Chunk by chunk this equals forward on the
  // whole sequence; group_norm (statistics over the utterance) cannot stream and is refused.
  std::tuple<torch::Tensor, torch::Tensor> forward_chunk(const torch::Tensor& x,
                                                         const torch::Tensor& cache);

  // Frames added before / after the sequence for the depthwise convolution (see above).
  int64_t left_padding() const;
  int64_t right_padding() const;
  // Causal: the K − 1 frames before the first, before the GLU: [B, 2D, K − 1]. What
  // pointwise_conv1 gives for zero input (its bias, or zeros) with kModuleInput; zeros (whose GLU
  // is zero) with kDepthwiseInput.
  torch::Tensor causal_context(int64_t batch, const torch::TensorOptions& options) const;

  ConformerConvModuleOptions options;
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Conv1d pointwise_conv1{nullptr};  // [2D, D, 1]
  torch::nn::Conv1d depthwise_conv{nullptr};   // [D, 1, K], groups D, no padding of its own
  ConvNorm conv_norm{nullptr};
  torch::nn::Conv1d pointwise_conv2{nullptr};  // [D, D, 1]
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(ConformerConvModule);

// ---------------------------------------------------------------------------------------------
// Positions in a Conformer:
//   kNone         "none": no positional term (torchaudio's Conformer: plain multi-head attention)
//   kAbsPos       "abs_pos": absolute sinusoidal encodings added to the encoder's input; the
//                 blocks attend without positions (ConformerEncoderOptions only)
//   kRelPos       "rel_pos": relative sinusoidal positions, Transformer-XL / ESPnet "latest":
//                 2T − 1 relative positions T − 1 ... −(T − 1), aligned to (i, j) by rel_shift
//   kRelPosWenet  "rel_pos_wenet": WeNet's RelPositionMultiHeadedAttention: T encodings of the
//                 absolute positions 0 ... T − 1 and no shift (query i, key j uses that of j)
enum class ConformerPosition { kNone, kAbsPos, kRelPos, kRelPosWenet };
const char* to_string(ConformerPosition position);
// Whether the blocks' attention has a relative positional term (kRelPos, kRelPosWenet).
inline bool is_relative(ConformerPosition position) {
  return position == ConformerPosition::kRelPos || position == ConformerPosition::kRelPosWenet;
}

// The sinusoidal encodings a position mode attends with, [1, P, dim]: P = 2·T − 1 rows for
// "rel_pos" (row r is relative position T − 1 − r), T rows for "rel_pos_wenet" (row j is position
// j); each row is [sin(p·ω_0), cos(p·ω_0), sin(p·ω_1), ...] with ω_k = 10000^(−2k/dim)
// (Vaswani et al. 2017, section 3.5). dim must be even.
torch::Tensor relative_position_encoding(int64_t num_frames, int64_t dim, ConformerPosition mode,
                                         const torch::TensorOptions& options = {});
// The same for Lq queries attending Lk >= Lq keys, the queries being the last Lq keys (a chunk
// attending its cache and itself), the keys at positions first_key_position ... + Lk − 1:
// "rel_pos" has Lq + Lk − 1 rows, row r the relative position Lk − 1 − r (from Lk − 1 down to
// −(Lq − 1)); "rel_pos_wenet" has Lk rows, row j the position first_key_position + j.
torch::Tensor relative_position_encoding(int64_t num_queries, int64_t num_keys,
                                         int64_t first_key_position, int64_t dim,
                                         ConformerPosition mode,
                                         const torch::TensorOptions& options = {});

struct ConformerAttentionOptions {
  ConformerAttentionOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads) {}
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(int64_t, num_heads);
  // kNone, kRelPos or kRelPosWenet (see above).
  TORCH_ARG(ConformerPosition, position) = ConformerPosition::kNone;
  // Dropout on the attention probabilities and after the output projection (training only).
  TORCH_ARG(double, dropout) = 0.0;
  TORCH_ARG(std::string, backend) = "auto";
  TORCH_ARG(AttentionBackendOptions, backend_options) = {};
  // Per-utterance softmax gates over the heads (MultiheadAttentionOptions::head_gating), pooled
  // over the utterance's valid frames; offline only (a chunk does not see its utterance).
  TORCH_ARG(bool, head_gating) = false;
  // Biases of the query, key, value and output projections (linear_pos has none).
  TORCH_ARG(bool, bias) = true;
  // Each query attends only keys from window_left before to window_right after it (-1:
  // unlimited; band_attention_mask). The CPU's strips compute only those keys: linear in the
  // length (NeMo's limited att_context_size and rel_pos_local_attn).
  TORCH_ARG(int64_t, window_left) = -1;
  TORCH_ARG(int64_t, window_right) = -1;
  // Longformer's global tokens (NeMo's global_tokens, global_tokens_spacing,
  // global_attn_separate), with a window and a relative position only: the frames 0, spacing,
  // 2·spacing, ... (global_tokens of them, those within the utterance's frames) are seen by every
  // frame besides its window, with the content score alone, and attend every valid frame
  // themselves, with the content score alone (RelativeAttentionProblem::global_positions), their
  // queries in NeMo's layout (attend_with_global_tokens). With global_separate their queries,
  // keys and values come from a projection of their own, `global_qkv`; the frames still take the
  // global frames' ordinary values. Offline only, and no attention mask beside the key padding.
  TORCH_ARG(int64_t, global_tokens) = 0;
  TORCH_ARG(int64_t, global_spacing) = 1;
  TORCH_ARG(bool, global_separate) = false;
};

// Multi-head self-attention with an optional relative positional term (Dai et al. 2019, eq. in
// section 3.3, terms (a)+(c) and (b)+(d)):
//   score(i, j) = scale · [(q_i + u)·k_j + (q_i + v)·W_pos·R_{i−j}]
// q, k and v come from the shared layer's fused `qkv` projection. With backend "auto" on the CPU
// the relative term is computed inside the attention, a strip of queries at a time
// (relative_position_attention: no [T, T] matrix, forward and backward); otherwise, and while an
// AttentionRecorder records, everything but scale·q_i·k_j reaches the named backend as its
// additive bias (relative_position_bias), so every backend serves it.
class ConformerAttentionImpl : public torch::nn::Cloneable<ConformerAttentionImpl> {
 public:
  explicit ConformerAttentionImpl(ConformerAttentionOptions options);
  void reset() override;
  // x: [B, T, D], pos_emb: [1 or B, P, D] from relative_position_encoding (ignored for "none";
  // computed here when undefined) -> [B, T, D]
  torch::Tensor forward(const torch::Tensor& x, const AttentionMask& mask = {},
                        const torch::Tensor& pos_emb = {});

  // Streaming: the frames x [B, T, D] at positions first_position ... attend the cached keys and
  // values of the Tc frames before them and themselves. cache: [B, H, Tc, 2·E] (keys, then
  // values, along the last dim; WeNet's att_cache with a batch dim) or undefined (Tc = 0); mask
  // over the Tc + T keys. -> (output [B, T, D], new cache [B, H, Tc + T, 2·E]).
  std::tuple<torch::Tensor, torch::Tensor> forward_chunk(const torch::Tensor& x,
                                                         const torch::Tensor& cache,
                                                         int64_t first_position,
                                                         const AttentionMask& mask = {});

  ConformerAttentionOptions options;
  MultiheadAttention mha{nullptr};        // qkv [3D, D], proj [D, D]
  torch::nn::Linear linear_pos{nullptr};  // [D, D], no bias; relative modes only
  torch::nn::Linear global_qkv{nullptr};  // [3D, D]; global_separate only
  torch::Tensor pos_bias_u;               // [H, E]: u of the paper, content bias
  torch::Tensor pos_bias_v;               // [H, E]: v, position bias

 private:
  std::tuple<torch::Tensor, torch::Tensor> attend(const torch::Tensor& x,
                                                  const torch::Tensor& cache,
                                                  int64_t first_position, const AttentionMask& mask,
                                                  const torch::Tensor& pos_emb, bool want_cache);
  // The heads' outputs [B, H, T, E] of attention with global tokens (the window's frames and the
  // global ones, then the global frames' own rows), from the strips or materialised.
  torch::Tensor attend_with_global_tokens(const torch::Tensor& x, const AttentionMask& mask,
                                          RelativeAttentionProblem relative, bool strips);
  // `mask` with the window's band added (options.window_left/right), for T queries over `keys`.
  AttentionMask with_window(const AttentionMask& mask, int64_t queries, int64_t keys,
                            torch::Device device) const;
  // The heads' outputs [B, H, T, E] gated (head_gating), merged and projected.
  std::tuple<torch::Tensor, torch::Tensor> merge_heads(torch::Tensor heads_out,
                                                       const torch::Tensor& x,
                                                       const AttentionMask& mask,
                                                       torch::Tensor new_cache);
};
TORCH_MODULE(ConformerAttention);

}  // namespace attnzoo
