// bench_int8_linear: one linear layer through PackedLinear in float32 (oneDNN, the weight packed
// once, the activation fused) against the same layer in int8 (int8_linear: quantize the rows,
// LibTorch's integer product, scale back, then the activation), every call in int8 (the fallback
// of PackedLinear::int8_pays off), at the layer shapes of ViT-Ti, ViT-S and ViT-B at batch 1 and
// 8 (197 and 1576 rows) and of conformer_s and conformer_m on 60 s of audio (1500 rows). The two
// alternate in rounds of a few calls each; the medians and the median of the per-round ratios are
// reported. It is the measurement behind int8_pays' thresholds (docs/benchmarks.md).
//
//   bench_int8_linear [--threads N] [--rounds R] [--json FILE]
#include <attnzoo/io/atomic_file.h>
#include <attnzoo/layers/packed_linear.h>

#include "tools/bench/count_argument.h"
#include "tools/bench/linear_layers.h"
#include "tools/bench/timing.h"

#include <nlohmann/json.hpp>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  int64_t threads = 2, rounds = 15;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 < argc && arg == "--threads") {
      threads = attnzoo::bench::count_argument("bench_int8_linear", "--threads", argv[++i]);
    } else if (i + 1 < argc && arg == "--rounds") {
      rounds = attnzoo::bench::count_argument("bench_int8_linear", "--rounds", argv[++i]);
    } else if (i + 1 < argc && arg == "--json") {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "bench_int8_linear: unknown argument '%s' (--threads N, --rounds R, --json "
                   "FILE)\n",
                   argv[i]);
      return 2;
    }
  }
  at::set_num_threads(static_cast<int>(threads));
  attnzoo::PackedLinear::set_int8_fallback(false);
  torch::InferenceMode inference;
  std::printf(
      "PackedLinear in float32 against int8 (every call), %lld threads, %lld rounds of 3 "
      "calls each, alternating\n",
      static_cast<long long>(threads), static_cast<long long>(rounds));
  std::printf("%-24s %6s %6s %6s %10s %10s %11s %s\n", "layer", "rows", "in", "out", "fp32 us",
              "int8 us", "int8 / fp32", "int8_pays");
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& layer : attnzoo::bench::linear_layers()) {
    torch::manual_seed(0);
    torch::nn::Linear linear(layer.in_features, layer.out_features);
    const auto x = torch::randn({layer.rows, layer.in_features});
    attnzoo::PackedLinear fp32, int8;
    int8.set_int8(true);
    const auto run_fp32 = [&] { fp32(linear, x, layer.activation); };
    const auto run_int8 = [&] { int8(linear, x, layer.activation); };
    std::vector<double> fp32_us, int8_us, ratios;
    for (int64_t r = 0; r < rounds; ++r) {
      const double a = attnzoo::bench::time_calls(run_fp32, r == 0 ? 3 : 0, 3, [] {}).median();
      const double b = attnzoo::bench::time_calls(run_int8, r == 0 ? 3 : 0, 3, [] {}).median();
      fp32_us.push_back(1000 * a);
      int8_us.push_back(1000 * b);
      ratios.push_back(b / a);
    }
    attnzoo::PackedLinear::set_int8_fallback(true);
    const bool pays =
        attnzoo::PackedLinear::int8_pays(layer.rows, layer.in_features, layer.out_features);
    attnzoo::PackedLinear::set_int8_fallback(false);
    const double a = attnzoo::bench::median(fp32_us), b = attnzoo::bench::median(int8_us);
    const double ratio = attnzoo::bench::median(ratios);
    std::printf("%-24s %6lld %6lld %6lld %10.0f %10.0f %11.2f %s\n", layer.name.c_str(),
                static_cast<long long>(layer.rows), static_cast<long long>(layer.in_features),
                static_cast<long long>(layer.out_features), a, b, ratio, pays ? "int8" : "float");
    std::fflush(stdout);
    rows.push_back({{"layer", layer.name},
                    {"rows", layer.rows},
                    {"in_features", layer.in_features},
                    {"out_features", layer.out_features},
                    {"fp32_us", a},
                    {"int8_us", b},
                    {"int8_over_fp32", ratio},
                    {"int8_pays", pays}});
  }
  if (!json_path.empty()) {
    nlohmann::json out = {{"threads", threads}, {"rounds", rounds}, {"layers", rows}};
    attnzoo::io::write_file_atomically(json_path, out.dump(2) + "\n");
  }
  return 0;
}
