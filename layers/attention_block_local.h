// The `block_local` attention backend: a restricted attention pattern of local blocks with a
// sliding-window overlap plus global tokens, computed in O(L·(b + 2w + g)) scores instead of L².
//
// The local part follows the local self-attention of the Image Transformer (Parmar et al. 2018:
// query blocks attending to a memory block that extends beyond them); the global tokens are those
// of Longformer (Beltagy et al. 2020, "global attention"): a few positions (a class token) attend
// everywhere and are attended to by every position.
//
// The pattern, for a sequence of length L, with b = block_size, w = window, g = global_tokens
// (AttentionBackendOptions):
// - positions 0 .. g-1 are global: a global query attends to every key, and every query attends
//   to every global key (g >= L makes every position global: full attention);
// - positions g .. L-1 are split into consecutive blocks of b, starting at g; the last block may
//   be shorter (any L works). A query of the block [s, e) attends to the non-global keys
//   [max(g, s - w), min(L, e + w)): its own block plus w keys on each side beyond its boundaries
//   (w may exceed b), clipped at the ends of the sequence;
// - nothing else.
// Every user mask (key_lengths, key_padding_mask, attn_mask, causal, bias) then applies exactly as
// in `math`: block_local(problem) equals math(problem with attn_mask |= ~block_local_pattern(L)),
// including the rule that a query with no allowed key yields zeros.
//
// Limits of the backend (unsupported_reason says so): self-attention only (L == S, the pattern is
// defined on one sequence); no need_weights (use math with the explicit pattern as attn_mask to
// look at the probabilities). Dropout on the probabilities is supported: each kept probability is
// dropped independently with probability dropout_p as in math (the same distribution; not the
// same random draws as math, whose probability tensor has another shape).
//
// Cost per batch entry and head, with n = L - g non-global positions rounded up to whole blocks:
// time O(n·(b + 2w + g)·(E + Ev) + g·L·(E + Ev)); memory O(n·(b + 2w + g)) for the scores plus
// (1 + 2w/b) copies of the non-global keys and values (each block's key window is gathered).
// Masks given as full [.., L, S] tensors are read only at the pattern's positions.
#pragma once

#include <attnzoo/layers/attention_backend.h>

#include <torch/types.h>

namespace attnzoo {

// The pattern above as an explicit mask: bool [length, length], true = query i (row) may attend to
// key j (column), on `device`. Throws naming the argument for length < 0, block_size < 1,
// window < 0 or global_tokens < 0.
torch::Tensor block_local_pattern(int64_t length, const AttentionBackendOptions& options,
                                  torch::Device device = torch::kCPU);

}  // namespace attnzoo
