#include "tools/cli/bench_features.h"

#include "tools/bench/timing.h"
#include "tools/cli/bench_machine.h"

#include <attnzoo/api/frontend_options.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/io/atomic_file.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/preprocess/audio/features.h>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace attnzoo::cli {
namespace {}  // namespace

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
  const auto memory = bench::time_calls(
      [&] {
        torch::InferenceMode inference;
        features = extractor(waveform.samples, o.input);
      },
      o.warmup, o.iterations);
  const auto file = bench::time_calls(
      [&] {
        torch::InferenceMode inference;
        audio_file_features(o.input, extractor);
      },
      o.warmup, o.iterations);

  std::printf("%s (%.1f s): %s, threads %d\n", o.input.c_str(), seconds,
              extractor.describe().c_str(), torch::get_num_threads());
  std::printf("  samples in memory: median %.3f ms, min %.3f ms (RTF %.5f)\n", memory.median(),
              memory.min(), memory.median() / 1e3 / seconds);
  std::printf("  from the file:     median %.3f ms, min %.3f ms (RTF %.5f)\n", file.median(),
              file.min(), file.median() / 1e3 / seconds);
  if (!o.json.empty()) {
    nlohmann::json j = {{"input", o.input},
                        {"seconds", seconds},
                        {"features", extractor.describe()},
                        {"frames", features.size(0)},
                        {"threads", torch::get_num_threads()},
                        {"memory_ms", memory.ms},
                        {"file_ms", file.ms},
                        {"memory_median_ms", memory.median()},
                        {"file_median_ms", file.median()},
                        {"machine", machine_json(torch::kCPU)}};
    j["machine"]["load_average_1min"] = json_number(load_average());
    io::write_file_atomically(o.json, j.dump(1) + "\n");
  }
  if (!o.output.empty()) {
    io::TensorDict tensors;
    tensors.insert("features", features.contiguous());
    io::save_safetensors(o.output, tensors, {{"model", config.name}});
  }
  return 0;
}

}  // namespace attnzoo::cli
