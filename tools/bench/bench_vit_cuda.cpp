// bench_vit_cuda: attnzoo's ViT-B/16 (224, timm's vit_base_patch16_224) forward on a GPU, in bf16,
// at several batch sizes, with the attention layer on `auto` (our flash kernel where it applies)
// and on LibTorch's `sdpa`, eagerly and replayed from a CUDA graph. Random weights (the time does
// not depend on them). Timed with CUDA events after warm-up; medians of `iterations` calls in each
// of `rounds` rounds, the configurations alternating within a round. Built with
// ATTNZOO_KERNELS_ONLY too (it needs only models/), so tools/device_check.sh runs it on the GPU
// machine; tools/bench/bench_vit_cuda.py runs it beside timm-equivalent eager PyTorch and
// torch.compile.
//
//   bench_vit_cuda [--batches 1,64,256] [--iterations 20] [--rounds 3] [--json FILE]
#include <attnzoo/core/error.h>
#include <attnzoo/io/atomic_file.h>
#include <attnzoo/models/cuda_graph.h>
#include <attnzoo/models/vit.h>

#include "tools/bench/timing.h"

#include <nlohmann/json.hpp>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Options {
  std::vector<int64_t> batches = {1, 64, 256};
  int64_t iterations = 20;
  int64_t rounds = 3;
  std::string json;
};

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

// Milliseconds per call of `fn`, by CUDA events around `iterations` calls on the current stream.
template <typename Fn>
double time_ms(Fn&& fn, int64_t iterations) {
  at::cuda::CUDAEvent begin(cudaEventDefault), end(cudaEventDefault);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  begin.record(stream);
  for (int64_t i = 0; i < iterations; ++i) fn();
  end.record(stream);
  end.synchronize();
  return static_cast<double>(begin.elapsed_time(end)) / static_cast<double>(iterations);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(arg + ": expected a value");
      return argv[++i];
    };
    if (arg == "--batches") {
      o.batches = parse_list(value());
    } else if (arg == "--iterations") {
      o.iterations = std::stoll(value());
    } else if (arg == "--rounds") {
      o.rounds = std::stoll(value());
    } else if (arg == "--json") {
      o.json = value();
    } else {
      std::fprintf(stderr, "bench_vit_cuda: unknown argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_vit_cuda: no CUDA device\n");
    return 1;
  }
  torch::manual_seed(0);
  torch::InferenceMode inference;
  std::map<std::string, attnzoo::VisionTransformer> models;
  for (const std::string backend : {"auto", "sdpa"}) {
    torch::manual_seed(0);
    attnzoo::VisionTransformer vit(attnzoo::ViTOptions().attention_backend(backend));
    vit->eval();
    vit->to(torch::kCUDA, torch::kBFloat16);
    models.emplace(backend, vit);
  }
  struct Config {
    std::string name, backend;
    bool graph;
  };
  const std::vector<Config> configs = {{"attnzoo auto (flash)", "auto", false},
                                       {"attnzoo sdpa", "sdpa", false},
                                       {"attnzoo auto + CUDA graph", "auto", true}};
  nlohmann::json json = {
      {"model", "vit_base_patch16_224"}, {"dtype", "bf16"}, {"results", nlohmann::json::array()}};
  std::printf("%-28s %6s %12s %12s\n", "configuration", "batch", "median ms", "images/s");
  for (const int64_t batch : o.batches) {
    const auto x = torch::randn(
        {batch, 3, 224, 224}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16));
    std::vector<std::unique_ptr<attnzoo::CudaGraphForward>> graphs(configs.size());
    std::vector<std::vector<double>> times(configs.size());
    for (size_t c = 0; c < configs.size(); ++c) {
      auto model = models.at(configs[c].backend);
      if (configs[c].graph) {
        graphs[c] = std::make_unique<attnzoo::CudaGraphForward>(
            [model](const torch::Tensor& in) mutable { return model->forward(in); }, x);
      }
    }
    for (int64_t round = 0; round < o.rounds; ++round) {
      for (size_t c = 0; c < configs.size(); ++c) {
        auto model = models.at(configs[c].backend);
        auto* graph = graphs[c].get();
        const auto call = [&] { return graph ? (*graph)(x) : model->forward(x); };
        for (int w = 0; w < 3; ++w) call();
        times[c].push_back(time_ms(call, o.iterations));
      }
    }
    for (size_t c = 0; c < configs.size(); ++c) {
      const double ms = attnzoo::bench::median(times[c]);
      const double ips = 1000.0 * static_cast<double>(batch) / ms;
      std::printf("%-28s %6lld %12.3f %12.1f\n", configs[c].name.c_str(),
                  static_cast<long long>(batch), ms, ips);
      json["results"].push_back({{"configuration", configs[c].name},
                                 {"batch", batch},
                                 {"median_ms", ms},
                                 {"images_per_second", ips}});
    }
  }
  if (!o.json.empty()) {
    try {
      attnzoo::io::write_file_atomically(o.json, json.dump(1) + "\n");
    } catch (const attnzoo::Error& e) {
      std::fprintf(stderr, "bench_vit_cuda: %s\n", e.what());
      return 1;
    }
  }
  return 0;
}
