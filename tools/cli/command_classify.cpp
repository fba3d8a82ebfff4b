// `attnzoo classify`: images through an ImageClassifier (api/image_classifier.h): a model of the
// zoo or a YAML config, its weights, eval transform and labels. A table by default; with --json
// one object per image and line. A bad image gets its error and the others are still classified;
// the exit status is 1 if any image failed.
#include "tools/cli/commands.h"

#include "api/image_classifier.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

namespace attnzoo::cli {
namespace {

struct ClassifyOptions {
  std::string model;
  std::vector<std::string> images;
  ImageClassifierOptions classifier;
  int64_t topk = 5;
  bool json = false;
};

int run_classify(ClassifyOptions options) {
  const ImageClassifier classifier(options.model, options.classifier);
  const auto& config = classifier.config();
  if (!options.json) {
    std::cout << config.name << " (" << config.source << "), " << classifier.weights_description()
              << ", " << options.classifier.device << ", " << options.classifier.dtype << "\n";
  }
  int failed = 0;
  const auto batch = static_cast<size_t>(options.classifier.batch_size);
  for (size_t start = 0; start < options.images.size(); start += batch) {
    const std::vector<std::string> paths(
        options.images.begin() + static_cast<std::ptrdiff_t>(start),
        options.images.begin() +
            static_cast<std::ptrdiff_t>(std::min(start + batch, options.images.size())));
    const auto begin = std::chrono::steady_clock::now();
    const auto results = classifier.classify(paths, options.topk);
    const double batch_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    size_t ok = 0;
    for (const auto& r : results) ok += r.ok();
    // Wall time of the batch shared among the images it classified.
    const double ms = ok > 0 ? batch_ms / static_cast<double>(ok) : 0.0;
    for (const auto& r : results) {
      failed += !r.ok();
      if (options.json) {
        nlohmann::json line = {{"image", r.image}};
        if (r.ok()) {
          auto top = nlohmann::json::array();
          for (const auto& p : r.top) {
            top.push_back({{"index", p.index}, {"label", p.label}, {"prob", p.probability}});
          }
          line["top"] = top;
          line["ms"] = ms;
        } else {
          line["error"] = r.error;
        }
        std::cout << line.dump() << "\n";
        continue;
      }
      if (!r.ok()) {
        std::cout << r.image << ": error: " << r.error << "\n";
        continue;
      }
      std::printf("%s (%.1f ms)\n", r.image.c_str(), ms);
      for (const auto& p : r.top) {
        std::printf("  %6.2f%%  %5lld  %s\n", 100.0 * p.probability,
                    static_cast<long long>(p.index), p.label.c_str());
      }
    }
    std::cout.flush();
  }
  if (failed > 0) {
    std::cerr << "attnzoo classify: " << failed << " of " << options.images.size()
              << " images failed\n";
    return 1;
  }
  return 0;
}

}  // namespace

Command add_classify_command(CLI::App& app) {
  auto options = std::make_shared<ClassifyOptions>();
  auto* sub = app.add_subcommand("classify", "Classify images with a model of the zoo");
  add_model_options(sub, options->model, options->classifier.weights, options->classifier.format,
                    options->classifier.overrides, {"timm", "torchvision", "hf"});
  sub->add_option("--topk", options->topk, "Classes per image")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
      ->capture_default_str();
  sub->add_option("--device", options->classifier.device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  sub->add_option("--dtype", options->classifier.dtype, "fp32, bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  sub->add_option("--batch", options->classifier.batch_size, "Images per forward pass")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  sub->add_option("--threads", options->classifier.threads,
                  "LibTorch intra-op threads (default: LibTorch's)")
      ->check(CLI::Range(0, 1024));
  sub->add_flag("--json", options->json,
                "One JSON object per image and line: image, top [index, label, prob], ms; or "
                "image, error");
  sub->add_option("images", options->images, "Image files")->required();
  return {sub, [options] { return run_classify(*options); }};
}

}  // namespace attnzoo::cli
