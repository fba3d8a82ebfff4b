// SpecAugment: shapes, a seed reproduces the masks, the masks are where the record says and
// nowhere else, their counts and widths, the warp, and batches leave padding alone.
#include <attnzoo/preprocess/audio/spec_augment.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace attnzoo {
namespace test_spec_augment {

torch::Tensor features(int64_t frames = 300, int64_t bins = 80) {
  torch::manual_seed(3);
  return torch::randn({frames, bins}) + 5.0;  // no value is the mask value 0
}

TEST(SpecAugment, ASeedReproducesTheMasks) {
  const SpecAugment augment{SpecAugmentOptions{}};
  const auto x = features();
  std::mt19937_64 a(11), b(11), c(12);
  const auto ya = augment(x, a), yb = augment(x, b), yc = augment(x, c);
  EXPECT_EQ(ya.sizes(), x.sizes());
  EXPECT_EQ(ya.scalar_type(), x.scalar_type());
  EXPECT_TRUE(torch::equal(ya, yb));
  EXPECT_FALSE(torch::equal(ya, yc));
  EXPECT_TRUE(torch::equal(x, features()));  // the input is not modified
}

// The masked elements are exactly the union of the recorded masks; every other element is
// unchanged; the counts and widths are the options'.
TEST(SpecAugment, MasksAreWhereTheRecordSays) {
  SpecAugmentOptions o;
  o.num_freq_masks = 3;
  o.max_freq_width = 10;
  o.num_time_masks = 4;
  o.max_time_width = 40;
  o.max_time_ratio = 0.1;  // 300 frames: at most 30
  o.mask_value = -1.5;
  const SpecAugment augment(o);
  const auto x = features();
  std::mt19937_64 rng(5);
  int64_t masked_runs = 0;
  for (int trial = 0; trial < 50; ++trial) {
    SpecAugmentRecord record;
    const auto y = augment(x, rng, &record);
    ASSERT_EQ(record.freq_masks.size(), 3u);
    ASSERT_EQ(record.time_masks.size(), 4u);
    EXPECT_EQ(record.warp_centre, -1);
    auto expected = torch::zeros({300, 80}, torch::kBool);
    for (const auto& [start, width] : record.freq_masks) {
      EXPECT_GE(start, 0);
      EXPECT_LE(width, 10);
      EXPECT_LE(start + width, 80);
      expected.narrow(1, start, width).fill_(true);
      masked_runs += width > 0;
    }
    for (const auto& [start, width] : record.time_masks) {
      EXPECT_LE(width, 30);
      EXPECT_LE(start + width, 300);
      expected.narrow(0, start, width).fill_(true);
    }
    EXPECT_TRUE(torch::equal(y == -1.5f, expected));
    EXPECT_TRUE(torch::equal(y.masked_select(expected.logical_not()),
                             x.masked_select(expected.logical_not())));
  }
  EXPECT_GT(masked_runs, 100);  // widths are drawn from [0, 10], so most masks mask something
}

TEST(SpecAugment, NoMasksNoWarpIsTheIdentity) {
  SpecAugmentOptions o;
  o.num_freq_masks = o.num_time_masks = 0;
  std::mt19937_64 rng(1);
  const auto x = features();
  EXPECT_TRUE(torch::equal(SpecAugment(o)(x, rng), x));
}

// Time warp: the shape stays, a signal constant in time stays constant (bicubic resizing of a
// constant), and the frames far from the warp move by the recorded amount.
TEST(SpecAugment, TimeWarp) {
  SpecAugmentOptions o;
  o.num_freq_masks = o.num_time_masks = 0;
  o.time_warp_window = 80;
  const SpecAugment augment(o);
  std::mt19937_64 rng(2);
  const auto constant = torch::arange(80, torch::kFloat).unsqueeze(0).expand({300, 80});
  SpecAugmentRecord record;
  const auto y = augment(constant, rng, &record);
  EXPECT_EQ(y.sizes(), constant.sizes());
  EXPECT_GE(record.warp_centre, 80);
  EXPECT_LT(record.warp_centre, 220);
  EXPECT_GT(record.warp_to, record.warp_centre - 80);
  EXPECT_LE(record.warp_to, record.warp_centre + 80);
  EXPECT_TRUE(torch::allclose(y, constant, 0.0, 1e-4));
  // A ramp in time: the frame at the centre lands at warp_to (up to interpolation).
  const auto ramp = torch::arange(300, torch::kFloat).unsqueeze(1).expand({300, 4}).contiguous();
  std::mt19937_64 same(2);
  SpecAugmentRecord again;
  const auto warped = augment(ramp, same, &again);
  EXPECT_EQ(again.warp_centre, record.warp_centre);
  EXPECT_NEAR(warped[again.warp_to][0].item<double>(), double(again.warp_centre), 1.5);
  // Too short for the window: no warp.
  SpecAugmentRecord none;
  augment(torch::rand({160, 4}), rng, &none);
  EXPECT_EQ(none.warp_centre, -1);
}

TEST(SpecAugment, BatchLeavesPaddingAlone) {
  const SpecAugment augment{SpecAugmentOptions{}};
  auto batch = torch::randn({3, 200, 80}) + 5.0;
  const auto lengths = torch::tensor({200, 120, 0}, torch::kLong);
  std::mt19937_64 rng(4);
  const auto y = augment(batch, lengths, rng);
  EXPECT_EQ(y.sizes(), batch.sizes());
  EXPECT_TRUE(torch::equal(y[1].narrow(0, 120, 80), batch[1].narrow(0, 120, 80)));
  EXPECT_TRUE(torch::equal(y[2], batch[2]));
  EXPECT_TRUE((y[0] == 0).any().item<bool>());
  EXPECT_THAT(
      [&] {
        augment(batch, torch::tensor({200, 201, 0}), rng);
      },
      ::testing::ThrowsMessage<c10::ValueError>(::testing::HasSubstr("lengths[1] = 201")));
}

TEST(SpecAugment, RefusesBadOptions) {
  SpecAugmentOptions o;
  o.max_time_ratio = 1.5;
  EXPECT_THAT([&] { SpecAugment{o}; },
              ::testing::ThrowsMessage<c10::ValueError>(::testing::HasSubstr("max_time_ratio")));
  o = {};
  o.num_time_masks = -1;
  EXPECT_THAT([&] { SpecAugment{o}; },
              ::testing::ThrowsMessage<c10::ValueError>(::testing::HasSubstr("must be >= 0")));
}

}  // namespace test_spec_augment
}  // namespace attnzoo
