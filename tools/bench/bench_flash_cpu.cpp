// bench_flash_cpu: attnzoo::flash_attention's CPU kernel against LibTorch's
// scaled_dot_product_attention (its CPU flash kernel over MKL's products) on the same q, k, v
// (views of one fused QKV tensor, as the attention layer hands them over), at the shapes of ViT-Ti,
// ViT-S and ViT-B (197 tokens, head dim 64) at batch 1 and 8 and of a 60 s Conformer (1500 frames),
// in float32 and bfloat16. The two alternate call by call in rounds; the medians of each and the
// median of the per-round ratios are reported, with GFLOP/s (4·B·H·L²·E per call).
//
//   bench_flash_cpu [--threads N] [--rounds R] [--iterations N] [--json FILE]
#include <attnzoo/io/atomic_file.h>
#include <attnzoo/kernels/ops.h>

#include "tools/bench/count_argument.h"
#include "tools/bench/timing.h"

#include <nlohmann/json.hpp>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Shape {
  std::string name;
  int64_t batch, len, heads, dim;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t threads = 2, rounds = 7, iterations = 10;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 < argc && arg == "--threads") {
      threads = attnzoo::bench::count_argument("bench_flash_cpu", "--threads", argv[++i]);
    } else if (i + 1 < argc && arg == "--rounds") {
      rounds = attnzoo::bench::count_argument("bench_flash_cpu", "--rounds", argv[++i]);
    } else if (i + 1 < argc && arg == "--iterations") {
      iterations = attnzoo::bench::count_argument("bench_flash_cpu", "--iterations", argv[++i]);
    } else if (i + 1 < argc && arg == "--json") {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "bench_flash_cpu: unknown argument '%s' (--threads N, --rounds R, "
                   "--iterations N, --json FILE)\n",
                   argv[i]);
      return 2;
    }
  }
  const int64_t width = attnzoo::kernels::flash_attention_cpu_vector_width();
  if (width == 0) {
    std::fprintf(stderr, "bench_flash_cpu: this CPU has no AVX2 + FMA: the kernel does not run\n");
    return 1;
  }
  at::set_num_threads(static_cast<int>(threads));
  torch::InferenceMode inference;
  const std::vector<Shape> shapes = {
      {"vit_tiny b1", 1, 197, 3, 64},    {"vit_tiny b8", 8, 197, 3, 64},
      {"vit_small b1", 1, 197, 6, 64},   {"vit_small b8", 8, 197, 6, 64},
      {"vit_base b1", 1, 197, 12, 64},   {"vit_base b8", 8, 197, 12, 64},
      {"60 s, 4 heads", 1, 1500, 4, 64},
  };
  std::printf(
      "attnzoo flash (CPU kernel, %s) against LibTorch sdpa, %lld threads, %lld rounds of "
      "%lld calls each, alternating\n",
      width == 16 ? "AVX-512" : "AVX2", static_cast<long long>(threads),
      static_cast<long long>(rounds), static_cast<long long>(iterations));
  std::printf("%-16s %-9s %10s %10s %8s %8s %12s\n", "shape", "dtype", "ours ms", "sdpa ms",
              "ours GF", "sdpa GF", "ours / sdpa");
  nlohmann::json rows = nlohmann::json::array();
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const auto& s : shapes) {
      torch::manual_seed(0);
      const auto qkv = torch::randn({s.batch, s.len, 3, s.heads, s.dim}).to(dtype);
      const auto q = qkv.select(2, 0), k = qkv.select(2, 1), v = qkv.select(2, 2);
      const auto ours = [&] { attnzoo::kernels::flash_attention(q, k, v); };
      const auto sdpa = [&] {
        at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));
      };
      std::vector<double> ours_ms, sdpa_ms, ratios;
      for (int64_t r = 0; r < rounds; ++r) {
        const double a = attnzoo::bench::time_calls(ours, 2, iterations, [] {}).median();
        const double b = attnzoo::bench::time_calls(sdpa, 2, iterations, [] {}).median();
        ours_ms.push_back(a);
        sdpa_ms.push_back(b);
        ratios.push_back(a / b);
      }
      const double flop = 4.0 * s.batch * s.heads * s.len * s.len * s.dim;
      const double a = attnzoo::bench::median(ours_ms), b = attnzoo::bench::median(sdpa_ms);
      const double ratio = attnzoo::bench::median(ratios);
      const std::string dtype_name = dtype == torch::kFloat ? "float32" : "bfloat16";
      std::printf("%-16s %-9s %10.3f %10.3f %8.0f %8.0f %12.2f\n", s.name.c_str(),
                  dtype_name.c_str(), a, b, flop / a / 1e6, flop / b / 1e6, ratio);
      std::fflush(stdout);
      rows.push_back({{"shape", s.name},
                      {"dtype", dtype_name},
                      {"batch", s.batch},
                      {"length", s.len},
                      {"heads", s.heads},
                      {"head_dim", s.dim},
                      {"ours_ms", a},
                      {"sdpa_ms", b},
                      {"ours_over_sdpa", ratio}});
    }
  }
  if (!json_path.empty()) {
    nlohmann::json out = {{"threads", threads},
                          {"rounds", rounds},
                          {"iterations", iterations},
                          {"vector_width", width},
                          {"rows", rows}};
    attnzoo::io::write_file_atomically(json_path, out.dump(2) + "\n");
  }
  return 0;
}
