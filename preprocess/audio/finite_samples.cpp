#include <attnzoo/preprocess/audio/finite_samples.h>

#include <attnzoo/preprocess/audio/error.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <cmath>
#include <sstream>

namespace attnzoo {
namespace {

template <typename T>
std::optional<int64_t> first_non_finite_in(const T* data, int64_t count) {
  // Blocks without a branch per element: x - x is 0 for a finite x and NaN otherwise.
  constexpr int64_t kBlock = 256;
  for (int64_t begin = 0; begin < count; begin += kBlock) {
    const int64_t end = std::min(count, begin + kBlock);
    T sum = 0;
    for (int64_t i = begin; i < end; ++i) sum += data[i] - data[i];
    if (sum == T{0}) continue;
    for (int64_t i = begin; i < end; ++i) {
      if (!std::isfinite(data[i])) return i;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> first_non_finite(const torch::Tensor& values) {
  TORCH_CHECK_VALUE(values.is_floating_point(), "first_non_finite: a floating-point tensor, got ",
                    values.scalar_type());
  auto x = values;
  if (!x.device().is_cpu() ||
      (x.scalar_type() != torch::kFloat && x.scalar_type() != torch::kDouble)) {
    x = x.to(torch::kCPU, torch::kDouble);
  }
  x = x.contiguous();
  if (x.scalar_type() == torch::kFloat)
    return first_non_finite_in(x.const_data_ptr<float>(), x.numel());
  return first_non_finite_in(x.const_data_ptr<double>(), x.numel());
}

void check_finite_samples(const torch::Tensor& samples, int64_t first_sample, double sample_rate,
                          const std::string& source) {
  const auto at = first_non_finite(samples);
  if (!at) return;
  const int64_t sample = first_sample + *at;
  std::ostringstream what;
  what << source << ": NaN or infinite sample at sample " << sample << " ("
       << double(sample) / sample_rate << " s)";
  throw AudioError(what.str());
}

}  // namespace attnzoo
