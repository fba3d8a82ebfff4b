// Every registered attention backend against `math` in float64, as ggml's test-backend-ops holds
// every backend to one reference: for each mask kind of attention_test_util.h's all_mask_cases and
// sizes from one query and one key up, wherever the backend takes the problem (its
// unsupported_reason is empty), its output equals math's under the mask the backend says math
// needs to compute the same (math_equivalent), and so do the gradients of q, k, v and of the bias.
// A backend is tested by registering it; its own test file holds only what is particular to it.
// An approximation (math_equivalent gives no mask: linear) is held to finite outputs of the
// right shape, the same twice. A backend that takes no CPU float64 problem (flash) is skipped
// with its reason on the CPU; its _CUDA case compares it on the GPU by FlashAttention's rule.
#include "attention_test_util.h"

#include <gmock/gmock.h>

#include <string>
#include <vector>

namespace attnzoo {
namespace test_attention_conformance {

using testing::all_mask_cases;
using testing::max_abs_diff;

struct Size {
  int64_t b, h, l, s, e;
};

const std::vector<Size> kSizes = {{1, 1, 1, 1, 8}, {2, 3, 7, 9, 12}, {2, 2, 16, 5, 16}};

AttentionProblem problem_of(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const AttentionMask& mask) {
  AttentionProblem p;
  p.query = q;
  p.key = k;
  p.value = v;
  p.mask = mask;
  p.scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  p.options.block_size(4).window(1).global_tokens(1).chunk_size(3);
  return p;
}

// The backend's output for `problem` and the gradients of sum(output · upstream) with respect to
// q, k, v and the bias (undefined when there is none).
struct Run {
  torch::Tensor output, dq, dk, dv, dbias;
};

Run run_with_grads(const std::string& backend, const AttentionProblem& base,
                   const torch::Tensor& upstream) {
  auto q = base.query.detach().clone().requires_grad_(true);
  auto k = base.key.detach().clone().requires_grad_(true);
  auto v = base.value.detach().clone().requires_grad_(true);
  AttentionMask mask = base.mask;
  torch::Tensor bias;
  if (base.mask.bias().defined()) {
    bias = base.mask.bias().detach().clone().requires_grad_(true);
    mask.bias(bias);
  }
  auto problem = problem_of(q, k, v, mask);
  problem.options = base.options;
  const auto out = scaled_dot_product_attention(problem, backend).output;
  (out * upstream).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad(), bias.defined() ? bias.grad() : bias};
}

class BackendConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { torch::manual_seed(20261204); }
};

TEST_P(BackendConformance, MatchesMathInFloat64ForEveryMaskItTakes) {
  const std::string& name = GetParam();
  int64_t compared = 0, approximated = 0;
  std::string refused;
  for (const auto& z : kSizes) {
    const auto t = testing::random_qkv(z.b, z.h, z.l, z.s, z.e, torch::kDouble);
    for (const auto& [kind, mask] : all_mask_cases(z.b, z.h, z.l, z.s, torch::kDouble)) {
      SCOPED_TRACE(name + ", " + kind + ", L=" + std::to_string(z.l) + " S=" + std::to_string(z.s));
      const auto problem = problem_of(t.q, t.k, t.v, mask);
      const auto reason = attention_backend_unsupported_reason(name, problem);
      if (!reason.empty()) {
        refused = reason;
        continue;
      }
      const auto upstream = torch::randn({z.b, z.h, z.l, z.e}, torch::kDouble);
      const auto& backend = select_attention_backend(name, problem);
      const auto equivalent = backend.math_equivalent(problem);
      const auto ours = run_with_grads(name, problem, upstream);
      ASSERT_EQ(ours.output.sizes(), (std::vector<int64_t>{z.b, z.h, z.l, z.e}));
      if (!equivalent) {
        // An approximation: finite, and the same twice.
        EXPECT_TRUE(torch::isfinite(ours.output).all().item<bool>());
        EXPECT_TRUE(torch::equal(ours.output, run_with_grads(name, problem, upstream).output));
        ++approximated;
        continue;
      }
      auto reference_problem = problem;
      reference_problem.mask = *equivalent;
      const auto math = run_with_grads("math", reference_problem, upstream);
      EXPECT_LT(max_abs_diff(ours.output, math.output), 1e-10);
      EXPECT_LT(max_abs_diff(ours.dq, math.dq), 1e-10);
      EXPECT_LT(max_abs_diff(ours.dk, math.dk), 1e-10);
      EXPECT_LT(max_abs_diff(ours.dv, math.dv), 1e-10);
      if (ours.dbias.defined()) {
        ASSERT_TRUE(math.dbias.defined());
        EXPECT_LT(max_abs_diff(ours.dbias, math.dbias), 1e-10);
      }
      ++compared;
    }
  }
  if (compared + approximated == 0) {
    GTEST_SKIP() << name << " takes no CPU float64 problem: " << refused;
  }
  // Every exact backend takes the plain problem and key lengths at least.
  if (is_exact_attention_backend(name)) {
    EXPECT_GE(compared, 2 * static_cast<int64_t>(kSizes.size()));
  }
}

