#include <attnzoo/preprocess/audio/resample.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <soxr.h>

#include <cmath>
#include <vector>

namespace attnzoo {

struct Resampler::State {
  soxr_t soxr = nullptr;
  ~State() {
    if (soxr != nullptr) soxr_delete(soxr);
  }
};

Resampler::Resampler(double from_rate, double to_rate) : from_rate_(from_rate), to_rate_(to_rate) {
  TORCH_CHECK_VALUE(
      std::isfinite(from_rate) && from_rate > 0 && std::isfinite(to_rate) && to_rate > 0,
      "Resampler: sample rates must be positive, got ", from_rate, " Hz -> ", to_rate, " Hz");
  if (from_rate == to_rate) return;
  state_ = std::make_unique<State>();
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  // One thread: the frontend runs inside callers that own their threads (and LibTorch's pool).
  const soxr_runtime_spec_t runtime = soxr_runtime_spec(1);
  soxr_error_t error = nullptr;
  state_->soxr = soxr_create(from_rate, to_rate, 1, &error, &io, &quality, &runtime);
  TORCH_CHECK(error == nullptr && state_->soxr != nullptr, "Resampler: soxr_create(", from_rate,
              " Hz -> ", to_rate, " Hz) failed: ", soxr_strerror(error));
}

Resampler::Resampler(Resampler&&) noexcept = default;
Resampler& Resampler::operator=(Resampler&&) noexcept = default;
Resampler::~Resampler() = default;

// Feeds `count` samples (input == nullptr: the end of the input) and collects all the output
// soxr gives for them, growing the output buffer as needed.
torch::Tensor Resampler::run(const float* input, int64_t count) {
  const double ratio = to_rate_ / from_rate_;
  std::vector<float> out(static_cast<size_t>(std::ceil(double(count) * ratio)) + 256);
  size_t produced = 0, consumed = 0;
  while (true) {
    size_t used = 0, done = 0;
    const soxr_error_t error =
        soxr_process(state_->soxr, input == nullptr ? nullptr : input + consumed,
                     input == nullptr ? 0 : static_cast<size_t>(count) - consumed, &used,
                     out.data() + produced, out.size() - produced, &done);
    TORCH_CHECK(error == nullptr, "Resampler: soxr_process failed: ", soxr_strerror(error));
    consumed += used;
    produced += done;
    if (produced == out.size()) {
      out.resize(out.size() * 2);  // the buffer was filled: more may be waiting
      continue;
    }
    if (input == nullptr ? done == 0 : consumed == static_cast<size_t>(count)) break;
    TORCH_CHECK(used > 0 || done > 0, "Resampler: soxr made no progress");  // never loop forever
  }
  return torch::from_blob(out.data(), {static_cast<int64_t>(produced)}, torch::kFloat).clone();
}

torch::Tensor Resampler::process(const torch::Tensor& samples) {
  TORCH_CHECK_VALUE(samples.dim() == 1 && samples.scalar_type() == torch::kFloat,
                    "Resampler::process: samples must be float32 [n], got ", samples.scalar_type(),
                    " ", samples.sizes());
  TORCH_CHECK_VALUE(!flushed_, "Resampler::process: called after flush()");
  if (!state_) return samples.clone();
  const auto input = samples.contiguous();
  return run(input.data_ptr<float>(), input.numel());
}

torch::Tensor Resampler::flush() {
  TORCH_CHECK_VALUE(!flushed_, "Resampler::flush: called twice");
  flushed_ = true;
  if (!state_) return torch::empty({0}, torch::kFloat);
  return run(nullptr, 0);
}

torch::Tensor resample(const torch::Tensor& samples, double from_rate, double to_rate) {
  Resampler resampler(from_rate, to_rate);
  auto body = resampler.process(samples);
  auto tail = resampler.flush();
  return tail.numel() == 0 ? body : torch::cat({body, tail});
}

}  // namespace attnzoo
