// Mixup and cutmix against their definitions, computed here in float64: the mixed batch is
// λ·x + (1 − λ)·x.flip(0), cutmix replaces one box with the reversed batch's pixels and corrects λ
// by the box's area, the targets mix alike and are smoothed, every row summing to 1; λ follows
// Beta(α, α); the random draws repeat with the generator.
#include <attnzoo/train/mixup.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <torch/torch.h>
#include "common/test_util.h"

#include <cmath>
#include <random>

namespace attnzoo {
namespace test_mixup {

constexpr int64_t kClasses = 5;

torch::Tensor images(int64_t batch = 6, int64_t h = 8, int64_t w = 10) {
  return torch::rand({batch, 3, h, w}, torch::TensorOptions().dtype(torch::kFloat));
}

torch::Tensor labels_of(int64_t batch = 6) { return torch::arange(batch, torch::kLong) % kClasses; }

// onehot(labels) in float64.
torch::Tensor one_hot64(const torch::Tensor& labels) {
  auto t = torch::zeros({labels.size(0), kClasses}, torch::kDouble);
  for (int64_t i = 0; i < labels.size(0); ++i) t[i][labels[i].item<int64_t>()] = 1.0;
  return t;
}

constexpr auto max_diff = testing::max_abs_diff;

TEST(Mixup, MixedBatchIsTheDefinition) {
  torch::manual_seed(1);
  const Mixup mixup({/*mixup_alpha=*/0.4, /*cutmix_alpha=*/0.0, /*prob=*/1.0,
                     /*label_smoothing=*/0.0, kClasses});
  const auto x = images(), y = labels_of();
  const auto before = x.clone();
  std::mt19937_64 rng(7);
  const auto r = mixup(x, y, rng);
  ASSERT_TRUE(r.mixed);
  EXPECT_FALSE(r.cutmix);
  ASSERT_GT(r.lambda, 0.0);
  ASSERT_LT(r.lambda, 1.0);
  const double lam = r.lambda;
  const auto x64 = x.to(torch::kDouble);
  EXPECT_LE(max_diff(r.inputs, lam * x64 + (1.0 - lam) * x64.flip(0)), 1e-6);
  const auto t = one_hot64(y);
  EXPECT_LE(max_diff(r.targets, lam * t + (1.0 - lam) * t.flip(0)), 1e-6);
  EXPECT_EQ(r.targets.scalar_type(), torch::kFloat);
  EXPECT_LE(max_diff(r.targets.to(torch::kDouble).sum(1), torch::ones({6}, torch::kDouble)), 1e-6);
  EXPECT_TRUE(torch::equal(x, before));  // the input itself is left alone
}

TEST(Mixup, CutmixReplacesABoxAndCorrectsLambdaByItsArea) {
  const Mixup mixup({0.0, /*cutmix_alpha=*/1.0, 1.0, 0.0, kClasses});
  const int64_t h = 8, w = 10;
  int boxes = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const auto x = images(4, h, w), y = labels_of(4);
    std::mt19937_64 rng(seed);
    const auto r = mixup(x, y, rng);
    ASSERT_TRUE(r.mixed && r.cutmix);
    ASSERT_LE(0, r.box_top);
    ASSERT_LE(r.box_top, r.box_bottom);
    ASSERT_LE(r.box_bottom, h);
    ASSERT_LE(0, r.box_left);
    ASSERT_LE(r.box_left, r.box_right);
    ASSERT_LE(r.box_right, w);
    // The expected batch, pixel by pixel: the reversed batch inside the box, the batch outside.
    auto expected = x.to(torch::kDouble).clone();
    const auto flipped = x.to(torch::kDouble).flip(0);
    for (int64_t i = r.box_top; i < r.box_bottom; ++i) {
      for (int64_t j = r.box_left; j < r.box_right; ++j) {
        expected.select(2, i).select(2, j).copy_(flipped.select(2, i).select(2, j));
      }
    }
    EXPECT_EQ(max_diff(r.inputs, expected), 0.0) << "seed " << seed;
    const double area =
        static_cast<double>((r.box_bottom - r.box_top) * (r.box_right - r.box_left));
    const double lam = 1.0 - area / static_cast<double>(h * w);
    EXPECT_DOUBLE_EQ(r.lambda, lam);
    const auto t = one_hot64(y);
    EXPECT_LE(max_diff(r.targets, lam * t + (1.0 - lam) * t.flip(0)), 1e-6);
    boxes += area > 0;
  }
  EXPECT_GT(boxes, 20);  // Beta(1, 1): mostly non-empty boxes
}

TEST(Mixup, SmoothedTargetsSumToOne) {
  const double eps = 0.1;
  const auto y = labels_of();
  const auto t = one_hot64(y);
  // Not mixed: onehot·(1 − ε) + ε / C.
  const Mixup plain({0.0, 0.0, 1.0, eps, kClasses});
  std::mt19937_64 rng(3);
  const auto p = plain(images(), y, rng);
  EXPECT_FALSE(p.mixed);
  EXPECT_LE(max_diff(p.targets, t * (1.0 - eps) + eps / kClasses), 1e-7);
  EXPECT_LE(max_diff(p.targets.to(torch::kDouble).sum(1), torch::ones({6}, torch::kDouble)), 1e-6);
  // Mixed, then smoothed.
  const Mixup mixed({0.8, 1.0, 1.0, eps, kClasses});
  for (uint64_t seed = 0; seed < 10; ++seed) {
    std::mt19937_64 g(seed);
    const auto r = mixed(images(), y, g);
    const double lam = r.lambda;
    EXPECT_LE(
        max_diff(r.targets, (lam * t + (1.0 - lam) * t.flip(0)) * (1.0 - eps) + eps / kClasses),
        1e-6);
    EXPECT_LE(max_diff(r.targets.to(torch::kDouble).sum(1), torch::ones({6}, torch::kDouble)),
              1e-6);
    EXPECT_GE(r.targets.min().item<double>(), eps / kClasses - 1e-7);
  }
}

// λ ~ Beta(α, α): mean 1/2, variance 1 / (4(2α + 1)).
TEST(Mixup, LambdaFollowsBeta) {
  const double alpha = 0.4;
  const Mixup mixup({alpha, 0.0, 1.0, 0.0, kClasses});
  const auto x = images(2, 2, 2), y = labels_of(2);
  std::mt19937_64 rng(11);
  const int n = 4000;
  double sum = 0.0, sum2 = 0.0;
  for (int i = 0; i < n; ++i) {
    const double lam = mixup(x, y, rng).lambda;
    sum += lam;
    sum2 += lam * lam;
  }
  const double mean = sum / n, variance = sum2 / n - mean * mean;
  const double expected_variance = 1.0 / (4.0 * (2.0 * alpha + 1.0));
  EXPECT_NEAR(mean, 0.5, 4.0 * std::sqrt(expected_variance / n));
  EXPECT_NEAR(variance, expected_variance, 0.1 * expected_variance);
}

TEST(Mixup, ChoosesTheMethodAndMixesWithProbability) {
  const auto x = images(2, 4, 4), y = labels_of(2);
  const Mixup both({0.8, 1.0, 1.0, 0.0, kClasses});
  std::mt19937_64 rng(5);
  int cutmix = 0;
  const int n = 2000;
  for (int i = 0; i < n; ++i) cutmix += both(x, y, rng).cutmix;
  EXPECT_NEAR(static_cast<double>(cutmix) / n, 0.5, 0.05);
  const Mixup some({0.8, 0.0, 0.3, 0.0, kClasses});
  int mixed = 0;
  for (int i = 0; i < n; ++i) mixed += some(x, y, rng).mixed;
  EXPECT_NEAR(static_cast<double>(mixed) / n, 0.3, 0.05);
}

// The same generator state gives the same batch; without an alpha no number is drawn, with one
// the prob coin is drawn even at prob 0.
TEST(Mixup, RandomDrawsRepeatWithTheGenerator) {
  const auto x = images(), y = labels_of();
  const Mixup mixup({0.8, 1.0, 0.7, 0.1, kClasses});
  for (uint64_t seed = 0; seed < 8; ++seed) {
    std::mt19937_64 a(seed), b(seed);
    const auto ra = mixup(x, y, a);
    const auto rb = mixup(x, y, b);
    EXPECT_TRUE(torch::equal(ra.inputs, rb.inputs));
    EXPECT_TRUE(torch::equal(ra.targets, rb.targets));
    EXPECT_EQ(a, b);
  }
  std::mt19937_64 g(1), untouched(1);
  const Mixup none({0.0, 0.0, 1.0, 0.1, kClasses});
  EXPECT_FALSE(none.mixes());
  EXPECT_FALSE(none(x, y, g).mixed);
  EXPECT_EQ(g, untouched);
  const Mixup never({0.8, 0.0, 0.0, 0.0, kClasses});
  EXPECT_TRUE(never.mixes());
  EXPECT_FALSE(never(x, y, g).mixed);
  EXPECT_NE(g, untouched);
  untouched.discard(1);
  EXPECT_EQ(g, untouched);
}

TEST(Mixup, RefusesBadOptionsAndInputs) {
  EXPECT_THROW(Mixup({-0.1, 0.0, 1.0, 0.0, kClasses}), c10::ValueError);
  EXPECT_THROW(Mixup({0.1, 0.0, 1.5, 0.0, kClasses}), c10::ValueError);
  EXPECT_THROW(Mixup({0.1, 0.0, 1.0, 1.0, kClasses}), c10::ValueError);
  EXPECT_THROW(Mixup({0.1, 0.0, 1.0, 0.0, 0}), c10::ValueError);
  const Mixup cutmix({0.0, 1.0, 1.0, 0.0, kClasses});
  std::mt19937_64 rng(0);
  EXPECT_THROW(cutmix(torch::rand({6, 20, 8}), labels_of(), rng), c10::ValueError);
  EXPECT_THROW(cutmix(images(), labels_of(5), rng), c10::ValueError);
  EXPECT_THROW(cutmix(images(), labels_of() + kClasses, rng), c10::ValueError);
  // Audio features [B, T, F] with mixup only: mixed like any tensor.
  const Mixup mixup({0.4, 0.0, 1.0, 0.0, kClasses});
  const auto features = torch::rand({6, 20, 8});
  const auto r = mixup(features, labels_of(), rng);
  const auto f = features.to(torch::kDouble);
  EXPECT_LE(max_diff(r.inputs, r.lambda * f + (1.0 - r.lambda) * f.flip(0)), 1e-6);
}

}  // namespace test_mixup
}  // namespace attnzoo
