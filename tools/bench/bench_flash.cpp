// bench_flash: attnzoo::flash_attention against LibTorch's scaled_dot_product_attention with each
// backend it offers (flash, efficient, cuDNN, math), on the GPU, at the shapes of ViT-B, ViT-L and
// the Conformers; forward and forward + backward; median time, TFLOP/s, % of the bf16 peak this GPU
// reaches on a large matmul in the same run, and the ratio to the best SDPA backend. Built with the
// kernels only (ATTNZOO_KERNELS_ONLY) for tools/device_check.sh, and in the normal build.
//
//   bench_flash [--quick] [--json FILE]
#include <attnzoo/core/error.h>
#include <attnzoo/io/atomic_file.h>
#include <attnzoo/kernels/ops.h>

#include "tools/bench/timing.h"

#include <nlohmann/json.hpp>

#include <ATen/Context.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Shape {
  std::string name;
  int64_t batch, len, heads, dim;
  bool padding = false, bias = false;
};

double median_ms(const std::function<void()>& f, int warmup, int repeats) {
  return attnzoo::bench::time_calls(f, warmup, repeats, [] { torch::cuda::synchronize(); })
      .median();
}

// The bf16 matmul rate of this GPU (TFLOP/s) on 8192^3: the "measured peak".
double measured_peak_tflops() {
  const auto o = torch::dtype(torch::kBFloat16).device(torch::kCUDA);
  const auto a = torch::randn({8192, 8192}, o), b = torch::randn({8192, 8192}, o);
  const double ms = median_ms([&] { torch::matmul(a, b); }, 3, 10);
  return 2.0 * 8192.0 * 8192.0 * 8192.0 / (ms * 1e9);
}

