// bench_linear_cpu: one float32 linear layer, attnzoo's own packed product (kernels::
// linear_packed_cpu) against oneDNN's packed linear (PackedLinear with set_own_kernel(false)),
// each with its weight packed once and the bias and activation fused, at the layer shapes of
// ViT-Ti, ViT-S and ViT-B at batch 1 and 8 and of conformer_s and conformer_m on 60 s of audio. The
// two alternate in rounds of a few calls each; the medians, their GFLOP/s and the median of the
// per-round ratios are reported, and the largest difference of the two outputs relative to the
// output's largest magnitude (the same product summed in another order), and which of the two
// PackedLinear takes for the layer (PackedLinear::own_kernel_pays): the measurement behind it.
// --copies N cycles N layers of the shape, so that each call finds its weight out of cache, as in
// a model.
//
//   bench_linear_cpu [--threads N] [--rounds R] [--copies N] [--json FILE]
#include <attnzoo/io/atomic_file.h>
#include <attnzoo/kernels/ops.h>
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
  int64_t threads = 2, rounds = 15, copies = 1;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 < argc && arg == "--threads") {
      threads = attnzoo::bench::count_argument("bench_linear_cpu", "--threads", argv[++i]);
    } else if (i + 1 < argc && arg == "--rounds") {
      rounds = attnzoo::bench::count_argument("bench_linear_cpu", "--rounds", argv[++i]);
    } else if (i + 1 < argc && arg == "--copies") {
      copies = attnzoo::bench::count_argument("bench_linear_cpu", "--copies", argv[++i]);
    } else if (i + 1 < argc && arg == "--json") {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "bench_linear_cpu: unknown argument '%s' (--threads N, --rounds R, --copies N, "
                   "--json FILE)\n",
                   argv[i]);
      return 2;
    }
  }
  if (!attnzoo::kernels::linear_packed_cpu_available()) {
    std::fprintf(stderr, "bench_linear_cpu: attnzoo's float32 linear kernel needs AVX-512\n");
    return 1;
  }
  attnzoo::PackedLinear::set_own_kernel(false);
  at::set_num_threads(static_cast<int>(threads));
  torch::InferenceMode inference;
  std::printf(
      "PackedLinear float32: attnzoo's kernel against oneDNN's, %lld threads, %lld rounds of %lld "
      "calls each over %lld copies, alternating\n",
      static_cast<long long>(threads), static_cast<long long>(rounds),
      static_cast<long long>(std::max<int64_t>(3, copies)), static_cast<long long>(copies));
  std::printf("%-24s %6s %6s %6s %9s %9s %8s %8s %13s %9s %s\n", "layer", "rows", "in", "out",
              "ours us", "onednn us", "ours GF", "onednn GF", "ours / onednn", "max diff", "taken");
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& layer : attnzoo::bench::linear_layers()) {
    torch::manual_seed(0);
    std::vector<torch::nn::Linear> linears;
    std::vector<torch::Tensor> panels;
    std::vector<attnzoo::PackedLinear> onednn(static_cast<size_t>(copies));
    for (int64_t c = 0; c < copies; ++c) {
      linears.emplace_back(layer.in_features, layer.out_features);
      panels.push_back(attnzoo::kernels::pack_linear_weight_cpu(linears.back()->weight));
    }
    const auto x = torch::randn({layer.rows, layer.in_features});
    const std::string activation = attnzoo::to_string(layer.activation);
    size_t next_ours = 0, next_onednn = 0;
    const auto run_ours = [&] {
      const size_t c = next_ours++ % linears.size();
      return attnzoo::kernels::linear_packed_cpu(x, panels[c], layer.out_features, linears[c]->bias,
                                                 activation);
    };
    const auto run_onednn = [&] {
      const size_t c = next_onednn++ % linears.size();
      return onednn[c](linears[c], x, layer.activation);
    };
    const auto reference = run_onednn();
    const auto ours = run_ours();
    const double diff = ((ours - reference).abs().max() / reference.abs().max()).item<double>();
    const int64_t calls = std::max<int64_t>(3, copies);
    std::vector<double> ours_us, onednn_us, ratios;
    for (int64_t r = 0; r < rounds; ++r) {
      const double a = attnzoo::bench::time_calls(run_ours, r == 0 ? 3 : 1, calls, [] {}).median();
      const double b =
          attnzoo::bench::time_calls(run_onednn, r == 0 ? 3 : 1, calls, [] {}).median();
      ours_us.push_back(1000 * a);
      onednn_us.push_back(1000 * b);
      ratios.push_back(a / b);
    }
    const double a = attnzoo::bench::median(ours_us), b = attnzoo::bench::median(onednn_us);
    const double ratio = attnzoo::bench::median(ratios);
    const double flops = 2.0 * layer.rows * layer.in_features * layer.out_features;
    const bool taken =
        attnzoo::PackedLinear::own_kernel_pays(layer.in_features, layer.out_features);
    std::printf("%-24s %6lld %6lld %6lld %9.0f %9.0f %8.0f %8.0f %13.2f %9.1e %s\n",
                layer.name.c_str(), static_cast<long long>(layer.rows),
                static_cast<long long>(layer.in_features),
                static_cast<long long>(layer.out_features), a, b, flops / a / 1e3, flops / b / 1e3,
                ratio, diff, taken ? "ours" : "onednn");
    std::fflush(stdout);
    rows.push_back({{"layer", layer.name},
                    {"rows", layer.rows},
                    {"in_features", layer.in_features},
                    {"out_features", layer.out_features},
                    {"ours_us", a},
                    {"onednn_us", b},
                    {"ours_over_onednn", ratio},
                    {"max_relative_difference", diff},
                    {"taken", taken ? "ours" : "onednn"}});
  }
  if (!json_path.empty()) {
    nlohmann::json out = {
        {"threads", threads}, {"rounds", rounds}, {"copies", copies}, {"layers", rows}};
    attnzoo::io::write_file_atomically(json_path, out.dump(2) + "\n");
  }
  return 0;
}
