// `attnzoo preprocess`: image files through a model's eval transform (its config's input size,
// crop_pct, interpolation, mean and std; preprocess/), written as the batch "pixels" of a
// safetensors file: the input `attnzoo forward` takes, and a way to compare our preprocessing
// with timm's or torchvision's from a script.
#include "tools/cli/commands.h"

#include <attnzoo/api/frontend_options.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/preprocess/image/decode.h>
#include <attnzoo/preprocess/image/transform.h>

#include <torch/torch.h>

#include <iostream>
#include <sstream>
#include <stdexcept>

namespace attnzoo::cli {
namespace {

struct PreprocessOptions {
  std::string model;
  std::vector<std::string> images;
  std::string output;
  std::vector<std::string> overrides;
  int64_t max_pixels = ImageDecodeOptions{}.max_pixels;
};

std::string join(const std::vector<double>& values) {
  std::ostringstream out;
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "[") << values[i];
  out << "]";
  return out.str();
}

int run_preprocess(const PreprocessOptions& options) {
  const auto config = resolve_model_config(options.model, options.overrides);
  if (model_family(config.family).input_kind() != InputKind::kImages) {
    throw Error(config.name + " is a " + config.family +
                " model; preprocess prepares images for image models");
  }
  const EvalImageTransform transform(image_transform_options(config.image));
  const auto& t = transform.options();
  ImageDecodeOptions decode;
  decode.max_pixels = options.max_pixels;

  // Every image is decoded and transformed before anything is written: one bad file, no output.
  std::vector<torch::Tensor> images;
  std::ostringstream report;
  for (const auto& path : options.images) {
    const cv::Mat rgb = decode_image(path, decode);
    try {
      const auto p = transform.plan(rgb.rows, rgb.cols);
      images.push_back(transform(rgb));
      report << path << ": " << rgb.cols << "x" << rgb.rows << " -> resized " << p.resized_width
             << "x" << p.resized_height << " -> crop " << p.crop_width << "x" << p.crop_height
             << " at (" << p.left << ", " << p.top << ")\n";
    } catch (const c10::Error& e) {
      throw ImageError(path + ": " + e.what_without_backtrace());
    }
  }
  const auto pixels = torch::stack(images);

  std::string list;
  for (const auto& path : options.images) list += (list.empty() ? "" : "\n") + path;
  std::ostringstream transform_text;
  transform_text << to_string(t.interpolation) << " antialiased resize (crop_pct " << t.crop_pct
                 << "), centre crop " << t.height << "x" << t.width << ", mean " << join(t.mean)
                 << ", std " << join(t.std);
  io::TensorDict tensors;
  tensors.insert("pixels", pixels);
  io::save_safetensors(options.output, tensors,
                       {{"model", config.name},
                        {"config", config.source},
                        {"images", list},
                        {"transform", transform_text.str()}});
  std::ostringstream shape;
  shape << pixels.sizes();
  std::cout << report.str() << config.name << " (" << config.source << "): " << transform_text.str()
            << "\n"
            << "pixels " << shape.str() << " -> " << options.output << "\n";
  return 0;
}

}  // namespace

Command add_preprocess_command(CLI::App& app) {
  auto options = std::make_shared<PreprocessOptions>();
  auto* sub = app.add_subcommand(
      "preprocess",
      "Decode images and apply a model's eval transform; write the batch as 'pixels'");
  sub->add_option("--model", options->model,
                  "A registered name (see attnzoo models) or a YAML file")
      ->required();
  sub->add_option("images", options->images, "Image files (JPEG, PNG, WebP, BMP, TIFF)")
      ->required();
  sub->add_option("--out", options->output, "safetensors file to write 'pixels' [N, 3, H, W]")
      ->required();
  // One value per --set, so that the images may follow it.
  sub->add_option("--set", options->overrides,
                  "Override a config value, key.path=value (YAML value); repeatable")
      ->allow_extra_args(false);
  sub->add_option("--max-pixels", options->max_pixels,
                  "Refuse images larger than this many pixels (checked before decoding)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return {sub, [options] { return run_preprocess(*options); }};
}

}  // namespace attnzoo::cli
