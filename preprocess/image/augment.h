// Training-time augmentation of images, as timm's transforms_imagenet_train composes it from
// torchvision: RandomResizedCrop, RandomHorizontalFlip, ColorJitter, then ToTensor and Normalize;
// optionally torchvision's RandomAffine and ElasticTransform after the crop (for digits and other
// small images).
// The geometry and the colour operations follow torchvision's code (transforms.py and
// _functional_tensor.py); the parameters are drawn from a std::mt19937_64 the caller seeds and
// owns (one per data-loading worker), so that a seed reproduces a run's augmentations.
#pragma once

#include <attnzoo/preprocess/image/transform.h>

#include <torch/types.h>
#include <opencv2/core/mat.hpp>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

namespace attnzoo {

// Uniform numbers from the generator, computed here rather than by <random>'s distributions
// (whose algorithms the standard leaves to each library): a seed gives the same numbers with
// libstdc++ and libc++. uniform: [low, high); random_int: [low, high), high > low.
double uniform(std::mt19937_64& rng, double low, double high);
int64_t random_int(std::mt19937_64& rng, int64_t low, int64_t high);

struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// torchvision RandomResizedCrop.get_params: up to 10 tries of an area fraction in `scale` and an
// aspect ratio (w / h) log-uniform in `ratio`, else the central crop clamped to `ratio`.
CropBox random_resized_crop_box(int64_t height, int64_t width, std::array<double, 2> scale,
                                std::array<double, 2> ratio, std::mt19937_64& rng);

// image: [3, H, W] (uint8, or float in [0, 1]); `box` inside it -> [3, height, width] of the same
// dtype, resized as resize_image does (torchvision's resized_crop on a PIL image).
torch::Tensor resized_crop(const torch::Tensor& image, const CropBox& box, int64_t height,
                           int64_t width, Interpolation mode);

// image: [3, H, W] -> the same, mirrored left to right.
torch::Tensor horizontal_flip(const torch::Tensor& image);

// torchvision.transforms.functional.adjust_*, on float images [3, H, W] in [0, 1]; results are
// clamped to [0, 1]. brightness, contrast, saturation: factor >= 0 (1 = unchanged); hue: a
// rotation in [-0.5, 0.5] of a turn (0 = unchanged).
torch::Tensor adjust_brightness(const torch::Tensor& image, double factor);
torch::Tensor adjust_contrast(const torch::Tensor& image, double factor);
torch::Tensor adjust_saturation(const torch::Tensor& image, double factor);
torch::Tensor adjust_hue(const torch::Tensor& image, double hue_factor);

// torchvision ColorJitter: factors uniform in [max(0, 1 - b), 1 + b] (brightness, contrast,
// saturation) and [-h, h] (hue, h <= 0.5), applied in a random order; 0 switches one off.
struct ColorJitterOptions {
  double brightness = 0.4;  // timm's default color_jitter of 0.4, hue off
  double contrast = 0.4;
  double saturation = 0.4;
  double hue = 0.0;
};
// image: float [3, H, W] in [0, 1] -> the same.
torch::Tensor color_jitter(const torch::Tensor& image, const ColorJitterOptions& options,
                           std::mt19937_64& rng);

// torchvision RandomAffine: a rotation uniform in [-degrees, degrees], a translation by whole
// pixels uniform in [-translate, translate] of the width and height, a scale uniform in `scale`
// and a shear along x uniform in [-shear, shear] degrees, about the image centre
// ((W - 1) / 2, (H - 1) / 2); bilinear, with 0 outside the image. All zero / {1, 1}: off.
struct AffineOptions {
  double degrees = 0.0;
  double translate = 0.0;  // fraction of the size, [0, 1]
  std::array<double, 2> scale = {1.0, 1.0};
  double shear = 0.0;  // degrees, [0, 90)
  bool enabled() const {
    return degrees > 0.0 || translate > 0.0 || scale[0] != 1.0 || scale[1] != 1.0 || shear > 0.0;
  }
};

// The parameters of one draw, and the 2x3 matrix mapping input pixel (x, y) to output pixel.
struct AffineParams {
  double angle = 0.0;  // degrees, counter-clockwise on screen
  int64_t translate_x = 0, translate_y = 0;
  double scale = 1.0;
  double shear = 0.0;  // degrees
};
AffineParams random_affine_params(int64_t height, int64_t width, const AffineOptions& options,
                                  std::mt19937_64& rng);
std::array<double, 6> affine_matrix(const AffineParams& params, int64_t height, int64_t width);
// image: [3, H, W] uint8 or float -> the same, warped.
torch::Tensor affine(const torch::Tensor& image, const AffineParams& params);

// torchvision ElasticTransform: displacement fields for x and y of uniform noise in [-1, 1]
// per pixel, smoothed by a Gaussian of `sigma` pixels (kernel int(8 sigma + 1), odd; reflected
// edges), scaled by alpha / size into the normalised [-1, 1] grid of grid_sample
// (align_corners=False); bilinear, 0 outside (grid_sample's zero padding, i.e. torchvision's
// elastic_transform with fill=None). alpha = 0: off. `p`: the chance it is applied.
struct ElasticOptions {
  double alpha = 0.0;
  double sigma = 5.0;
  double p = 1.0;
};
// Draws the fields (2 · H · W numbers) -> displacements [2, H, W] in pixels (x, then y).
torch::Tensor random_elastic_displacement(int64_t height, int64_t width,
                                          const ElasticOptions& options, std::mt19937_64& rng);
// image: [3, H, W] uint8 or float; displacement [2, H, W] in pixels: output (x, y) samples the
// input at (x + dx, y + dy).
torch::Tensor elastic(const torch::Tensor& image, const torch::Tensor& displacement);

struct TrainTransformOptions {
  int64_t height = 224;  // the model's input size
  int64_t width = 224;
  std::array<double, 2> scale = {0.08, 1.0};  // RandomResizedCrop
  std::array<double, 2> ratio = {3.0 / 4.0, 4.0 / 3.0};
  Interpolation interpolation = Interpolation::kBilinear;
  double hflip = 0.5;      // probability
  AffineOptions affine;    // after the crop, before the flip; off by default
  ElasticOptions elastic;  // after the affine warp; off by default
  ColorJitterOptions color_jitter;
  std::vector<double> mean = {0.485, 0.456, 0.406};
  std::vector<double> std = {0.229, 0.224, 0.225};
};

class TrainImageTransform {
 public:
  // Throws c10::ValueError for a size < 1, scale or ratio not 0 < low <= high, hflip outside
  // [0, 1], negative jitter or hue above 0.5, mean/std not 3 values or std <= 0.
  explicit TrainImageTransform(TrainTransformOptions options);

  const TrainTransformOptions& options() const { return options_; }

  // image: [3, H, W] RGB, uint8 or float in [0, 1] -> [3, height, width] float32, normalised.
  torch::Tensor operator()(const torch::Tensor& image, std::mt19937_64& rng) const;
  torch::Tensor operator()(const cv::Mat& rgb, std::mt19937_64& rng) const;

 private:
  TrainTransformOptions options_;
  torch::Tensor mean_, std_;  // [3, 1, 1] float32
};

}  // namespace attnzoo
