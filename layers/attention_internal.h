// What the sources of the attention backends share (not installed: none of it is API).
#pragma once

#include <torch/types.h>

namespace attnzoo::detail {

// [d0, ..., dk] (k < 4) -> [1, ..., 1, d0, ..., dk] with 4 dims, broadcastable to
// [B, H, L, S]; a view.
inline torch::Tensor as_4d(torch::Tensor t) {
  while (t.dim() < 4) t = t.unsqueeze(0);
  return t;
}

// The dtype the scores and softmax statistics are accumulated in: float32 for the half types.
inline torch::ScalarType accumulation_type(torch::ScalarType t) {
  return (t == torch::kBFloat16 || t == torch::kHalf) ? torch::kFloat : t;
}

}  // namespace attnzoo::detail
