#include "tools/cli/bench_memcheck.h"

#include <attnzoo/layers/attention_backend.h>
#include "tools/bench/memory_tracking.h"

#include <torch/torch.h>

#include <iostream>

namespace attnzoo::cli {

int run_memory_tracking_check(int64_t megabytes) {
  TORCH_CHECK_VALUE(megabytes >= 1, "--mb must be >= 1, got ", megabytes);
  install_cpu_memory_tracking();
  const int64_t bytes = megabytes * 1024 * 1024;
  const int64_t seen = check_cpu_memory_tracking(bytes);
  std::cout << "tensor of " << bytes << " bytes: tracked peak rose by " << seen << " bytes\n";

  // An attention call: math materialises the [B, H, L, S] scores, so its peak must reach at least
  // that buffer; a tracker that saw only the output would report far less.
  const int64_t length = 1024, heads = 2, head_dim = 16;
  const auto q = torch::randn({1, heads, length, head_dim});
  AttentionProblem problem;
  problem.query = q;
  problem.key = torch::randn_like(q);
  problem.value = torch::randn_like(q);
  torch::NoGradGuard no_grad;
  PeakMemoryScope scope(torch::kCPU);
  { const auto out = scaled_dot_product_attention(problem, "math").output; }
  const int64_t peak = scope.peak_above_start();
  const int64_t scores = heads * length * length * 4;
  std::cout << "math attention, B=1 H=" << heads << " N=" << length << " fp32: tracked peak "
            << peak << " bytes; one [B, H, N, N] float buffer is " << scores << " bytes\n";
  TORCH_CHECK(peak >= scores, "memory tracking: math attention's peak ", peak,
              " bytes is below its score buffer of ", scores, " bytes");
  std::cout << "memory tracking ok\n";
  return 0;
}

}  // namespace attnzoo::cli