// On a GPU, in the dtypes attention runs in there: the backend's error against float64 is at most
// twice math's own error in the same dtype, plus a unit in the last place (FlashAttention's rule).
TEST_P(BackendConformance, IsAsAccurateAsMathOnTheGpu_CUDA) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  const std::string& name = GetParam();
  int64_t compared = 0;
  for (const auto dtype : {torch::kFloat16, torch::kBFloat16}) {
    const double ulp = dtype == torch::kFloat16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    for (const auto& z : {Size{2, 3, 7, 9, 64}, Size{1, 2, 130, 70, 128}}) {
      const auto t64 = testing::random_qkv(z.b, z.h, z.l, z.s, z.e, torch::kDouble);
      for (const auto& [kind, mask64] : all_mask_cases(z.b, z.h, z.l, z.s, torch::kDouble)) {
        SCOPED_TRACE(name + ", " + kind + ", " + c10::toString(dtype));
        const auto on = [&](const torch::Tensor& x, torch::Dtype d) {
          return x.to(torch::Device(torch::kCUDA), d);
        };
        AttentionMask mask = mask64;
        if (mask64.bias().defined()) mask.bias(on(mask64.bias(), dtype));
        if (mask64.key_lengths().defined())
          mask.key_lengths(on(mask64.key_lengths(), torch::kLong));
        if (mask64.key_padding_mask().defined()) {
          mask.key_padding_mask(on(mask64.key_padding_mask(), torch::kBool));
        }
        if (mask64.attn_mask().defined()) mask.attn_mask(on(mask64.attn_mask(), torch::kBool));
        const auto problem = problem_of(on(t64.q, dtype), on(t64.k, dtype), on(t64.v, dtype), mask);
        if (!attention_backend_unsupported_reason(name, problem).empty()) continue;
        const auto& backend = select_attention_backend(name, problem);
        const auto equivalent = backend.math_equivalent(problem);
        if (!equivalent) continue;
        auto reference = problem_of(t64.q, t64.k, t64.v, mask64);
        const auto exact = scaled_dot_product_attention(reference, "math").output;
        auto same_dtype = problem;
        same_dtype.mask = *equivalent;
        const double math_error =
            max_abs_diff(scaled_dot_product_attention(same_dtype, "math").output, exact);
        const double error =
            max_abs_diff(scaled_dot_product_attention(problem, name).output, exact);
        EXPECT_LE(error, 2 * math_error + ulp);
        ++compared;
      }
    }
  }
  if (compared == 0) GTEST_SKIP() << name << " takes no CUDA problem";
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Registered, BackendConformance,
                         ::testing::ValuesIn(attention_backend_names()), test_name);

}  // namespace test_attention_conformance
}  // namespace attnzoo
