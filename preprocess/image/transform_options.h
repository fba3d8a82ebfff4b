// The options of the image frontend's evaluation transform, and the closed choices among them,
// with their names in a model config. Light (the standard library alone), so that
// configs/model_config.h, which reads a config's `preprocess:` section into them, does not bring
// OpenCV and LibTorch to everything that includes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo {

enum class Interpolation { kBilinear, kBicubic };
// "bilinear" | "bicubic" (the values of a config's preprocess.interpolation).
Interpolation parse_interpolation(const std::string& name);
constexpr const char* to_string(Interpolation mode) {
  return mode == Interpolation::kBicubic ? "bicubic" : "bilinear";
}

// How the image reaches the crop: keeping its aspect ratio, or resized to the crop's scale
// exactly.
enum class CropMode { kCenter, kSquash };
// "center" | "squash" (the values of a config's preprocess.crop_mode).
CropMode parse_crop_mode(const std::string& name);
constexpr const char* to_string(CropMode mode) {
  return mode == CropMode::kSquash ? "squash" : "center";
}

// The options of the evaluation transform: a model config's `preprocess:` section reads into
// them (configs/model_config.h), with the defaults of timm's transforms_imagenet_eval.
struct ImageTransformOptions {
  int64_t height = 224;  // the model's input size, input_size[1] and [2]
  int64_t width = 224;
  double crop_pct = 0.875;  // in (0, 1]
  CropMode crop_mode = CropMode::kCenter;
  Interpolation interpolation = Interpolation::kBilinear;
  std::vector<double> mean = {0.485, 0.456, 0.406};  // per RGB channel, on pixels in [0, 1]
  std::vector<double> std = {0.229, 0.224, 0.225};
  // The resized image (before the crop) may not exceed this many pixels: a 1×20000 strip would
  // otherwise be scaled to 256×5120000.
  int64_t max_resized_pixels = 100'000'000;
};

}  // namespace attnzoo
