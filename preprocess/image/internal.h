// What the sources of the image frontend share (not installed: none of it is API).
#pragma once

#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo::detail {

// Per-channel values (mean, std, ...) as a float [3, 1, 1], to broadcast over [3, H, W].
inline torch::Tensor channel_vector(const std::vector<double>& values) {
  return torch::tensor(values, torch::kDouble).to(torch::kFloat).view({3, 1, 1});
}

// Python's round(): half to even, as timm and torchvision round sizes and offsets
// (std::nearbyint in the default rounding mode).
inline int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

}  // namespace attnzoo::detail
