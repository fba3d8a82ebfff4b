// Sample-rate conversion with libsoxr at its high quality (SOXR_HQ: 20-bit precision, linear
// phase, 0.913 of the lower Nyquist frequency kept flat), the resampler of SoX and of
// torchaudio's sox effects. Audio at any rate becomes the model's rate before features.
//
// Resampler is soxr's streaming API: blocks in, blocks out, with the filter's state carried
// across blocks, so that a long file is converted in bounded memory. Pushing a signal in any
// blocks and then flushing gives the same samples as one resample() call over all of it (the
// tests hold it to exact equality); the output has round(N · to / from) samples.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>

namespace attnzoo {

class Resampler {
 public:
  // Rates in Hz, > 0 (c10::ValueError otherwise). Equal rates: samples pass through unchanged.
  Resampler(double from_rate, double to_rate);
  Resampler(Resampler&&) noexcept;
  Resampler& operator=(Resampler&&) noexcept;
  ~Resampler();

  double from_rate() const { return from_rate_; }
  double to_rate() const { return to_rate_; }

  // samples: float32 [n] (a mono block) -> the output samples this block completes, float32.
  torch::Tensor process(const torch::Tensor& samples);
  // The samples still inside the filter, at the end of the input. The resampler is then done.
  torch::Tensor flush();

 private:
  torch::Tensor run(const float* input, int64_t count);
  double from_rate_, to_rate_;
  struct State;
  std::unique_ptr<State> state_;
  bool flushed_ = false;
};

// The whole signal at once: float32 [N] at from_rate -> float32 [round(N · to / from)].
torch::Tensor resample(const torch::Tensor& samples, double from_rate, double to_rate);

}  // namespace attnzoo
