// Training augmentations: the colour operations and resized_crop against torchvision's
// functional ones (reference tensors from the fixture), the crop sampler's distribution, the
// affine warp against its float64 definition, and the whole transform's shapes, ranges and
// determinism under a seed.
#include <attnzoo/preprocess/image/augment.h>
#include "common/test_util.h"
#include "preprocess_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace attnzoo {
namespace test_image_augment {
using testing::error_of;

using ::testing::HasSubstr;
using testing::reference;

const torch::Tensor& augment_reference(const std::string& name) {
  const auto* found = reference().tensors("augment.safetensors").find(name);
  if (!found) throw std::runtime_error("augment.safetensors has no '" + name + "'");
  return *found;
}

TEST(Augment, ColourMatchesTorchvision) {
  const auto& image = augment_reference("image");
  const std::vector<std::pair<std::string, torch::Tensor>> cases = {
      {"brightness_1.3", adjust_brightness(image, 1.3)},
      {"brightness_0.4", adjust_brightness(image, 0.4)},
      {"contrast_0.6", adjust_contrast(image, 0.6)},
      {"contrast_1.5", adjust_contrast(image, 1.5)},
      {"saturation_1.7", adjust_saturation(image, 1.7)},
      {"saturation_0.2", adjust_saturation(image, 0.2)},
      {"hue_0.23", adjust_hue(image, 0.23)},
      {"hue_-0.4", adjust_hue(image, -0.4)},
  };
  for (const auto& [name, ours] : cases) {
    const auto d = testing::difference(ours, augment_reference(name));
    EXPECT_LE(d.max, 1e-6) << name;
  }
}

// torchvision's resized_crop on a PIL image, i.e. RandomResizedCrop once the box is drawn.
TEST(Augment, ResizedCropMatchesTorchvision) {
  const auto& image = augment_reference("image_u8");
  const CropBox box{5, 9, 30, 41};
  for (const auto& [mode, name] : {std::pair{Interpolation::kBilinear, "bilinear"},
                                   std::pair{Interpolation::kBicubic, "bicubic"}}) {
    const auto ours = resized_crop(image, box, 24, 20, mode);
    const auto& theirs = augment_reference(std::string("resized_crop_") + name);
    ASSERT_EQ(ours.sizes(), theirs.sizes());
    EXPECT_LE(testing::difference(ours, theirs).max, 1.0) << name;  // grey levels
  }
  EXPECT_THAT(error_of<c10::ValueError>([&] {
                resized_crop(image, {40, 0, 10, 10}, 8, 8, Interpolation::kBilinear);
              }),
              HasSubstr("resized_crop: box (top 40, left 0, 10x10) is not inside the 45x67 image"));
}

// The sampler: boxes inside the image, area and aspect ratio within the ranges (up to the
// rounding of the sides), the same boxes for the same seed.
TEST(Augment, CropBoxDistribution) {
  std::mt19937_64 rng(1), again(1);
  const std::array<double, 2> scale = {0.08, 1.0}, ratio = {3.0 / 4.0, 4.0 / 3.0};
  double area_sum = 0.0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    const auto box = random_resized_crop_box(300, 400, scale, ratio, rng);
    const auto same = random_resized_crop_box(300, 400, scale, ratio, again);
    ASSERT_EQ(box.top, same.top);
    ASSERT_EQ(box.left, same.left);
    ASSERT_EQ(box.height, same.height);
    ASSERT_EQ(box.width, same.width);
    ASSERT_GE(box.top, 0);
    ASSERT_GE(box.left, 0);
    ASSERT_GE(box.height, 1);
    ASSERT_GE(box.width, 1);
    ASSERT_LE(box.top + box.height, 300);
    ASSERT_LE(box.left + box.width, 400);
    const double area = static_cast<double>(box.height * box.width) / (300.0 * 400.0);
    const double aspect = static_cast<double>(box.width) / static_cast<double>(box.height);
    EXPECT_GE(area, 0.08 * 0.95);
    EXPECT_LE(area, 1.0);
    EXPECT_GE(aspect, 0.75 * 0.95);
    EXPECT_LE(aspect, 4.0 / 3.0 * 1.05);
    area_sum += area;
  }
  // Draws that do not fit are retried, which favours small areas: torchvision's get_params
  // averages 0.435 (+- 0.0015) on this size over 20000 draws.
  EXPECT_NEAR(area_sum / n, 0.435, 0.015);