void set_sdpa_backend(const std::string& name) {
  auto& ctx = at::globalContext();
  ctx.setSDPUseFlash(name == "flash");
  ctx.setSDPUseMemEfficient(name == "efficient");
  ctx.setSDPUseMath(name == "math");
  ctx.setSDPUseCuDNN(name == "cudnn");
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "bench_flash: unknown argument '%s' (--quick, --json FILE)\n", argv[i]);
      return 2;
    }
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_flash: no CUDA device\n");
    return 1;
  }
  const std::vector<Shape> shapes = {
      {"vit_b", 256, 197, 12, 64},
      {"vit_l_197", 64, 197, 16, 64},
      {"vit_l_577", 16, 577, 16, 64},
      {"conformer_500_h4_d64", 16, 500, 4, 64, true, true},
      {"conformer_1500_h8_d36", 8, 1500, 8, 36, true, true},
      {"conformer_3000_h4_d64", 4, 3000, 4, 64, true, true},
      {"conformer_3000_h8_d36", 4, 3000, 8, 36, true, false},
  };
  const int warmup = quick ? 2 : 5, repeats = quick ? 5 : 20;
  const double peak = measured_peak_tflops();
  std::printf("measured bf16 matmul peak: %.1f TFLOP/s\n", peak);
  std::printf("%-24s %-5s %-10s %10s %9s %7s\n", "shape", "pass", "impl", "ms", "TFLOP/s", "%peak");
  auto json = nlohmann::json::array();
  const auto o = torch::dtype(torch::kBFloat16).device(torch::kCUDA);
  for (const auto& s : shapes) {
    torch::manual_seed(0);
    const auto qkv = torch::randn({s.batch, s.len, 3, s.heads, s.dim}, o);
    std::optional<torch::Tensor> lengths, bias;
    torch::Tensor mask;  // SDPA's additive mask [B, H|1, L, S]
    if (s.padding) {
      lengths = torch::randint(s.len / 2, s.len + 1, {s.batch}, torch::dtype(torch::kLong))
                    .to(torch::kCUDA);
    }
    if (s.bias) bias = torch::randn({s.batch, s.heads, s.len, s.len}, o);
    if (s.padding || s.bias) {
      mask = bias ? bias->clone() : torch::zeros({s.batch, 1, s.len, s.len}, o);
      if (lengths) {
        const auto keys = torch::arange(s.len, torch::dtype(torch::kLong).device(torch::kCUDA));
        const auto pad = (keys.view({1, 1, 1, -1}) >= lengths->view({-1, 1, 1, 1}));
        mask = mask.masked_fill(pad, -INFINITY);
      }
    }
    const double flops = 4.0 * s.batch * s.heads * static_cast<double>(s.len) * s.len * s.dim;
    for (const bool backward : {false, true}) {
      const auto q = qkv.select(2, 0).detach().requires_grad_(backward);
      const auto k = qkv.select(2, 1).detach().requires_grad_(backward);
      const auto v = qkv.select(2, 2).detach().requires_grad_(backward);
      const auto g = torch::randn({s.batch, s.len, s.heads, s.dim}, o);
      std::vector<std::pair<std::string, std::function<void()>>> impls;
      impls.push_back({"attnzoo", [&] {
                         auto out =
                             std::get<0>(attnzoo::kernels::flash_attention(q, k, v, lengths, bias));
                         if (backward) (out * g).sum().backward();
                       }});
      for (const std::string backend : {"flash", "efficient", "cudnn", "math"}) {
        impls.push_back(
            {"sdpa_" + backend, [&, backend] {
               set_sdpa_backend(backend);
               const auto qh = q.transpose(1, 2), kh = k.transpose(1, 2), vh = v.transpose(1, 2);
               auto out = at::scaled_dot_product_attention(
                   qh, kh, vh, mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt);
               if (backward) (out.transpose(1, 2) * g).sum().backward();
             }});
      }
      double best_sdpa = 0.0, ours = 0.0;
      for (const auto& [name, f] : impls) {
        double ms = -1.0;
        try {
          torch::NoGradGuard no_grad_if_forward;
          if (backward) {
            torch::AutoGradMode enable(true);
            ms = median_ms(f, warmup, repeats);
          } else {
            ms = median_ms(f, warmup, repeats);
          }
        } catch (const c10::Error&) {
          ms = -1.0;  // the backend does not support this shape or mask
        }
        const double tflops = ms > 0 ? flops * (backward ? 3.5 : 1.0) / (ms * 1e9) : 0.0;
        if (ms > 0 && name == "attnzoo") ours = ms;
        if (ms > 0 && name != "attnzoo")
          best_sdpa = best_sdpa == 0.0 ? ms : std::min(best_sdpa, ms);
        if (ms > 0) {
          std::printf("%-24s %-5s %-10s %10.3f %9.1f %6.1f%%\n", s.name.c_str(),
                      backward ? "f+b" : "fwd", name.c_str(), ms, tflops, 100.0 * tflops / peak);
        } else {
          std::printf("%-24s %-5s %-10s %10s\n", s.name.c_str(), backward ? "f+b" : "fwd",
                      name.c_str(), "unsupported");
        }
        json.push_back({{"shape", s.name},
                        {"pass", backward ? "fwd+bwd" : "fwd"},
                        {"impl", name},
                        {"ms", ms},
                        {"tflops", tflops}});
      }
      auto& ctx = at::globalContext();
      ctx.setSDPUseFlash(true);
      ctx.setSDPUseMemEfficient(true);
      ctx.setSDPUseMath(true);
      ctx.setSDPUseCuDNN(true);
      if (ours > 0 && best_sdpa > 0) {
        std::printf("%-24s %-5s %-10s %9.2fx of the best SDPA backend\n", s.name.c_str(),
                    backward ? "f+b" : "fwd", "ratio", best_sdpa / ours);
      }
    }
  }
  if (!json_path.empty()) {
    try {
      attnzoo::io::write_file_atomically(json_path, json.dump(1) + "\n");
    } catch (const attnzoo::Error& e) {
      std::fprintf(stderr, "bench_flash: %s\n", e.what());
      return 1;
    }
  }
  return 0;
}
