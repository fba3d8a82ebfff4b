// The masks of one attention problem, served per (query rows, key columns) tile: what the backends
// that never form [B, H, L, S] (chunked, the Conformer's relative-position attention) share. Not
// installed: none of it is API.
#pragma once

#include <attnzoo/layers/attention_mask.h>

#include <torch/autograd.h>
#include <torch/types.h>

#include <optional>
#include <string>

namespace attnzoo::detail {

// The exclusions of an AttentionMask (its bias is the caller's), on the device of the problem.
struct TileMasks {
  torch::Tensor key_lengths;       // [B], long; undefined when absent
  torch::Tensor key_padding_mask;  // [B, S], bool, true = padding; undefined when absent
  torch::Tensor attn_mask;         // 4-D bool broadcastable to [B, H, L, S]; undefined when absent
  bool causal = false;
  int64_t causal_offset = 0;    // query i sees key j iff j <= i + causal_offset
  int64_t max_key_length = -1;  // keys >= this are padding in every batch entry (-1: not known)

  // The exclusions of `mask` for L queries over S keys, moved to `device`.
  static TileMasks of(const AttentionMask& mask, int64_t query_len, int64_t key_len,
                      torch::Device device);

  // True when no (query, key) pair of the tile (rows [i0, i0 + lc), keys from j0) takes part, for
  // every batch entry and head.
  bool excluded(int64_t i0, int64_t lc, int64_t j0) const;

  // The tile's mask, true = takes part, broadcastable to [B, H, lc, sc]; std::nullopt when the
  // tile excludes nothing. Built from the mask's parts, so its size is that of the tile.
  std::optional<torch::Tensor> allowed(int64_t i0, int64_t lc, int64_t j0, int64_t sc,
                                       torch::Device device) const;

  // Kept with a custom autograd function's context under names starting with `prefix`.
  void save(torch::autograd::AutogradContext* ctx, const std::string& prefix) const;
  static TileMasks load(torch::autograd::AutogradContext* ctx, const std::string& prefix);
};

// The part of a tensor broadcastable to [B, H, L, S] that covers queries [i0, i0 + lc) and keys
// [j0, j0 + sc): broadcast (size-1) dims are left alone. A view.
torch::Tensor tile_of(const torch::Tensor& t4, int64_t i0, int64_t lc, int64_t j0, int64_t sc);

// Sums `grad` ([B, H, lc, sc]) over the dims where `like` has size 1, keeping them.
torch::Tensor reduce_to(const torch::Tensor& grad, const torch::Tensor& like);

}  // namespace attnzoo::detail
