#include <attnzoo/preprocess/image/transform.h>

#include <attnzoo/preprocess/image/internal.h>

#include <c10/util/Exception.h>
#include <torch/nn/functional/upsampling.h>
#include <torch/torch.h>

#include <cmath>
#include <sstream>

namespace attnzoo {
namespace {

// Sides beyond 2^31 are no image; the bound keeps every product below in int64.
constexpr double kMaxSide = 2147483647.0;

using detail::channel_vector;
using detail::round_half_even;

}  // namespace

Interpolation parse_interpolation(const std::string& name) {
  if (name == "bilinear") return Interpolation::kBilinear;
  if (name == "bicubic") return Interpolation::kBicubic;
  TORCH_CHECK_VALUE(false, "interpolation: expected 'bilinear' or 'bicubic', got '", name, "'");
}

CropMode parse_crop_mode(const std::string& name) {
  if (name == "center") return CropMode::kCenter;
  if (name == "squash") return CropMode::kSquash;
  TORCH_CHECK_VALUE(false, "crop_mode: expected 'center' or 'squash', got '", name, "'");
}

EvalImageTransform::EvalImageTransform(ImageTransformOptions options)
    : options_(std::move(options)) {
  const auto& o = options_;
  TORCH_CHECK_VALUE(o.height >= 1 && o.width >= 1,
                    "ImageTransformOptions: the input size must be at least 1x1, got ", o.height,
                    "x", o.width);
  TORCH_CHECK_VALUE(o.crop_pct > 0.0 && o.crop_pct <= 1.0,
                    "ImageTransformOptions: crop_pct must be in (0, 1], got ", o.crop_pct);
  TORCH_CHECK_VALUE(static_cast<double>(std::max(o.height, o.width)) / o.crop_pct <= kMaxSide,
                    "ImageTransformOptions: input size ", o.height, "x", o.width, " / crop_pct ",
                    o.crop_pct, " is too large");
  TORCH_CHECK_VALUE(o.mean.size() == 3 && o.std.size() == 3,
                    "ImageTransformOptions: mean and std need 3 values (RGB), got ", o.mean.size(),
                    " and ", o.std.size());
  for (size_t c = 0; c < 3; ++c) {
    TORCH_CHECK_VALUE(std::isfinite(o.mean[c]) && std::isfinite(o.std[c]) && o.std[c] > 0.0,
                      "ImageTransformOptions: mean must be finite and std positive, got mean[", c,
                      "] = ", o.mean[c], ", std[", c, "] = ", o.std[c]);
  }
  TORCH_CHECK_VALUE(o.max_resized_pixels >= 1,
                    "ImageTransformOptions: max_resized_pixels must be positive, got ",
                    o.max_resized_pixels);
  mean_ = channel_vector(o.mean);
  std_ = channel_vector(o.std);
}

ResizeCropPlan EvalImageTransform::plan(int64_t height, int64_t width) const {
  TORCH_CHECK_VALUE(height >= 1 && width >= 1 && height <= kMaxSide && width <= kMaxSide,
                    "image: expected a size of at least 1x1, got ", height, "x", width);
  const auto& o = options_;
  // timm: math.floor(img_size / crop_pct), per side.
  const auto scale_h = static_cast<int64_t>(std::floor(o.height / o.crop_pct));
  const auto scale_w = static_cast<int64_t>(std::floor(o.width / o.crop_pct));
  ResizeCropPlan p;
  if (o.crop_mode == CropMode::kSquash) {
    p.resized_height = scale_h;
    p.resized_width = scale_w;
  } else if (scale_h == scale_w) {
    // torchvision Resize(int): new_long = int(size * long / short); exact in integers.
    const int64_t shorter = std::min(height, width), longer = std::max(height, width);
    const int64_t new_long = scale_h * longer / shorter;
    p.resized_height = width <= height ? new_long : scale_h;
    p.resized_width = width <= height ? scale_h : new_long;
  } else {
    // timm ResizeKeepRatio(longest=0): the side that is relatively shorter reaches its target.
    const double ratio = std::min(static_cast<double>(height) / static_cast<double>(scale_h),
                                  static_cast<double>(width) / static_cast<double>(scale_w));
    p.resized_height = round_half_even(static_cast<double>(height) / ratio);
    p.resized_width = round_half_even(static_cast<double>(width) / ratio);
  }
  TORCH_CHECK_VALUE(p.resized_height <= o.max_resized_pixels / p.resized_width, "image of ", height,
                    "x", width, " (HxW) would be resized to ", p.resized_height, "x",
                    p.resized_width, ", more than the limit of ", o.max_resized_pixels,
                    " pixels (max_resized_pixels); its aspect ratio is too "
                    "extreme");
  p.crop_height = o.height;
  p.crop_width = o.width;
  // crop_pct <= 1 makes the resized image at least as large as the crop.
  TORCH_INTERNAL_ASSERT(p.crop_height <= p.resized_height && p.crop_width <= p.resized_width);
  // torchvision center_crop: int(round((h - crop_h) / 2.0)).
  p.top = round_half_even(static_cast<double>(p.resized_height - p.crop_height) / 2.0);
  p.left = round_half_even(static_cast<double>(p.resized_width - p.crop_width) / 2.0);
  return p;
}

torch::Tensor resize_image(const torch::Tensor& image, int64_t height, int64_t width,
                           Interpolation mode) {
  TORCH_CHECK_VALUE(
      image.dim() == 3 && image.size(0) == 3 && image.size(1) >= 1 && image.size(2) >= 1,
      "image: expected [3, H, W] with H, W >= 1, got ", c10::str(image.sizes()));
  const bool is_byte = image.scalar_type() == torch::kByte;
  TORCH_CHECK_VALUE(is_byte || image.is_floating_point(),
                    "image: expected uint8 or floating-point pixels, got ", image.scalar_type());
  TORCH_CHECK_VALUE(height >= 1 && width >= 1,
                    "resize_image: expected a size of at least 1x1, got ", height, "x", width);
  if (image.size(1) == height && image.size(2) == width) return image;
  namespace F = torch::nn::functional;
  auto batch = image.unsqueeze(0);
  // LibTorch's antialiased uint8 kernels (PIL's fixed-point arithmetic) run on channels-last
  // images; a planar uint8 image would take the generic path.
  if (is_byte) batch = batch.contiguous(torch::MemoryFormat::ChannelsLast);
  auto options = F::InterpolateFuncOptions()
                     .size(std::vector<int64_t>{height, width})
                     .align_corners(false)
                     .antialias(true);
  if (mode == Interpolation::kBicubic) {
    options.mode(torch::kBicubic);
  } else {
    options.mode(torch::kBilinear);
  }
  auto resized = F::interpolate(batch, options).squeeze(0);
  // Bicubic overshoots; PIL's output saturates at its value range.
  if (!is_byte) resized = resized.clamp(0.0, 1.0);
  return resized;
}

torch::Tensor EvalImageTransform::operator()(const torch::Tensor& image) const {
  TORCH_CHECK_VALUE(image.defined() && image.dim() == 3 && image.size(0) == 3,
                    "image: expected [3, H, W] (RGB), got ",
                    image.defined() ? c10::str(image.sizes()) : std::string("an undefined tensor"));
  const auto p = plan(image.size(1), image.size(2));
  const auto resized =
      resize_image(image, p.resized_height, p.resized_width, options_.interpolation);
  auto crop = resized.narrow(1, p.top, p.crop_height).narrow(2, p.left, p.crop_width);
  // As ToTensor and Normalize: x.float() / 255, then (x - mean) / std in float32.
  crop =
      crop.scalar_type() == torch::kByte ? crop.to(torch::kFloat).div(255) : crop.to(torch::kFloat);
  return crop.sub(mean_).div(std_).contiguous();
}

torch::Tensor EvalImageTransform::operator()(const cv::Mat& rgb) const {
  return (*this)(image_to_tensor(rgb));
}

torch::Tensor image_to_tensor(const cv::Mat& rgb) {
  TORCH_CHECK_VALUE(rgb.type() == CV_8UC3 && rgb.dims == 2 && rgb.rows >= 1 && rgb.cols >= 1,
                    "image: expected an 8-bit RGB cv::Mat (CV_8UC3) of at least 1x1, got type ",
                    rgb.type(), ", ", rgb.cols, "x", rgb.rows);
  // The tensor holds a reference to the Mat's buffer (cv::Mat is reference-counted).
  const cv::Mat pixels = rgb.isContinuous() ? rgb : rgb.clone();
  auto hwc = torch::from_blob(
      pixels.data, {pixels.rows, pixels.cols, 3},
      [keep = pixels](void*) mutable { keep.release(); },
      torch::TensorOptions().dtype(torch::kByte));
  return hwc.permute({2, 0, 1});
}

torch::Tensor load_image_batch(const std::vector<std::string>& paths,
                               const EvalImageTransform& transform,
                               const ImageDecodeOptions& decode_options) {
  TORCH_CHECK_VALUE(!paths.empty(), "load_image_batch: no images");
  std::vector<torch::Tensor> images;
  images.reserve(paths.size());
  for (const auto& path : paths) {
    const cv::Mat rgb = decode_image(path, decode_options);
    try {
      images.push_back(transform(rgb));
    } catch (const c10::Error& e) {
      throw ImageError(path + ": " + e.what_without_backtrace());
    }
  }
  return torch::stack(images);
}

}  // namespace attnzoo
