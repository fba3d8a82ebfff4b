// libsoxr through Resampler: blocks of any size give exactly the one-shot samples, the output
// has round(N · to / from) samples, and a sine comes out as the sine at the new rate.
#include <attnzoo/preprocess/audio/resample.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <random>

namespace attnzoo {
namespace test_resample {

torch::Tensor sine(double hz, double rate, int64_t n, double amplitude = 0.5) {
  return (amplitude * torch::sin(torch::arange(n, torch::kDouble) * (2.0 * M_PI * hz / rate)))
      .to(torch::kFloat);
}

TEST(Resample, BlocksEqualOneShot) {
  torch::manual_seed(0);
  const auto x = torch::randn({44100 * 2 + 17}) * 0.1;
  const auto whole = resample(x, 44100, 16000);
  std::mt19937_64 rng(1);
  for (int64_t max_block : {1, 100, 4096, 100000}) {
    Resampler r(44100, 16000);
    std::vector<torch::Tensor> parts;
    for (int64_t at = 0; at < x.size(0);) {
      const int64_t n = std::min<int64_t>(x.size(0) - at, 1 + rng() % max_block);
      parts.push_back(r.process(x.narrow(0, at, n)));
      at += n;
    }
    parts.push_back(r.flush());
    const auto streamed = torch::cat(parts);
    ASSERT_EQ(streamed.sizes(), whole.sizes()) << max_block;
    EXPECT_TRUE(torch::equal(streamed, whole)) << "blocks up to " << max_block;
  }
}

TEST(Resample, OutputLength) {
  for (const auto& [from, to] : std::vector<std::pair<int, int>>{{44100, 16000},
                                                                 {22050, 16000},
                                                                 {48000, 16000},
                                                                 {8000, 16000},
                                                                 {11025, 16000},
                                                                 {16000, 8000},
                                                                 {16000, 16000}}) {
    for (int64_t n : {1, 7, 1000, 44101}) {
      const auto y = resample(torch::ones({n}) * 0.25, from, to);
      EXPECT_EQ(y.size(0), std::llround(double(n) * to / from))
          << from << " -> " << to << ", " << n;
    }
  }
}

// Away from the ends (where the filter sees the signal start), a 1 kHz sine is the 1 kHz sine
// at the new rate: SOXR_HQ is 20-bit, in float32 I/O.
TEST(Resample, SineStaysASine) {
  for (const auto& [from, to] :
       std::vector<std::pair<double, double>>{{44100, 16000}, {22050, 16000}, {8000, 16000}}) {
    const auto y = resample(sine(1000, from, int64_t(from)), from, to);
    const auto expected = sine(1000, to, y.size(0));
    const int64_t edge = 200;
    const double error =
        (y - expected).narrow(0, edge, y.size(0) - 2 * edge).abs().max().item<double>();
    EXPECT_LT(error, 1e-4) << from << " -> " << to;
  }
}

TEST(Resample, EqualRatesPassThrough) {
  const auto x = torch::randn({1000});
  EXPECT_TRUE(torch::equal(resample(x, 16000, 16000), x));
}

TEST(Resample, RefusesBadUse) {
  using ::testing::HasSubstr;
  EXPECT_THAT([] { Resampler(0, 16000); }, ::testing::ThrowsMessage<c10::ValueError>(
                                               HasSubstr("sample rates must be positive")));
  Resampler r(44100, 16000);
  EXPECT_THAT(
      [&] {
        r.process(torch::zeros({2, 3}));
      },
      ::testing::ThrowsMessage<c10::ValueError>(HasSubstr("float32 [n]")));
  r.flush();
  EXPECT_THAT([&] { r.process(torch::zeros({3})); },
              ::testing::ThrowsMessage<c10::ValueError>(HasSubstr("after flush()")));
}

}  // namespace test_resample
}  // namespace attnzoo
