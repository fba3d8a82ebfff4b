// Finding a NaN or infinite sample in a waveform: one pass over the values, no temporaries (the
// tensor ops isfinite(x).all() and nonzero make three passes and as many allocations, which cost
// a fifth of the fbank of a short utterance).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace attnzoo {

// The flat index of the first NaN or infinite element of a floating-point tensor (any strides,
// any device: others than a CPU float32 or float64 tensor are copied first), std::nullopt when
// every element is finite.
std::optional<int64_t> first_non_finite(const torch::Tensor& values);

// Throws AudioError "SOURCE: NaN or infinite sample at sample N (S s)" for the first such sample of
// the 1-D `samples`, N counted from `first_sample`, S at `sample_rate` Hz.
void check_finite_samples(const torch::Tensor& samples, int64_t first_sample, double sample_rate,
                          const std::string& source);

}  // namespace attnzoo
