// The evaluation transform of image classifiers, as timm's transforms_imagenet_eval and
// torchvision's ImageClassification preset compute it:
//
//   scale = floor(size / crop_pct)                     per side of the model's input size
//   resize: crop mode center (timm's default, torchvision): a square input -> the shorter side
//           to scale, the longer to floor(scale · long / short) (torchvision Resize(int));
//           otherwise timm's ResizeKeepRatio: both sides divided by min(H / scale_h,
//           W / scale_w), rounded half to even (Python's round)
//           crop mode squash (timm's "squash", Hugging Face's ViT and DeiT image processors):
//           both sides to scale_h x scale_w exactly, whatever the aspect ratio
//   crop:   the centre, top = round((H' - h) / 2), left likewise (torchvision center_crop)
//   then /255, (x - mean) / std, channels first.
//
// Resizing is antialiased (a filter widened by the scale when shrinking), bilinear or bicubic
// (a = -0.5), i.e. PIL's Image.resize, which both references run on their PIL images. LibTorch's
// interpolate(antialias=true) implements that filter. On uint8 images its CPU kernel also
// reproduces PIL's fixed-point rounding: measured on the opencv-doc photos it equals timm's
// tensors exactly or within two grey levels on a few pixels. The same resize on float pixels
// differs from PIL by rounding alone, yet that is a mean of 1.3/255 after ImageNet's std, more
// than the 1/255 the tests allow; so decoded (8-bit) images take the uint8 path, and float
// images (any other source) the float path, clamped to [0, 1] as PIL's output is.
#pragma once

#include <attnzoo/preprocess/image/decode.h>
#include <attnzoo/preprocess/image/transform_options.h>

#include <torch/types.h>
#include <opencv2/core/mat.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo {

// Where an H×W image goes: its size after the resize, and the crop taken from that.
struct ResizeCropPlan {
  int64_t resized_height = 0, resized_width = 0;
  int64_t top = 0, left = 0;
  int64_t crop_height = 0, crop_width = 0;
};

class EvalImageTransform {
 public:
  // Throws c10::ValueError for sizes < 1, crop_pct outside (0, 1], mean/std not of 3 values, or
  // a std <= 0.
  explicit EvalImageTransform(ImageTransformOptions options);

  const ImageTransformOptions& options() const { return options_; }

  // The geometry for an image of height × width (both >= 1). Throws c10::ValueError when the
  // resized image would exceed max_resized_pixels.
  ResizeCropPlan plan(int64_t height, int64_t width) const;

  // image: [3, H, W] RGB, uint8 or floating point in [0, 1] -> [3, height, width] float32.
  torch::Tensor operator()(const torch::Tensor& image) const;
  // rgb: an 8-bit RGB image (CV_8UC3, as decode_image returns) -> [3, height, width] float32.
  torch::Tensor operator()(const cv::Mat& rgb) const;

 private:
  ImageTransformOptions options_;
  torch::Tensor mean_, std_;  // [3, 1, 1] float32
};

// An 8-bit RGB cv::Mat (CV_8UC3) as a uint8 tensor [3, H, W] in channels-last memory: the Mat's
// own layout (shared, not copied; the tensor keeps the Mat alive), and the one LibTorch's uint8
// resize kernels take.
torch::Tensor image_to_tensor(const cv::Mat& rgb);

// Resizes [3, H, W] (uint8, or float in [0, 1]) to [3, height, width] with the antialiased
// filter, as PIL's resize; float results are clamped to [0, 1]. Same size: returned as is.
torch::Tensor resize_image(const torch::Tensor& image, int64_t height, int64_t width,
                           Interpolation mode);

// Decodes each file (preprocess/image/decode.h) and applies `transform`: [N, 3, height, width].
// Errors of any image are ImageErrors naming its file.
torch::Tensor load_image_batch(const std::vector<std::string>& paths,
                               const EvalImageTransform& transform,
                               const ImageDecodeOptions& decode_options = {});

}  // namespace attnzoo