  // An image far outside the ratio range never fits: the fallback, a central crop clamped to it.
  const auto strip = random_resized_crop_box(10, 1000, scale, ratio, rng);
  EXPECT_EQ(strip.height, 10);
  EXPECT_EQ(strip.width, 13);  // round(10 * 4/3)
  EXPECT_EQ(strip.left, (1000 - 13) / 2);
  const auto pixel = random_resized_crop_box(1, 1, {0.5, 0.6}, ratio, rng);
  EXPECT_EQ(pixel.height, 1);
  EXPECT_EQ(pixel.width, 1);
}

TEST(Augment, UniformNumbers) {
  std::mt19937_64 rng;  // the standard's default seed
  std::mt19937_64 check;
  check.discard(9999);
  EXPECT_EQ(check(), 9981545732273789042ull);  // [rand.predef]: the 10000th value
  std::array<int, 10> counts{};
  for (int i = 0; i < 100000; ++i) {
    const double u = uniform(rng, 2.0, 3.0);
    ASSERT_GE(u, 2.0);
    ASSERT_LT(u, 3.0);
    const int64_t k = random_int(rng, -3, 7);
    ASSERT_GE(k, -3);
    ASSERT_LT(k, 7);
    ++counts[static_cast<size_t>(k + 3)];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
  EXPECT_THAT(error_of<c10::ValueError>([&] { random_int(rng, 3, 3); }),
              HasSubstr("random_int: empty range [3, 3)"));
}

TEST(Augment, FlipAndIdentities) {
  const auto& image = augment_reference("image");
  const auto flipped = horizontal_flip(image);
  EXPECT_TRUE(torch::equal(flipped.select(2, 0), image.select(2, image.size(2) - 1)));
  EXPECT_TRUE(torch::equal(horizontal_flip(flipped), image));
  EXPECT_TRUE(torch::allclose(adjust_brightness(image, 1.0), image));
  EXPECT_TRUE(torch::allclose(adjust_contrast(image, 1.0), image));
  EXPECT_TRUE(torch::allclose(adjust_saturation(image, 1.0), image));
  EXPECT_LE(testing::difference(adjust_hue(image, 0.0), image).max, 1e-6);
  // Saturation 0 is the grey image; contrast 0 its mean grey level everywhere.
  const auto grey = adjust_saturation(image, 0.0);
  EXPECT_TRUE(torch::allclose(grey[0], grey[1]));
  const auto flat = adjust_contrast(image, 0.0);
  EXPECT_LE((flat.max() - flat.min()).item<double>(), 1e-6);
}

TEST(Augment, TrainTransform) {
  TrainTransformOptions options;
  options.height = 48;
  options.width = 40;
  options.color_jitter.hue = 0.1;
  options.mean = {0.0, 0.0, 0.0};
  options.std = {1.0, 1.0, 1.0};  // identity normalisation: outputs are the pixels
  const TrainImageTransform transform(options);
  const auto& image = augment_reference("image_u8");
  std::mt19937_64 a(42), b(42), c(43);
  for (int i = 0; i < 20; ++i) {
    const auto x = transform(image, a);
    ASSERT_EQ(x.sizes(), (std::vector<int64_t>{3, 48, 40}));
    ASSERT_EQ(x.scalar_type(), torch::kFloat);
    EXPECT_GE(x.min().item<float>(), 0.0f);
    EXPECT_LE(x.max().item<float>(), 1.0f);
    EXPECT_TRUE(torch::equal(x, transform(image, b))) << "draw " << i;
    EXPECT_FALSE(torch::equal(x, transform(image, c))) << "draw " << i;
  }
  // Float input takes the same path; normalisation applies mean and std.
  options.mean = {0.5, 0.5, 0.5};
  options.std = {0.25, 0.25, 0.25};
  const TrainImageTransform normalised(options);
  std::mt19937_64 d(7);
  const auto y = normalised(augment_reference("image"), d);
  EXPECT_GE(y.min().item<float>(), -2.0f - 1e-6f);
  EXPECT_LE(y.max().item<float>(), 2.0f + 1e-6f);
}

// A smooth float image [3, h, w] in [0, 1] (bilinear sampling of it has small errors).
torch::Tensor smooth_image(int64_t h, int64_t w) {
  const auto y = torch::arange(h, torch::kDouble).view({1, h, 1});
  const auto x = torch::arange(w, torch::kDouble).view({1, 1, w});
  const auto c = torch::arange(3, torch::kDouble).view({3, 1, 1});
  return (0.5 + 0.4 * torch::sin(0.21 * x + 0.13 * y + c) * torch::cos(0.17 * y - 0.05 * x))
      .to(torch::kFloat);
}

TEST(Augment, AffineGeometry) {
  const auto image = smooth_image(9, 9);
  // Identity.
  EXPECT_LE((affine(image, {}) - image).abs().max().item<double>(), 1e-6);
  const auto& u8 = augment_reference("image_u8");
  EXPECT_TRUE(torch::equal(affine(u8, {}), u8));
  // 90 degrees about the centre of a square image is torch.rot90 (counter-clockwise on screen).
  AffineParams quarter;
  quarter.angle = 90.0;
  EXPECT_LE((affine(image, quarter) - torch::rot90(image, 1, {1, 2})).abs().max().item<double>(),
            1e-6);
  // Whole-pixel translation moves pixels exactly, with zeros where nothing comes from.
  AffineParams shift;
  shift.translate_x = 2;
  shift.translate_y = -1;
  const auto moved = affine(image, shift);
  using torch::indexing::Slice;
  EXPECT_LE((moved.index({Slice(), Slice(0, 8), Slice(2, 9)}) -
             image.index({Slice(), Slice(1, 9), Slice(0, 7)}))
                .abs()
                .max()
                .item<double>(),
            1e-6);
  EXPECT_EQ(moved.index({Slice(), Slice(), Slice(0, 2)}).abs().max().item<double>(), 0.0);
  EXPECT_EQ(moved.index({Slice(), 8}).abs().max().item<double>(), 0.0);
  // Any parameters: each output pixel is the bilinear sample (zeros outside) of the input at the
  // inverse image of its position, computed here in float64. OpenCV quantises the source
  // position to 1/32 pixel, hence the tolerance.
  const auto big = smooth_image(30, 40);
  std::mt19937_64 rng(5);
  AffineOptions options;
  options.degrees = 30.0;
  options.translate = 0.1;
  options.scale = {0.8, 1.2};
  options.shear = 15.0;
  for (int trial = 0; trial < 5; ++trial) {
    const auto p = random_affine_params(30, 40, options, rng);
    EXPECT_LE(std::abs(p.angle), 30.0);
    EXPECT_LE(std::abs(p.translate_x), 4);
    EXPECT_LE(std::abs(p.translate_y), 3);
    EXPECT_TRUE(p.scale >= 0.8 && p.scale <= 1.2) << p.scale;
    EXPECT_LE(std::abs(p.shear), 15.0);
    const auto m = affine_matrix(p, 30, 40);
    const double det = m[0] * m[4] - m[1] * m[3];
    const auto out = affine(big, p);
    const auto in = big.to(torch::kDouble);
    const auto pixel = [&](int64_t c, int64_t y, int64_t x) {
      return y < 0 || y >= 30 || x < 0 || x >= 40 ? 0.0 : in[c][y][x].item<double>();
    };
    double worst = 0.0;
    for (int64_t oy = 0; oy < 30; oy += 3) {
      for (int64_t ox = 0; ox < 40; ox += 3) {
        const double dx = static_cast<double>(ox) - m[2], dy = static_cast<double>(oy) - m[5];
        const double sx = (m[4] * dx - m[1] * dy) / det, sy = (-m[3] * dx + m[0] * dy) / det;
        const auto x0 = static_cast<int64_t>(std::floor(sx)),
                   y0 = static_cast<int64_t>(std::floor(sy));
        const double fx = sx - static_cast<double>(x0), fy = sy - static_cast<double>(y0);
        for (int64_t c = 0; c < 3; ++c) {
          const double expected =
              (1 - fy) * ((1 - fx) * pixel(c, y0, x0) + fx * pixel(c, y0, x0 + 1)) +
              fy * ((1 - fx) * pixel(c, y0 + 1, x0) + fx * pixel(c, y0 + 1, x0 + 1));
          worst = std::max(worst, std::abs(out[c][oy][ox].item<double>() - expected));
        }
      }
    }
    EXPECT_LE(worst, 0.02) << "trial " << trial;
  }
}

TEST(Augment, ElasticMatchesTorchvision) {
  // The warp, given the fixture's displacement (torchvision's elastic_transform, grid_sample with
  // align_corners=False); OpenCV quantises positions to 1/32 pixel, hence the tolerance.
  const auto& image = augment_reference("image");
  const auto ours = elastic(image, augment_reference("elastic_displacement_px"));
  const auto& theirs = augment_reference("elastic");
  const auto d = testing::difference(ours, theirs);
  EXPECT_LE(d.max, 0.02);
  EXPECT_LE((ours - theirs).abs().mean().item<double>(), 2e-3);
  // The warp is not the identity (the fixture moves pixels by up to a few).
  EXPECT_GT((theirs - image).abs().max().item<double>(), 0.05);
  // No displacement: the image; a constant one: a whole-pixel shift with zeros coming in.
  EXPECT_LE((elastic(image, torch::zeros({2, 45, 67})) - image).abs().max().item<double>(), 1e-6);
  auto shift = torch::zeros({2, 45, 67});
  shift[0].fill_(1.0);  // output x samples input x + 1
  const auto moved = elastic(image, shift);
  using torch::indexing::Slice;
  EXPECT_LE((moved.index({Slice(), Slice(), Slice(0, 66)}) -
             image.index({Slice(), Slice(), Slice(1, 67)}))
                .abs()
                .max()
                .item<double>(),
            1e-6);
  EXPECT_LE(moved.index({Slice(), Slice(), 66}).abs().max().item<double>(), 1e-6);
}

TEST(Augment, ElasticDisplacementFields) {
  // torchvision's scaling: uniform noise in [-1, 1], blurred, times alpha / size in normalised
  // units; with sigma 0 (no blur) the x field in pixels is uniform in [-alpha/2 * W/H, ...].
  std::mt19937_64 rng(11), again(11);
  ElasticOptions o;
  o.alpha = 8.0;
  o.sigma = 0.0;
  const auto raw = random_elastic_displacement(40, 60, o, rng);
  ASSERT_EQ(raw.sizes(), (std::vector<int64_t>{2, 40, 60}));
  EXPECT_TRUE(torch::equal(raw, random_elastic_displacement(40, 60, o, again)));
  const double x_bound = o.alpha / 40.0 * 30.0, y_bound = o.alpha / 60.0 * 20.0;
  EXPECT_LE(raw[0].abs().max().item<double>(), x_bound);
  EXPECT_GT(raw[0].abs().max().item<double>(), 0.9 * x_bound);
  EXPECT_LE(raw[1].abs().max().item<double>(), y_bound);
  EXPECT_NEAR(raw.mean().item<double>(), 0.0, 0.1);
  // Blurring makes neighbours alike: the mean step between them shrinks.
  o.sigma = 3.0;
  const auto smooth = random_elastic_displacement(40, 60, o, rng);
  const auto step = [](const torch::Tensor& f) {
    using torch::indexing::Slice;
    return (f.index({Slice(), Slice(), Slice(1, torch::indexing::None)}) -
            f.index({Slice(), Slice(), Slice(0, -1)}))
               .abs()
               .mean()
               .item<double>() /
           f.abs().mean().item<double>();
  };
  EXPECT_LT(step(smooth), 0.25 * step(raw));
}

TEST(Augment, TrainTransformWithAffine) {
  TrainTransformOptions options;
  options.height = 28;
  options.width = 28;
  options.scale = {0.9, 1.0};
  options.hflip = 0.0;
  options.mean = {0.0, 0.0, 0.0};
  options.std = {1.0, 1.0, 1.0};
  const TrainImageTransform plain(options);
  options.affine.degrees = 20.0;
  options.affine.translate = 0.1;
  const TrainImageTransform warped(options);
  const auto& image = augment_reference("image_u8");
  std::mt19937_64 a(3), b(3), c(3);
  for (int i = 0; i < 5; ++i) {
    const auto x = warped(image, a);
    EXPECT_TRUE(torch::equal(x, warped(image, b))) << "draw " << i;
    EXPECT_FALSE(torch::equal(x, plain(image, c))) << "draw " << i;
    EXPECT_GE(x.min().item<float>(), 0.0f);
    EXPECT_LE(x.max().item<float>(), 1.0f);
  }
  options.affine.scale = {1.2, 1.1};
  EXPECT_THAT(error_of<c10::ValueError>([&] { TrainImageTransform{options}; }),
              HasSubstr("scale 0 < low <= high"));
  options.affine.scale = {1.0, 1.0};
  options.affine.shear = 95.0;
  EXPECT_THAT(error_of<c10::ValueError>([&] { TrainImageTransform{options}; }),
              HasSubstr("shear in [0, 90)"));
  options.affine.shear = 0.0;
  options.elastic.p = 1.5;
  EXPECT_THAT(error_of<c10::ValueError>([&] { TrainImageTransform{options}; }),
              HasSubstr("p in [0, 1]"));
  // Elastic on top of the affine warp: deterministic, and a different image than without it.
  options.elastic = {20.0, 3.0, 1.0};
  const TrainImageTransform distorted(options);
  options.elastic.alpha = 0.0;
  const TrainImageTransform undistorted(options);
  std::mt19937_64 d(9), e(9), f(9);
  const auto x = distorted(image, d);
  EXPECT_TRUE(torch::equal(x, distorted(image, e)));
  EXPECT_FALSE(torch::equal(x, undistorted(image, f)));
}

TEST(Augment, Validation) {
  const auto& image = augment_reference("image");
  std::mt19937_64 rng(0);
  EXPECT_THAT(error_of<c10::ValueError>([&] { adjust_hue(image, 0.6); }),
              HasSubstr("adjust_hue: hue_factor must be in [-0.5, 0.5], got 0.6"));
  EXPECT_THAT(error_of<c10::ValueError>([&] { adjust_brightness(image, -1); }),
              HasSubstr("adjust_brightness: factor must be >= 0, got -1"));
  EXPECT_THAT(
      error_of<c10::ValueError>([&] { adjust_contrast(augment_reference("image_u8"), 1.0); }),
      HasSubstr("adjust_contrast: expected a floating-point image [3, H, W] in [0, 1], "
                "got [3, 45, 67] Byte"));
  EXPECT_THAT(error_of<c10::ValueError>([&] {
                random_resized_crop_box(4, 4, {0.5, 0.1}, {1, 1}, rng);
              }),
              HasSubstr("scale must be 0 < low <= high, got (0.5, 0.1)"));
  const auto error = [](auto change) {
    TrainTransformOptions options;
    change(options);
    return error_of<c10::ValueError>([&] { TrainImageTransform{options}; });
  };
  EXPECT_THAT(error([](auto& o) { o.hflip = 2.0; }), HasSubstr("hflip is a probability, got 2"));
  EXPECT_THAT(error([](auto& o) { o.color_jitter.hue = 0.7; }),
              HasSubstr("ColorJitterOptions: hue must be in [0, 0.5], got 0.7"));
  EXPECT_THAT(error([](auto& o) {
                o.ratio = {2.0, 1.0};
              }),
              HasSubstr("ratio must be 0 < low <= high, got (2, 1)"));
  EXPECT_THAT(error([](auto& o) { o.width = 0; }),
              HasSubstr("the input size must be at least 1x1, got 224x0"));
}

}  // namespace test_image_augment
}  // namespace attnzoo
