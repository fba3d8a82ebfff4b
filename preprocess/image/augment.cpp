#include <attnzoo/preprocess/image/augment.h>

#include <attnzoo/preprocess/image/internal.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace attnzoo {
namespace {

using detail::channel_vector;
using detail::round_half_even;

void check_float_image(const torch::Tensor& image, const char* what) {
  TORCH_CHECK_VALUE(
      image.defined() && image.dim() == 3 && image.size(0) == 3 && image.is_floating_point(), what,
      ": expected a floating-point image [3, H, W] in [0, 1], got ",
      image.defined() ? c10::str(image.sizes()) + " " + c10::toString(image.scalar_type())
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
                    image.defined() ? c10::str(image.sizes()) : std::string("an undefined tensor"));
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
                    image.defined() ? c10::str(image.sizes()) : std::string("an undefined tensor"));
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

AffineParams random_affine_params(int64_t height, int64_t width, const AffineOptions& options,
                                  std::mt19937_64& rng) {
  // As RandomAffine.get_params: angle, translation, scale, shear, in that order.
  AffineParams p;
  p.angle = uniform(rng, -options.degrees, options.degrees);
  const double max_dx = options.translate * static_cast<double>(width);
  const double max_dy = options.translate * static_cast<double>(height);
  p.translate_x = round_half_even(uniform(rng, -max_dx, max_dx));
  p.translate_y = round_half_even(uniform(rng, -max_dy, max_dy));
  p.scale = uniform(rng, options.scale[0], options.scale[1]);
  p.shear = uniform(rng, -options.shear, options.shear);
  return p;
}

std::array<double, 6> affine_matrix(const AffineParams& p, int64_t height, int64_t width) {
  // out = centre + translation + R(angle) · Shear_x · scale · (in - centre), with y pointing
  // down, so a positive angle turns the picture counter-clockwise on screen.
  const double pi = std::acos(-1.0);
  const double a = p.angle * pi / 180.0;
  const double sh = std::tan(p.shear * pi / 180.0);
  const double cx = 0.5 * static_cast<double>(width - 1);
  const double cy = 0.5 * static_cast<double>(height - 1);
  // R = [[cos, sin], [-sin, cos]] (screen coordinates); Shear = [[1, sh], [0, 1]].
  const double m00 = p.scale * std::cos(a);
  const double m01 = p.scale * (std::cos(a) * sh + std::sin(a));
  const double m10 = -p.scale * std::sin(a);
  const double m11 = p.scale * (-std::sin(a) * sh + std::cos(a));
  const double tx = cx + static_cast<double>(p.translate_x) - (m00 * cx + m01 * cy);
  const double ty = cy + static_cast<double>(p.translate_y) - (m10 * cx + m11 * cy);
  return {m00, m01, tx, m10, m11, ty};
}

torch::Tensor affine(const torch::Tensor& image, const AffineParams& params) {
  TORCH_CHECK_VALUE(image.defined() && image.dim() == 3 && image.size(0) == 3 &&
                        (image.scalar_type() == torch::kByte || image.is_floating_point()),
                    "affine: expected an image [3, H, W] (uint8 or float), got ",
                    image.defined() ? c10::str(image.sizes()) : std::string("an undefined tensor"));
  const bool bytes = image.scalar_type() == torch::kByte;
  const auto hwc =
      (bytes ? image : image.to(torch::kFloat)).permute({1, 2, 0}).contiguous().to(torch::kCPU);
  const int h = static_cast<int>(image.size(1)), w = static_cast<int>(image.size(2));
  const cv::Mat src(h, w, bytes ? CV_8UC3 : CV_32FC3, hwc.data_ptr());
  const auto m = affine_matrix(params, h, w);
  const cv::Mat matrix = (cv::Mat_<double>(2, 3) << m[0], m[1], m[2], m[3], m[4], m[5]);
  auto out = torch::empty({h, w, 3}, hwc.options());
  cv::Mat dst(h, w, src.type(), out.data_ptr());
  cv::warpAffine(src, dst, matrix, dst.size(), cv::INTER_LINEAR, cv::BORDER_CONSTANT,
                 cv::Scalar::all(0));
  return out.permute({2, 0, 1}).contiguous().to(image.scalar_type());
}

torch::Tensor random_elastic_displacement(int64_t height, int64_t width,
                                          const ElasticOptions& options, std::mt19937_64& rng) {
  TORCH_CHECK_VALUE(height >= 1 && width >= 1 && options.alpha >= 0.0 && options.sigma >= 0.0,
                    "random_elastic_displacement: needs a size of at least 1x1, alpha >= 0 and "
                    "sigma >= 0, got ",
                    height, "x", width, ", alpha ", options.alpha, ", sigma ", options.sigma);
  const int h = static_cast<int>(height), w = static_cast<int>(width);
  int kernel = static_cast<int>(8.0 * options.sigma + 1.0);
  if (kernel % 2 == 0) ++kernel;
  auto out = torch::empty({2, height, width}, torch::kFloat);
  // As torchvision: dx scaled by alpha / H, dy by alpha / W, in normalised units, which are
  // W / 2 (x) and H / 2 (y) pixels.
  const double pixels_per_unit[2] = {0.5 * static_cast<double>(width),
                                     0.5 * static_cast<double>(height)};
  const double size[2] = {static_cast<double>(height), static_cast<double>(width)};
  for (int axis = 0; axis < 2; ++axis) {
    cv::Mat field(h, w, CV_32F);
    for (int y = 0; y < h; ++y) {
      auto* row = field.ptr<float>(y);
      for (int x = 0; x < w; ++x) row[x] = static_cast<float>(uniform(rng, -1.0, 1.0));
    }
    if (options.sigma > 0.0) {
      cv::GaussianBlur(field, field, cv::Size(kernel, kernel), options.sigma, options.sigma,
                       cv::BORDER_REFLECT_101);
    }
    cv::Mat target(h, w, CV_32F, out[axis].data_ptr<float>());
    field.convertTo(target, CV_32F, options.alpha / size[axis] * pixels_per_unit[axis]);
  }
  return out;
}

torch::Tensor elastic(const torch::Tensor& image, const torch::Tensor& displacement) {
  TORCH_CHECK_VALUE(image.defined() && image.dim() == 3 && image.size(0) == 3 &&
                        (image.scalar_type() == torch::kByte || image.is_floating_point()),
                    "elastic: expected an image [3, H, W] (uint8 or float), got ",
                    image.defined() ? c10::str(image.sizes()) : std::string("an undefined tensor"));
  TORCH_CHECK_VALUE(
      displacement.defined() && displacement.dim() == 3 && displacement.size(0) == 2 &&
          displacement.size(1) == image.size(1) && displacement.size(2) == image.size(2),
      "elastic: the displacement must be [2, H, W] for a ", c10::str(image.sizes()), " image, got ",
      displacement.defined() ? c10::str(displacement.sizes()) : std::string("undefined"));
  const bool bytes = image.scalar_type() == torch::kByte;
  const auto hwc =
      (bytes ? image : image.to(torch::kFloat)).permute({1, 2, 0}).contiguous().to(torch::kCPU);
  const int h = static_cast<int>(image.size(1)), w = static_cast<int>(image.size(2));
  const cv::Mat src(h, w, bytes ? CV_8UC3 : CV_32FC3, hwc.data_ptr());
  const auto grid_x = (torch::arange(w, torch::kFloat).view({1, w}) +
                       displacement[0].to(torch::kCPU, torch::kFloat))
                          .contiguous();
  const auto grid_y = (torch::arange(h, torch::kFloat).view({h, 1}) +
                       displacement[1].to(torch::kCPU, torch::kFloat))
                          .contiguous();
  const cv::Mat map_x(h, w, CV_32F, grid_x.data_ptr<float>());
  const cv::Mat map_y(h, w, CV_32F, grid_y.data_ptr<float>());
  auto out = torch::empty({h, w, 3}, hwc.options());
  cv::Mat dst(h, w, src.type(), out.data_ptr());
  cv::remap(src, dst, map_x, map_y, cv::INTER_LINEAR, cv::BORDER_CONSTANT, cv::Scalar::all(0));
  return out.permute({2, 0, 1}).contiguous().to(image.scalar_type());
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
  const auto& a = o.affine;
  TORCH_CHECK_VALUE(a.degrees >= 0.0 && a.degrees <= 180.0 && a.translate >= 0.0 &&
                        a.translate <= 1.0 && a.scale[0] > 0.0 && a.scale[0] <= a.scale[1] &&
                        std::isfinite(a.scale[1]) && a.shear >= 0.0 && a.shear < 90.0,
                    "TrainTransformOptions: affine needs degrees in [0, 180], translate in [0, 1], "
                    "scale 0 < low <= high and shear in [0, 90), got ",
                    a.degrees, ", ", a.translate, ", (", a.scale[0], ", ", a.scale[1], "), ",
                    a.shear);
  TORCH_CHECK_VALUE(o.elastic.alpha >= 0.0 && std::isfinite(o.elastic.alpha) &&
                        o.elastic.sigma >= 0.0 && o.elastic.sigma <= 100.0 && o.elastic.p >= 0.0 &&
                        o.elastic.p <= 1.0,
                    "TrainTransformOptions: elastic needs alpha >= 0, sigma in [0, 100] and p in "
                    "[0, 1], got ",
                    o.elastic.alpha, ", ", o.elastic.sigma, ", ", o.elastic.p);
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
                    image.defined() ? c10::str(image.sizes()) : std::string("an undefined tensor"));
  const auto& o = options_;
  const auto box = random_resized_crop_box(image.size(1), image.size(2), o.scale, o.ratio, rng);
  auto x = resized_crop(image, box, o.height, o.width, o.interpolation);
  if (o.affine.enabled()) x = affine(x, random_affine_params(o.height, o.width, o.affine, rng));
  if (o.elastic.alpha > 0.0 && uniform(rng, 0.0, 1.0) < o.elastic.p) {
    x = elastic(x, random_elastic_displacement(o.height, o.width, o.elastic, rng));
  }
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
