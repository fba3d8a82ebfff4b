#include "preprocess/image_augment.h"

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace attnzoo {
namespace {

std::string shape_of(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

void check_float_image(const torch::Tensor& image, const char* what) {
  TORCH_CHECK_VALUE(
      image.defined() && image.dim() == 3 && image.size(0) == 3 && image.is_floating_point(), what,
      ": expected a floating-point image [3, H, W] in [0, 1], got ",
      image.defined() ? shape_of(image) + " " + c10::toString(image.scalar_type())
                      : std::string("an undefined tensor"));
}

void check_jitter(const ColorJitterOptions& o) {
  TORCH_CHECK_VALUE(o.brightness >= 0.0 && o.contrast >= 0.0 && o.saturation >= 0.0,
                    "ColorJitterOptions: brightness, contrast and saturation must be >= 0, got ",
                    o.brightness, ", ", o.contrast, ", ", o.saturation);
  TORCH_CHECK_VALUE(o.hue >= 0.0 && o.hue <= 0.5,
                    "ColorJitterOptions: hue must be in [0, 0.5], got ", o.hue);
}

// torchvision's rgb_to_grayscale (ITU-R 601-2 luma): [3, H, W] -> [1, H, W].
torch::Tensor grayscale(const torch::Tensor& image) {
  return (image[0] * 0.2989 + image[1] * 0.587 + image[2] * 0.114).unsqueeze(0);
}

// torchvision's _blend: ratio · a + (1 - ratio) · b, clamped.
torch::Tensor blend(const torch::Tensor& a, const torch::Tensor& b, double ratio) {
  return (a * ratio + b * (1.0 - ratio)).clamp(0.0, 1.0);
}

// torchvision's _rgb2hsv (after Pillow's Convert.c): H, S, V in [0, 1].
torch::Tensor rgb_to_hsv(const torch::Tensor& image) {
  const auto r = image[0], g = image[1], b = image[2];
  const auto maxc = std::get<0>(image.max(0));
  const auto minc = std::get<0>(image.min(0));
  // Where max == min, S and H are 0; dividing by 1 there avoids NaN.
  const auto eqc = maxc == minc;
  const auto cr = maxc - minc;
  const auto ones = torch::ones_like(maxc);
  const auto s = cr / torch::where(eqc, ones, maxc);
  const auto cr_divisor = torch::where(eqc, ones, cr);
  const auto rc = (maxc - r) / cr_divisor;
  const auto gc = (maxc - g) / cr_divisor;
  const auto bc = (maxc - b) / cr_divisor;
  const auto hr = (maxc == r) * (bc - gc);
  const auto hg = ((maxc == g) & (maxc != r)) * (rc + 2.0 - bc);
  const auto hb = ((maxc != g) & (maxc != r)) * (gc + 4.0 - rc);
  const auto h = torch::fmod((hr + hg + hb) / 6.0 + 1.0, 1.0);
  return torch::stack({h, s, maxc});
}

// torchvision's _hsv2rgb: the sector i = floor(6 H) picks (R, G, B) among v, p, q, t.
torch::Tensor hsv_to_rgb(const torch::Tensor& hsv) {
  const auto h = hsv[0], s = hsv[1], v = hsv[2];
  const auto i = torch::floor(h * 6.0);
  const auto f = h * 6.0 - i;
  const auto p = (v * (1.0 - s)).clamp(0.0, 1.0);
  const auto q = (v * (1.0 - s * f)).clamp(0.0, 1.0);
  const auto t = (v * (1.0 - s * (1.0 - f))).clamp(0.0, 1.0);
  const auto sector = torch::remainder(i.to(torch::kInt), 6).to(torch::kLong);
  const auto table =
      torch::stack({torch::stack({v, q, p, p, t, v}), torch::stack({t, v, v, q, p, p}),
                    torch::stack({p, p, t, v, v, q})});  // [3, 6, H, W]
  const auto index = sector.unsqueeze(0).unsqueeze(0).expand({3, 1, h.size(0), h.size(1)});
  return table.gather(1, index).squeeze(1);
}

torch::Tensor channel_vector(const std::vector<double>& values) {
  return torch::tensor(values, torch::kDouble).to(torch::kFloat).view({3, 1, 1});
}

}  // namespace

double uniform(std::mt19937_64& rng, double low, double high) {
  // The top 53 bits: every double in [0, 1) on the 2^-53 grid, equally likely.
  const double unit = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  return low + (high - low) * unit;
}

int64_t random_int(std::mt19937_64& rng, int64_t low, int64_t high) {
  TORCH_CHECK_VALUE(high > low, "random_int: empty range [", low, ", ", high, ")");
  const auto span = static_cast<double>(high - low);
  return std::min(high - 1, low + static_cast<int64_t>(uniform(rng, 0.0, 1.0) * span));
}

CropBox random_resized_crop_box(int64_t height, int64_t width, std::array<double, 2> scale,
                                std::array<double, 2> ratio, std::mt19937_64& rng) {
  TORCH_CHECK_VALUE(height >= 1 && width >= 1, "random_resized_crop_box: image of ", height, "x",
                    width);
  TORCH_CHECK_VALUE(scale[0] > 0.0 && scale[0] <= scale[1],
                    "random_resized_crop_box: scale must be 0 < low <= high, got (", scale[0], ", ",
                    scale[1], ")");
  TORCH_CHECK_VALUE(ratio[0] > 0.0 && ratio[0] <= ratio[1] && std::isfinite(ratio[1]),
                    "random_resized_crop_box: ratio must be 0 < low <= high, got (", ratio[0], ", ",
                    ratio[1], ")");
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_low = std::log(ratio[0]), log_high = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * uniform(rng, scale[0], scale[1]);
    const double aspect = std::exp(uniform(rng, log_low, log_high));
    const int64_t w = round_half_even(std::sqrt(target_area * aspect));
    const int64_t h = round_half_even(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int64_t top = random_int(rng, 0, height - h + 1);
      const int64_t left = random_int(rng, 0, width - w + 1);
      return {top, left, h, w};
    }
  }
  // The central crop, its aspect ratio clamped to `ratio` (at least one pixel, which
  // torchvision does not ensure for extreme ratios).
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < ratio[0]) {
    h = std::clamp<int64_t>(round_half_even(static_cast<double>(w) / ratio[0]), 1, height);
  } else if (in_ratio > ratio[1]) {
    w = std::clamp<int64_t>(round_half_even(static_cast<double>(h) * ratio[1]), 1, width);
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

torch::Tensor resized_crop(const torch::Tensor& image, const CropBox& box, int64_t height,
                           int64_t width, Interpolation mode) {
  TORCH_CHECK_VALUE(image.defined() && image.dim() == 3 && image.size(0) == 3,
                    "image: expected [3, H, W], got ",
                    image.defined() ? shape_of(image) : std::string("an undefined tensor"));
  TORCH_CHECK_VALUE(box.top >= 0 && box.left >= 0 && box.height >= 1 && box.width >= 1 &&
                        box.top + box.height <= image.size(1) &&
                        box.left + box.width <= image.size(2),
                    "resized_crop: box (top ", box.top, ", left ", box.left, ", ", box.height, "x",
                    box.width, ") is not inside the ", image.size(1), "x", image.size(2), " image");
  const auto crop = image.narrow(1, box.top, box.height).narrow(2, box.left, box.width);
  return resize_image(crop, height, width, mode);
}

torch::Tensor horizontal_flip(const torch::Tensor& image) {
  TORCH_CHECK_VALUE(image.defined() && image.dim() == 3, "image: expected [C, H, W], got ",
                    image.defined() ? shape_of(image) : std::string("an undefined tensor"));
  return image.flip({2});
}

torch::Tensor adjust_brightness(const torch::Tensor& image, double factor) {
  check_float_image(image, "adjust_brightness");
  TORCH_CHECK_VALUE(factor >= 0.0, "adjust_brightness: factor must be >= 0, got ", factor);
  return blend(image, torch::zeros_like(image), factor);
}

torch::Tensor adjust_contrast(const torch::Tensor& image, double factor) {
  check_float_image(image, "adjust_contrast");
  TORCH_CHECK_VALUE(factor >= 0.0, "adjust_contrast: factor must be >= 0, got ", factor);
  // Towards the mean grey level of the whole image.
  return blend(image, grayscale(image).mean(), factor);
}

torch::Tensor adjust_saturation(const torch::Tensor& image, double factor) {
  check_float_image(image, "adjust_saturation");
  TORCH_CHECK_VALUE(factor >= 0.0, "adjust_saturation: factor must be >= 0, got ", factor);
  return blend(image, grayscale(image), factor);
}

torch::Tensor adjust_hue(const torch::Tensor& image, double hue_factor) {
  check_float_image(image, "adjust_hue");
  TORCH_CHECK_VALUE(hue_factor >= -0.5 && hue_factor <= 0.5,
                    "adjust_hue: hue_factor must be in [-0.5, 0.5], got ", hue_factor);
  auto hsv = rgb_to_hsv(image);
  hsv.select(0, 0).copy_(torch::remainder(hsv[0] + hue_factor, 1.0));
  return hsv_to_rgb(hsv);
}

torch::Tensor color_jitter(const torch::Tensor& image, const ColorJitterOptions& options,
                           std::mt19937_64& rng) {
  check_float_image(image, "color_jitter");
  check_jitter(options);
  // As ColorJitter.get_params: the order first, then the factors of the enabled operations.
  std::array<int, 4> order = {0, 1, 2, 3};
  for (int k = 3; k > 0; --k) std::swap(order[k], order[random_int(rng, 0, k + 1)]);
  const auto factor = [&](double amount) {
    return amount > 0.0 ? uniform(rng, std::max(0.0, 1.0 - amount), 1.0 + amount) : 1.0;
  };
  const double brightness = factor(options.brightness);
  const double contrast = factor(options.contrast);
  const double saturation = factor(options.saturation);
  const double hue = options.hue > 0.0 ? uniform(rng, -options.hue, options.hue) : 0.0;
  auto x = image;
  for (const int op : order) {
    if (op == 0 && options.brightness > 0.0) x = adjust_brightness(x, brightness);
    if (op == 1 && options.contrast > 0.0) x = adjust_contrast(x, contrast);
    if (op == 2 && options.saturation > 0.0) x = adjust_saturation(x, saturation);
    if (op == 3 && options.hue > 0.0) x = adjust_hue(x, hue);
  }
  return x;
}

TrainImageTransform::TrainImageTransform(TrainTransformOptions options)
    : options_(std::move(options)) {
  const auto& o = options_;
  TORCH_CHECK_VALUE(o.height >= 1 && o.width >= 1,
                    "TrainTransformOptions: the input size must be at least 1x1, got ", o.height,
                    "x", o.width);
  TORCH_CHECK_VALUE(o.scale[0] > 0.0 && o.scale[0] <= o.scale[1],
                    "TrainTransformOptions: scale must be 0 < low <= high, got (", o.scale[0], ", ",
                    o.scale[1], ")");
  TORCH_CHECK_VALUE(o.ratio[0] > 0.0 && o.ratio[0] <= o.ratio[1] && std::isfinite(o.ratio[1]),
                    "TrainTransformOptions: ratio must be 0 < low <= high, got (", o.ratio[0], ", ",
                    o.ratio[1], ")");
  TORCH_CHECK_VALUE(o.hflip >= 0.0 && o.hflip <= 1.0,
                    "TrainTransformOptions: hflip is a probability, got ", o.hflip);
  check_jitter(o.color_jitter);
  TORCH_CHECK_VALUE(o.mean.size() == 3 && o.std.size() == 3,
                    "TrainTransformOptions: mean and std need 3 values (RGB), got ", o.mean.size(),
                    " and ", o.std.size());
  for (size_t c = 0; c < 3; ++c) {
    TORCH_CHECK_VALUE(std::isfinite(o.mean[c]) && std::isfinite(o.std[c]) && o.std[c] > 0.0,
                      "TrainTransformOptions: mean must be finite and std positive, got mean[", c,
                      "] = ", o.mean[c], ", std[", c, "] = ", o.std[c]);
  }
  mean_ = channel_vector(o.mean);
  std_ = channel_vector(o.std);
}

torch::Tensor TrainImageTransform::operator()(const torch::Tensor& image,
                                              std::mt19937_64& rng) const {
  TORCH_CHECK_VALUE(image.defined() && image.dim() == 3 && image.size(0) == 3 &&
                        image.size(1) >= 1 && image.size(2) >= 1,
                    "image: expected [3, H, W] (RGB), got ",
                    image.defined() ? shape_of(image) : std::string("an undefined tensor"));
  const auto& o = options_;
  const auto box = random_resized_crop_box(image.size(1), image.size(2), o.scale, o.ratio, rng);
  auto x = resized_crop(image, box, o.height, o.width, o.interpolation);
  // Drawn whatever hflip is, so that changing it does not shift the later draws.
  if (uniform(rng, 0.0, 1.0) < o.hflip) x = horizontal_flip(x);
  x = x.scalar_type() == torch::kByte ? x.to(torch::kFloat).div(255) : x.to(torch::kFloat);
  const auto& j = o.color_jitter;
  if (j.brightness > 0.0 || j.contrast > 0.0 || j.saturation > 0.0 || j.hue > 0.0) {
    x = color_jitter(x, j, rng);
  }
  return x.sub(mean_).div(std_).contiguous();
}

torch::Tensor TrainImageTransform::operator()(const cv::Mat& rgb, std::mt19937_64& rng) const {
  return (*this)(image_to_tensor(rgb), rng);
}

}  // namespace attnzoo
