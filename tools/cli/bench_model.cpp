#include "tools/cli/bench_model.h"
#include "tools/cli/bench_stats.h"
#include "tools/cli/dtype_flag.h"

#include <attnzoo/configs/registry.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/models/cuda_graph.h>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>

namespace attnzoo::cli {

int run_model_bench(const ModelBenchOptions& o) {
  if (o.device == "cuda" && !torch::cuda::is_available()) {
    throw Error("--device cuda: no CUDA device is available to this process");
  }
  if (o.cuda_graph && o.device != "cuda") {
    throw Error("--cuda-graph: CUDA graphs need --device cuda");
  }
  if (o.threads > 0) torch::set_num_threads(static_cast<int>(o.threads));
  const auto config = resolve_model_config(o.model, o.overrides);
  torch::manual_seed(0);
  auto model = build_model(config);
  const torch::Device device(o.device == "cuda" ? torch::kCUDA : torch::kCPU);
  const auto dtype = dtype_flag(o.dtype);
  model.module->eval();
  model.module->to(device, dtype);

  // The input: seeded, so that two runs (e.g. fp32 and bf16) see the same numbers.
  torch::manual_seed(1);
  const auto frames = o.frames > 0
                          ? o.frames
                          : static_cast<int64_t>(o.seconds * config.features.frames_per_second());
  const auto input = model.family().random_input(config, o.batch, frames).values;
  const auto on_device = input.to(device, dtype);
  // The model's first output: the logits of a classifier, the encoded frames of an encoder.
  const auto eager = [&](const torch::Tensor& x) {
    torch::InferenceMode inference;
    return model.forward({x}).front().second;
  };
  std::unique_ptr<CudaGraphForward> graph;
  if (o.cuda_graph) graph = std::make_unique<CudaGraphForward>(eager, on_device);
  const auto forward = [&] { return graph ? (*graph)(on_device) : eager(on_device); };
  const auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize();
  };
  for (int64_t i = 0; i < o.warmup; ++i) forward();
  sync();
  std::vector<double> times;
  torch::Tensor output;
  for (int64_t i = 0; i < o.iterations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    output = forward();
    sync();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const double med = median(times);
  const double best = *std::min_element(times.begin(), times.end());
  std::printf("%s batch %lld %s %s%s threads %d: median %.3f ms, min %.3f ms over %lld calls\n",
              config.name.c_str(), static_cast<long long>(o.batch), o.dtype.c_str(),
              o.device.c_str(), graph ? " (CUDA graph)" : "", torch::get_num_threads(), med, best,
              static_cast<long long>(o.iterations));
  if (!o.json.empty()) {
    nlohmann::json j = {{"model", config.name},
                        {"batch", o.batch},
                        {"dtype", o.dtype},
                        {"device", o.device},
                        {"cuda_graph", o.cuda_graph},
                        {"threads", torch::get_num_threads()},
                        {"input", input.sizes().vec()},
                        {"times_ms", times},
                        {"median_ms", med},
                        {"min_ms", best}};
    std::ofstream out(o.json);
    out << j.dump(1) << "\n";
    if (!out) throw Error(o.json + ": cannot write");
  }
  if (!o.output.empty()) {
    io::TensorDict tensors;
    tensors.insert("input", input.contiguous());
    tensors.insert("output", output.to(torch::kCPU, torch::kFloat).contiguous());
    io::save_safetensors(o.output, tensors, {{"model", config.name}, {"dtype", o.dtype}});
  }
  return 0;
}

}  // namespace attnzoo::cli
