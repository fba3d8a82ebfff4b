#include "tools/cli/bench_features.h"
#include "tools/cli/bench_stats.h"

#include <attnzoo/configs/registry.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/preprocess/audio_features.h>
#include <attnzoo/preprocess/audio_from_config.h>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace attnzoo::cli {
namespace {

template <typename F>
std::vector<double> time_calls(const F& call, int64_t warmup, int64_t iterations) {
  for (int64_t i = 0; i < warmup; ++i) call();
  std::vector<double> times;
  for (int64_t i = 0; i < iterations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return times;
}

}  // namespace

int run_feature_bench(const FeatureBenchOptions& o) {
  if (o.threads > 0) torch::set_num_threads(static_cast<int>(o.threads));
  const auto config = resolve_model_config(o.model, o.overrides);
  const FeatureExtractor extractor(audio_feature_options(config.features));
  const auto waveform = read_audio(o.input);
  const auto rate = extractor.options().sample_rate;
  if (waveform.info.sample_rate != rate) {
    throw Error(o.input + ": sampled at " + std::to_string(waveform.info.sample_rate) +
                " Hz; the in-memory comparison needs the features' rate, " + std::to_string(rate) +
                " Hz");
  }
  const double seconds = static_cast<double>(waveform.samples.size(0)) / static_cast<double>(rate);

  torch::Tensor features;
  const auto memory = time_calls(
      [&] {
        torch::InferenceMode inference;
        features = extractor(waveform.samples, o.input);
      },
      o.warmup, o.iterations);
  const auto file = time_calls(
      [&] {
        torch::InferenceMode inference;
        audio_file_features(o.input, extractor);
      },
      o.warmup, o.iterations);

  std::printf("%s (%.1f s): %s, threads %d\n", o.input.c_str(), seconds,
              extractor.describe().c_str(), torch::get_num_threads());
  std::printf("  samples in memory: median %.3f ms, min %.3f ms (RTF %.5f)\n", median(memory),
              *std::min_element(memory.begin(), memory.end()), median(memory) / 1e3 / seconds);
  std::printf("  from the file:     median %.3f ms, min %.3f ms (RTF %.5f)\n", median(file),
              *std::min_element(file.begin(), file.end()), median(file) / 1e3 / seconds);
  if (!o.json.empty()) {
    nlohmann::json j = {{"input", o.input},
                        {"seconds", seconds},
                        {"features", extractor.describe()},
                        {"frames", features.size(0)},
                        {"threads", torch::get_num_threads()},
                        {"memory_ms", memory},
                        {"file_ms", file},
                        {"memory_median_ms", median(memory)},
                        {"file_median_ms", median(file)}};
    std::ofstream out(o.json);
    out << j.dump(1) << "\n";
    if (!out) throw Error(o.json + ": cannot write");
  }
  if (!o.output.empty()) {
    io::TensorDict tensors;
    tensors.insert("features", features.contiguous());
    io::save_safetensors(o.output, tensors, {{"model", config.name}});
  }
  return 0;
}

}  // namespace attnzoo::cli
