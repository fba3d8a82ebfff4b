#pragma once
// What the kernels' *_CUDA tests share: the unit roundoff of each dtype (for FlashAttention's
// "twice LibTorch's error, plus one unit in the last place" bound) and poisoning the caching
// allocator so that outputs a kernel never writes show up as NaN.
#include <torch/torch.h>

#include <cmath>
#include <limits>

// Skips a *_CUDA test where no GPU is, saying which of attnzoo's kernels goes untested.
#define SKIP_WITHOUT_CUDA(kernel)                                                               \
  if (!torch::cuda::is_available()) {                                                           \
    GTEST_SKIP() << "no CUDA device: the CUDA kernel of attnzoo::" << kernel << " is untested"; \
  }

namespace attnzoo::testing {

// The spacing of `dtype`'s values just above 1.
inline double epsilon(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat16:
      return std::ldexp(1.0, -10);
    case torch::kBFloat16:
      return std::ldexp(1.0, -7);
    default:
      return std::numeric_limits<float>::epsilon();
  }
}

// Fills a block of the caching allocator with NaN and frees it again, so that an output the op
// allocates next (same size, same stream) most likely starts as NaN: an element the kernel skips
// shows up.
inline void poison_allocator(at::IntArrayRef shape, const at::TensorOptions& options) {
  torch::full(shape, std::numeric_limits<float>::quiet_NaN(), options);
}

}  // namespace attnzoo::testing
