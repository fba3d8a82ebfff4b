// Softmax attention with a relative positional term, computed a strip of queries at a time:
//
//   score(i, j) = scale · [(q_i + u)·k_j + (q_i + v)·p_{r(i, j)}] + bias(i, j),  masked,
//   out_i = Σ_j softmax_j(score(i, ·)) · value_j
//
// (Dai et al. 2019, "Transformer-XL", section 3.3: terms (a) + (c) through the content bias u,
// (b) + (d) through the position bias v.) The position index r(i, j) is
//   kShifted:      r = Lq − 1 − i + j over P = Lq + Lk − 1 rows, row r the relative position
//                  Lk − 1 − r (Transformer-XL / ESPnet "rel_pos": query i sits at key position
//                  Lk − Lq + i, so r encodes i's position minus j);
//   kKeyPositions: r = j over P = Lk rows (WeNet's RelPositionMultiHeadedAttention).
//
// No [L, S] or [L, P] matrix is formed for the whole sequence. Each strip of queries computes its
// content scores over all keys, its position scores over the Lq_strip + Lk − 1 rows it reaches,
// and Transformer-XL's shift as a strided view of those (no copy); then the masked softmax and the
// weighted sum. Memory: O(strip · Lk) per (batch entry, head) at a time, O((L + S + P)·E) in all.
// With a window (window_left / window_right: NeMo's limited att_context_size and its local
// attention) a strip reads only the keys its queries may see, so time too is linear in the length:
// O(L · (strip + left + right)).
//
// Inference in float32 or bfloat16 on a CPU with AVX2 + FMA, in the shifted layout with key
// lengths as the only mask (a Conformer encoder's self-attention), and no window, global keys or
// strip_rows: flash_attention_relative_cpu (kernels/ops.h), the CPU flash kernel with the position
// product inside its tiles (bfloat16 through AVX512-BF16 products where the CPU has them); the
// rest, and every call that records gradients, takes the strips.
//
// Backward: a custom autograd function keeps q, k, v, the positions, the output and the per-row
// log-sum-exp, and recomputes each strip's probabilities (as FlashAttention-2, Algorithm 2); the
// shifted position scores' gradient is scattered back through the same strided view. Gradients
// reach q, k, v, the positions, u, v and a bias that requires grad. Dropout on the probabilities
// draws each strip's keep-mask from a generator seeded from LibTorch's default CPU generator once
// per call, so the backward redraws the same masks. CPU tensors only; only first-order gradients.
#pragma once

#include <attnzoo/layers/attention_mask.h>

#include <torch/types.h>

namespace attnzoo {

enum class RelativeLayout { kShifted, kKeyPositions };

struct RelativeAttentionProblem {
  torch::Tensor query;          // [B, H, L, E]
  torch::Tensor key;            // [B, H, S, E]
  torch::Tensor value;          // [B, H, S, Ev]
  torch::Tensor positions;      // [1 or B, H, P, E]: the projected encodings, P as above
  torch::Tensor content_bias;   // [H, E]: u
  torch::Tensor position_bias;  // [H, E]: v
  RelativeLayout layout = RelativeLayout::kShifted;
  AttentionMask mask;      // exclusions and an optional additive bias, as every backend takes
  double scale = 0.0;      // multiplies the two products (not the bias)
  double dropout_p = 0.0;  // on the probabilities; 0 outside training
  // Queries per strip; 0 chooses from the sizes (a strip's scores stay within a few MB).
  int64_t strip_rows = 0;
  // Query i (at key position S − L + i) sees keys from window_left before to window_right after
  // it; -1: unlimited on that side (band_attention_mask). relative_position_attention applies it
  // itself; relative_position_bias does not (give the band as the mask).
  int64_t window_left = -1;
  int64_t window_right = -1;
  // Longformer's global attention (Beltagy et al. 2020, "Longformer", section 3.1; NeMo's
  // global_tokens): besides its window, every query also sees the keys at global_positions with
  // the content score scale · global_query_i · global_key_g alone (no u, v, position term or
  // bias) and takes their values. A global key inside a query's window counts twice, once each
  // way (NeMo's Longformer attention). The mask's key padding excludes global keys too; its other
  // exclusions and the window do not apply to them. What the global keys themselves attend is the
  // caller's (they attend every key, with scores of their own).
  torch::Tensor global_positions;  // [G] long, strictly increasing key indices; undefined: none
  torch::Tensor global_query;      // [B, H, L, E]; undefined: query
  torch::Tensor global_key;        // [B, H, G, E]; undefined: key at global_positions
};

// Transformer-XL's shift (Dai et al. 2019, appendix B): scores over relative positions
// [B, H, L, 2L − 1] (column c = relative position L − 1 − c) -> scores over keys [B, H, L, L]
// with out[.., i, j] = in[.., i, L − 1 − i + j], i.e. the score of relative position i − j.
// With a cache, Lq queries over Lk >= Lq keys (query i at key position Lk − Lq + i):
// [B, H, Lq, Lq + Lk − 1] -> [B, H, Lq, Lk], out[.., i, j] = in[.., i, Lq − 1 − i + j].
// A view of the scores when they are contiguous.
torch::Tensor rel_shift(const torch::Tensor& scores);

// Validates the problem (names the argument and the expected shape) and returns [B, H, L, Ev].
torch::Tensor relative_position_attention(const RelativeAttentionProblem& problem);

// The attention probabilities of the problem, materialised: [B, H, L, S] (a global key's two
// shares added up in its column), zero for a row that excludes every key; without dropout. The
// problem's output is these times the values. O(L·S) memory: the reference for the strips, and
// the form of global attention wherever the strips do not run.
torch::Tensor relative_position_probabilities(const RelativeAttentionProblem& problem);

// The problem's positional and content terms as one additive bias, [B, H, L, S]:
// scale · [u·k_j + (q_i + v)·p_{r(i, j)}] (+ the mask's own bias). What any attention backend can
// take with scale · q·kᵀ to compute the same attention: the materialised form, O(L·S) memory.
// Not for a problem with global keys (relative_position_probabilities serves those).
torch::Tensor relative_position_bias(const RelativeAttentionProblem& problem);

}  // namespace attnzoo
