// first_non_finite against torch::isfinite, the tensor ops it replaces: every position around the
// 256-value blocks, both dtypes, NaN and both infinities, strided and other-dtype inputs.
#include <attnzoo/preprocess/audio/error.h>
#include <attnzoo/preprocess/audio/finite_samples.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

namespace attnzoo {
namespace {

using ::testing::HasSubstr;

std::optional<int64_t> by_tensor_ops(const torch::Tensor& x) {
  const auto bad = torch::isfinite(x).logical_not().flatten();
  if (!bad.any().item<bool>()) return std::nullopt;
  return torch::nonzero(bad)[0][0].item<int64_t>();
}

TEST(FiniteSamples, FindsTheFirstNonFiniteValueWhereTheTensorOpsDo) {
  const double bad_values[] = {std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity()};
  for (const auto dtype : {torch::kFloat, torch::kDouble}) {
    // Finite values up to the dtype's largest: x - x stays 0 for every one of them.
    auto base = torch::randn({1000}, torch::dtype(dtype)) * 10;
    base[7] = dtype == torch::kFloat ? std::numeric_limits<float>::max()
                                     : std::numeric_limits<double>::max();
    base[8] = -base[7];
    EXPECT_EQ(first_non_finite(base), std::nullopt);
    for (const double bad : bad_values) {
      for (const int64_t at : {0, 1, 254, 255, 256, 257, 511, 512, 999}) {
        auto x = base.clone();
        x[at] = bad;
        x[std::min<int64_t>(999, at + 300)] = bad;  // a later one does not count
        EXPECT_EQ(first_non_finite(x), at) << dtype << " " << bad << " at " << at;
        EXPECT_EQ(first_non_finite(x), by_tensor_ops(x));
      }
    }
  }
}

TEST(FiniteSamples, TakesStridedAndOtherFloatingTensors) {
  auto interleaved = torch::zeros({100, 3});
  interleaved[40][2] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(first_non_finite(interleaved), 40 * 3 + 2);
  EXPECT_EQ(first_non_finite(interleaved.t()), 2 * 100 + 40);  // a transposed view: its own order
  EXPECT_EQ(first_non_finite(interleaved.select(1, 1)), std::nullopt);
  auto half = torch::zeros({10}, torch::kHalf);
  half[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(first_non_finite(half), 3);
  EXPECT_EQ(first_non_finite(torch::zeros({0})), std::nullopt);
  EXPECT_THROW(first_non_finite(torch::zeros({3}, torch::kLong)), c10::ValueError);
}

TEST(FiniteSamples, CheckNamesTheSourceAndTheSampleCountedFromTheFirst) {
  auto x = torch::zeros({32000});
  EXPECT_NO_THROW(check_finite_samples(x, 0, 16000.0, "a.wav"));
  x[8000] = std::numeric_limits<float>::quiet_NaN();
  try {
    check_finite_samples(x, 16000, 16000.0, "input 'waveform'[1]");
    FAIL() << "no error";
  } catch (const AudioError& e) {
    EXPECT_THAT(e.what(), HasSubstr("input 'waveform'[1]: NaN or infinite sample at sample 24000 "
                                    "(1.5 s)"));
  }
}

}  // namespace
}  // namespace attnzoo
