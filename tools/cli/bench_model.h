// `attnzoo bench model`: the latency of one model of the zoo (or any YAML config) on a fixed
// random input: a ViT on [B, 3, H, W] images, a Conformer on [B, T, F] features of `seconds` of
// audio. Weights are random (seed 0): the time does not depend on them. The peer comparisons
// (timm, ONNX Runtime, torchaudio) run this binary from Python scripts in tools/, alternating
// with the peers in one session (tools/bench/bench_vit_cpu.py).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo::cli {

struct ModelBenchOptions {
  std::string model;
  std::vector<std::string> overrides;
  int64_t batch = 1;
  double seconds = 10.0;  // Conformer input: seconds of audio at the features' frame rate,
  int64_t frames = 0;     //   or this many input frames when > 0
  int64_t iterations = 20;
  int64_t warmup = 3;
  int64_t threads = 0;  // 0: LibTorch's default
  std::string dtype = "fp32";
  std::string device = "cpu";
  bool cuda_graph = false;  // CUDA: time replays of the forward recorded as a CUDA graph
  std::string json;         // every timed call and the summary
  std::string output;       // safetensors with the input and the output of the last call
  int64_t profile_ops = 0;  // > 0: that many more forwards with each op's self time recorded
};

int run_model_bench(const ModelBenchOptions& options);

}  // namespace attnzoo::cli
