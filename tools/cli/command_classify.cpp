// `attnzoo classify`: images through an ImageClassifier (api/image_classifier.h), or audio files
// through an AudioClassifier (api/audio_classifier.h) when the config is a Conformer with a
// classification head: a model of the zoo or a YAML config, its weights, frontend and labels. A
// table by default; with --json one object per input and line ("image" or "audio", "top",
// "ms"; or "error"). A bad input gets its error and the others are still classified; the exit
// status is 1 if any input failed.
#include "tools/bench/timing.h"
#include "tools/cli/commands.h"

#include <attnzoo/api/audio_classifier.h>
#include <attnzoo/api/image_classifier.h>
#include <attnzoo/configs/registry.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

namespace attnzoo::cli {
namespace {

struct ClassifyOptions {
  std::string model;
  std::vector<std::string> inputs;
  ImageClassifierOptions classifier;
  int64_t topk = 5;
  bool json = false;
};

// One classified input, as a table or a JSON line. `key`: "image" or "audio".
struct Classified {
  const std::string& input;
  const std::vector<Prediction>& top;
  const std::string& error;
  double ms;
};

void print_result(const Classified& r, const char* key, bool json) {
  if (json) {
    nlohmann::json line = {{key, r.input}};
    if (r.error.empty()) {
      auto top = nlohmann::json::array();
      for (const auto& p : r.top) {
        top.push_back({{"index", p.index}, {"label", p.label}, {"prob", p.probability}});
      }
      line["top"] = top;
      line["ms"] = r.ms;
    } else {
      line["error"] = r.error;
    }
    std::cout << line.dump() << "\n";
    return;
  }
  if (!r.error.empty()) {
    std::cout << r.input << ": error: " << r.error << "\n";
    return;
  }
  std::printf("%s (%.1f ms)\n", r.input.c_str(), r.ms);
  for (const auto& p : r.top) {
    std::printf("  %6.2f%%  %5lld  %s\n", 100.0 * p.probability, static_cast<long long>(p.index),
                p.label.c_str());
  }
}

void print_header(const ClassifyOptions& options, const ModelConfig& config,
                  const std::string& weights, c10::ScalarType dtype) {
  if (options.json) return;
  std::cout << config.name << " (" << config.source << "), " << weights << ", "
            << options.classifier.device << ", " << dtype_name(dtype) << "\n";
}

int report_failures(int failed, size_t total, const char* what) {
  if (failed == 0) return 0;
  std::cerr << "attnzoo classify: " << failed << " of " << total << " " << what << " failed\n";
  return 1;
}

std::vector<std::string> slice(const std::vector<std::string>& all, size_t start, size_t count) {
  return {all.begin() + static_cast<std::ptrdiff_t>(start),
          all.begin() + static_cast<std::ptrdiff_t>(std::min(start + count, all.size()))};
}

int run_audio(const ClassifyOptions& options) {
  AudioClassifierOptions o;
  o.weights = options.classifier.weights;
  o.format = options.classifier.format;
  o.overrides = options.classifier.overrides;
  o.device = options.classifier.device;
  o.dtype = options.classifier.dtype;
  o.threads = options.classifier.threads;
  o.batch_size = options.classifier.batch_size;
  const AudioClassifier classifier(options.model, o);
  print_header(options, classifier.config(), classifier.weights_description(),
               classifier.encoder().dtype());
  int failed = 0;
  const auto batch = static_cast<size_t>(o.batch_size);
  for (size_t start = 0; start < options.inputs.size(); start += batch) {
    for (const auto& r : classifier.classify(slice(options.inputs, start, batch), options.topk)) {
      failed += !r.ok();
      print_result({r.audio, r.top, r.error, r.encode_ms}, "audio", options.json);
    }
    std::cout.flush();
  }
  return report_failures(failed, options.inputs.size(), "audio files");
}

int run_classify(ClassifyOptions options) {
  if (is_audio_classifier(resolve_model_config(options.model, options.classifier.overrides))) {
    return run_audio(options);
  }
  const ImageClassifier classifier(options.model, options.classifier);
  print_header(options, classifier.config(), classifier.weights_description(), classifier.dtype());
  int failed = 0;
  const auto batch = static_cast<size_t>(options.classifier.batch_size);
  for (size_t start = 0; start < options.inputs.size(); start += batch) {
    const bench::Stopwatch watch;
    const auto results = classifier.classify(slice(options.inputs, start, batch), options.topk);
    const double batch_ms = watch.elapsed_ms();
    size_t ok = 0;
    for (const auto& r : results) ok += r.ok();
    // Wall time of the batch shared among the images it classified.
    const double ms = ok > 0 ? batch_ms / static_cast<double>(ok) : 0.0;
    for (const auto& r : results) {
      failed += !r.ok();
      print_result({r.image, r.top, r.error, ms}, "image", options.json);
    }
    std::cout.flush();
  }
  return report_failures(failed, options.inputs.size(), "images");
}

}  // namespace

Command add_classify_command(CLI::App& app) {
  auto options = std::make_shared<ClassifyOptions>();
  auto* sub = app.add_subcommand(
      "classify",
      "Classify images, or audio files with a Conformer that has a classification head");
  add_model_options(sub, options->model, options->classifier, all_checkpoint_formats());
  sub->add_option("--topk", options->topk, "Classes per image")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
      ->capture_default_str();
  add_device_options(sub, options->classifier);
  sub->add_option("--batch", options->classifier.batch_size, "Inputs per forward pass")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  sub->add_option("--threads", options->classifier.threads,
                  "LibTorch intra-op threads (default: LibTorch's)")
      ->check(CLI::Range(0, 1024));
  sub->add_flag("--json", options->json,
                "One JSON object per input and line: image (or audio), top [index, label, prob], "
                "ms; or image (or audio), error");
  sub->add_option("inputs", options->inputs,
                  "Image files, or audio files for an audio classifier (any format libsndfile "
                  "reads)")
      ->required();
  return {sub, [options] { return run_classify(*options); }};
}

}  // namespace attnzoo::cli
