// libFuzzer target: the image frontend on arbitrary bytes, from the header checks through
// OpenCV's decoders to the eval and training transforms. Whatever decodes must have the size its
// header announced (transposed by an EXIF orientation at most) and must transform to finite
// tensors of the model's size; whatever is refused must be refused with ImageError, or with
// c10::ValueError for an aspect ratio the transform will not scale up. The seed corpus
// (tests/fuzz/corpus/image/) holds a tiny image of each format, depth and layout.
#include <attnzoo/preprocess/image/augment.h>
#include <attnzoo/preprocess/image/decode.h>
#include <attnzoo/preprocess/image/header.h>
#include <attnzoo/preprocess/image/transform.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>
#include <opencv2/core/utility.hpp>

#include <cstddef>
#include <cstdint>
#include <random>

namespace {

using namespace attnzoo;

// Small limits keep each run fast; the checks are the same at any size.
constexpr int64_t kMaxPixels = int64_t{1} << 20;

const EvalImageTransform& eval_transform() {
  static const EvalImageTransform transform([] {
    ImageTransformOptions o;
    o.height = 32;
    o.width = 24;
    o.crop_pct = 0.875;
    o.interpolation = Interpolation::kBicubic;
    o.max_resized_pixels = kMaxPixels;
    return o;
  }());
  return transform;
}

const TrainImageTransform& train_transform() {
  static const TrainImageTransform transform([] {
    TrainTransformOptions o;
    o.height = o.width = 16;
    o.color_jitter.hue = 0.1;
    return o;
  }());
  return transform;
}

void check_output(const torch::Tensor& x, int64_t height, int64_t width) {
  if (x.dim() != 3 || x.size(0) != 3 || x.size(1) != height || x.size(2) != width ||
      x.scalar_type() != torch::kFloat || !torch::isfinite(x).all().item<bool>()) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::set_num_threads(1);
  cv::setNumThreads(0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ImageHeader header;
  try {
    header = read_image_header(data, size, "fuzz");
  } catch (const ImageError&) {
    return 0;
  }
  ImageDecodeOptions options;
  options.max_pixels = kMaxPixels;
  cv::Mat rgb;
  try {
    rgb = decode_image_from_memory(data, size, "fuzz", options);
  } catch (const ImageError&) {
    return 0;
  }
  const bool upright = rgb.rows == header.height && rgb.cols == header.width;
  const bool transposed = rgb.rows == header.width && rgb.cols == header.height;
  if (rgb.type() != CV_8UC3 || !(upright || transposed)) __builtin_trap();
  try {
    check_output(eval_transform()(rgb), 32, 24);
  } catch (const c10::ValueError&) {
    // Only an image whose resize would exceed max_resized_pixels may be refused; any other
    // aspect ratio must have gone through.
    const auto shorter = std::min(rgb.rows, rgb.cols), longer = std::max(rgb.rows, rgb.cols);
    if (static_cast<double>(longer) / shorter * 36 * 36 < 0.5 * kMaxPixels) __builtin_trap();
    return 0;
  }
  std::mt19937_64 rng(size);
  check_output(train_transform()(rgb, rng), 16, 16);
  return 0;
}
