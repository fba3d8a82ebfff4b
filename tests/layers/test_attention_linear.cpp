// The `linear` backend (Katharopoulos et al. 2020, φ(x) = elu(x) + 1) against the same formula
// evaluated naively: in float64 with plain loops for the outputs, and as an explicit [L, S] weight
// matrix under autograd for the gradients (plus central differences). Key padding, a batch entry
// with no key, causal masks in both alignments with L = S, L < S and L > S, chunk sizes, bf16,
// the refusals, and the peak memory of the causal form.
#include "attention_test_util.h"

#include "tools/bench/memory_tracking.h"

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

namespace attnzoo {
namespace test_attention_linear {

using testing::error_of;
using testing::max_abs_diff;
using testing::Qkv;
using testing::random_qkv;

AttentionResult run(const Qkv& t, const AttentionMask& mask, int64_t chunk = 256,
                    const std::string& backend = "linear") {
  auto p = testing::problem_of(t, mask);
  p.options.chunk_size(chunk);
  return scaled_dot_product_attention(p, backend);
}

double phi(double x) { return x > 0 ? x + 1.0 : std::exp(x); }  // elu(x) + 1

// The keys query i sees: j < lengths[b] (when given), not padding, and j <= i + offset when
// causal. [B, S] valid keys -> [B, 1, L, S] as an explicit bool tensor.
torch::Tensor visible_keys(const torch::Tensor& valid, int64_t l, bool causal, int64_t offset) {
  const int64_t s = valid.size(1);
  auto visible = valid.view({-1, 1, 1, s}).expand({valid.size(0), 1, l, s});
  if (causal) {
    const auto rows = torch::arange(l).view({l, 1});
    const auto cols = torch::arange(s).view({1, s});
    visible = torch::logical_and(visible, (cols <= rows + offset).view({1, 1, l, s}));
  }
  return visible.contiguous();
}

// out_i = Σ_j φ(q_i)·φ(k_j) v_j / Σ_j φ(q_i)·φ(k_j) over the visible keys, row by row in float64
// with plain loops; zeros for a query that sees no key. visible: [B, 1, L, S] bool.
torch::Tensor loop_linear(const Qkv& t, const torch::Tensor& visible) {
  const auto q = t.q.to(torch::kDouble), k = t.k.to(torch::kDouble), v = t.v.to(torch::kDouble);
  const int64_t b = q.size(0), h = q.size(1), l = q.size(2), s = k.size(2), e = q.size(3),
                ev = v.size(3);
  auto out = torch::zeros({b, h, l, ev}, torch::kDouble);
  auto qa = q.accessor<double, 4>(), ka = k.accessor<double, 4>(), va = v.accessor<double, 4>();
  auto oa = out.accessor<double, 4>();
  auto ma = visible.accessor<bool, 4>();
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      for (int64_t li = 0; li < l; ++li) {
        double total = 0.0;
        std::vector<double> acc(ev, 0.0);
        for (int64_t si = 0; si < s; ++si) {
          if (!ma[bi][0][li][si]) continue;
          double w = 0.0;
          for (int64_t ei = 0; ei < e; ++ei) {
            w += phi(qa[bi][hi][li][ei]) * phi(ka[bi][hi][si][ei]);
          }
          total += w;
          for (int64_t ei = 0; ei < ev; ++ei) acc[ei] += w * va[bi][hi][si][ei];
        }
        if (total == 0.0) continue;  // no key: zeros
        for (int64_t ei = 0; ei < ev; ++ei) oa[bi][hi][li][ei] = acc[ei] / total;
      }
    }
  }
  return out;
}

// The same formula with an explicit [B, H, L, S] weight matrix, differentiable: the gradient
// reference. visible: [B, 1, L, S] bool.
torch::Tensor quadratic_linear(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& visible) {
  const auto weights =
      torch::matmul(torch::elu(q) + 1, (torch::elu(k) + 1).transpose(-2, -1)) * visible;
  const auto total = weights.sum(-1, /*keepdim=*/true);
  const auto seen = visible.any(-1, /*keepdim=*/true);
  return torch::matmul(weights, v) / torch::where(seen, total, torch::ones_like(total));
}

struct Case {
  std::string name;
  int64_t b, h, l, s, e, ev;
  bool causal;
  CausalAlignment alignment;
};

std::string describe(const Case& c, int64_t chunk) {
  return c.name + ": B=" + std::to_string(c.b) + " H=" + std::to_string(c.h) +
         " L=" + std::to_string(c.l) + " S=" + std::to_string(c.s) + " E=" + std::to_string(c.e) +
         " Ev=" + std::to_string(c.ev) + " chunk=" + std::to_string(chunk);
}

const std::vector<Case> kCases = {
    {"non-causal L=S", 2, 3, 9, 9, 16, 16, false, CausalAlignment::kTopLeft},
    {"non-causal L<S", 3, 2, 5, 12, 36, 8, false, CausalAlignment::kTopLeft},
    {"non-causal L=1", 2, 2, 1, 7, 40, 40, false, CausalAlignment::kTopLeft},
    {"non-causal L>S", 7, 1, 13, 4, 8, 12, false, CausalAlignment::kTopLeft},
    {"causal L=S", 2, 3, 17, 17, 16, 16, true, CausalAlignment::kTopLeft},
    {"causal L=S bottom-right", 2, 2, 10, 10, 8, 8, true, CausalAlignment::kBottomRight},
    {"causal L<S top-left", 2, 2, 6, 15, 8, 12, true, CausalAlignment::kTopLeft},
    {"causal L<S bottom-right", 3, 2, 6, 15, 8, 8, true, CausalAlignment::kBottomRight},
    {"causal L>S top-left", 2, 2, 15, 6, 8, 8, true, CausalAlignment::kTopLeft},
    {"causal L>S bottom-right", 2, 2, 15, 6, 8, 4, true, CausalAlignment::kBottomRight},
    {"causal L=1 bottom-right", 2, 1, 1, 9, 16, 16, true, CausalAlignment::kBottomRight},
};

// Mask variants of one case: none, key_lengths with a 0 entry, key_padding_mask, both. Returns
// the mask and the [B, S] valid keys it leaves.
std::vector<std::tuple<std::string, AttentionMask, torch::Tensor>> masks_of(const Case& c) {
  const auto keys = torch::arange(c.s).unsqueeze(0);
  auto lengths = torch::randint(1, c.s + 1, {c.b}, torch::kLong);
  lengths[c.b - 1] = 0;  // an entry with no key at all
  const auto padding = torch::rand({c.b, c.s}) < 0.3;
  auto base = AttentionMask();
  if (c.causal) base.causal(true, c.alignment);
  auto with_lengths = base, with_padding = base, with_both = base;
  with_lengths.key_lengths(lengths);
  with_padding.key_padding_mask(padding);
  with_both.key_lengths(lengths).key_padding_mask(padding);
  const auto by_length = keys < lengths.unsqueeze(1);
  return {
      {"no padding", base, torch::ones({c.b, c.s}, torch::kBool)},
      {"key_lengths with a 0", with_lengths, by_length},
      {"key_padding_mask", with_padding, padding.logical_not()},
      {"key_lengths and key_padding_mask", with_both,
       torch::logical_and(by_length, padding.logical_not())},
  };
}

int64_t offset_of(const Case& c) {
  return c.alignment == CausalAlignment::kBottomRight ? c.s - c.l : 0;
}

class Linear : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(20261201); }
};

TEST_F(Linear, MatchesTheLoopFormulaInFloat64AndFloat32) {
  for (const auto& c : kCases) {
    const auto t = random_qkv(c.b, c.h, c.l, c.s, c.e, torch::kDouble, c.ev);
    const Qkv t32{t.q.to(torch::kFloat), t.k.to(torch::kFloat), t.v.to(torch::kFloat)};
    for (const auto& [mask_name, mask, valid] : masks_of(c)) {
      const auto visible = visible_keys(valid, c.l, c.causal, offset_of(c));
      const auto reference = loop_linear(t, visible);
      ASSERT_GT(reference.abs().max().item<double>(), 0.0);
      for (const int64_t chunk : {1L, 3L, 4L, 256L}) {
        SCOPED_TRACE(describe(c, chunk) + ", " + mask_name);
        const auto out = run(t, mask, chunk).output;
        ASSERT_EQ(out.sizes(), reference.sizes());
        EXPECT_LE(max_abs_diff(out, reference), 1e-10);
        const auto out32 = run(t32, mask, chunk).output;
        EXPECT_EQ(out32.scalar_type(), torch::kFloat);
        EXPECT_LE(max_abs_diff(out32, reference), 1e-5);
      }
    }
  }
}

TEST_F(Linear, QueriesWithoutKeysGiveZerosNotNaN) {
  // Batch 1 has no key; under bottom-right alignment with L > S the first L - S queries see none.
  const auto t = random_qkv(2, 2, 7, 4, 8);
  const auto mask = AttentionMask()
                        .key_lengths(torch::tensor({4L, 0L}))
                        .causal(true, CausalAlignment::kBottomRight);
  for (const int64_t chunk : {1L, 2L, 256L}) {
    const auto out = run(t, mask, chunk).output;
    EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
    EXPECT_EQ(out[1].abs().max().item<double>(), 0.0);
    EXPECT_EQ(out[0].narrow(1, 0, 3).abs().max().item<double>(), 0.0);
    EXPECT_GT(out[0].narrow(1, 3, 4).abs().min().item<double>(), 0.0);
  }
}

TEST_F(Linear, GradientsEqualTheQuadraticFormulaAndAreFinite) {
  for (const auto& c : kCases) {
    const auto t = random_qkv(c.b, c.h, c.l, c.s, c.e, torch::kDouble, c.ev);
    const auto upstream = torch::randn({c.b, c.h, c.l, c.ev}, torch::kDouble);
    for (const auto& [mask_name, mask, valid] : masks_of(c)) {
      const auto visible = visible_keys(valid, c.l, c.causal, offset_of(c));
      std::vector<torch::Tensor> reference;
      {
        auto q = t.q.clone().requires_grad_(), k = t.k.clone().requires_grad_(),
             v = t.v.clone().requires_grad_();
        (quadratic_linear(q, k, v, visible) * upstream).sum().backward();
        reference = {q.grad(), k.grad(), v.grad()};
      }
      for (const int64_t chunk : {1L, 4L, 256L}) {
        SCOPED_TRACE(describe(c, chunk) + ", " + mask_name);
        auto q = t.q.clone().requires_grad_(), k = t.k.clone().requires_grad_(),
             v = t.v.clone().requires_grad_();
        (run({q, k, v}, mask, chunk).output * upstream).sum().backward();
        const torch::Tensor grads[] = {q.grad(), k.grad(), v.grad()};
        for (int i = 0; i < 3; ++i) {
          ASSERT_TRUE(grads[i].defined()) << "qkv"[i];
          EXPECT_TRUE(torch::isfinite(grads[i]).all().item<bool>()) << "qkv"[i];
          EXPECT_LE(max_abs_diff(grads[i], reference[i]), 1e-8) << "qkv"[i];
        }
      }
    }
  }
}

TEST_F(Linear, GradientsMatchCentralDifferences) {
  const auto t = random_qkv(2, 2, 5, 6, 4, torch::kDouble, 3);
  const auto upstream = torch::randn({2, 2, 5, 3}, torch::kDouble);
  const auto mask = AttentionMask()
                        .key_lengths(torch::tensor({6L, 2L}))
                        .causal(true, CausalAlignment::kBottomRight);
  auto q = t.q.clone().requires_grad_(), k = t.k.clone().requires_grad_(),
       v = t.v.clone().requires_grad_();
  const auto loss = [&] { return (run({q, k, v}, mask, /*chunk=*/2).output * upstream).sum(); };
  // Every element (80, 96 and 72 of them).
  testing::expect_gradient_near_central_differences(loss, q, "q", q.numel());
  testing::expect_gradient_near_central_differences(loss, k, "k", k.numel());
  testing::expect_gradient_near_central_differences(loss, v, "v", v.numel());
}

TEST_F(Linear, Bfloat16RunsAndStaysCloseToFloat64) {
  for (const auto& c : {kCases[0], kCases[4], kCases[9]}) {
    const auto t = random_qkv(c.b, c.h, c.l, c.s, c.e, torch::kBFloat16, c.ev);
    const Qkv t64{t.q.to(torch::kDouble), t.k.to(torch::kDouble), t.v.to(torch::kDouble)};
    for (const auto& [mask_name, mask, valid] : masks_of(c)) {
      SCOPED_TRACE(describe(c, 4) + ", " + mask_name);
      const auto out = run(t, mask, 4).output;
      EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
      EXPECT_LE(max_abs_diff(out, run(t64, mask, 4).output), 4e-2);
    }
  }
  auto q = torch::randn({1, 2, 6, 8}, torch::kBFloat16).requires_grad_();
  const auto k = torch::randn({1, 2, 6, 8}, torch::kBFloat16);
  run({q, k, k}, AttentionMask().causal()).output.sum().backward();
  EXPECT_EQ(q.grad().scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::isfinite(q.grad()).all().item<bool>());
}

TEST_F(Linear, RefusesWhatItCannotExpressNamingIt) {
  const auto t = random_qkv(1, 2, 3, 3, 4);
  const auto attn_mask = error_of([&] {
    run(t, AttentionMask().attn_mask(torch::zeros({3, 3}, torch::kBool)));
  });
  EXPECT_NE(attn_mask.find("'linear'"), std::string::npos) << attn_mask;
  EXPECT_NE(attn_mask.find("attn_mask"), std::string::npos) << attn_mask;
  const auto bias = error_of([&] { run(t, AttentionMask().bias(torch::zeros({3, 3}))); });
  EXPECT_NE(bias.find("'linear'"), std::string::npos) << bias;
  EXPECT_NE(bias.find("bias"), std::string::npos) << bias;
  AttentionProblem p;
  p.query = t.q;
  p.key = t.k;
  p.value = t.v;
  p.need_weights = true;
  const auto weights = error_of([&] { scaled_dot_product_attention(p, "linear"); });
  EXPECT_NE(weights.find("need_weights"), std::string::npos) << weights;
  p.need_weights = false;
  p.dropout_p = 0.1;
  const auto dropout = error_of([&] { scaled_dot_product_attention(p, "linear"); });
  EXPECT_NE(dropout.find("dropout"), std::string::npos) << dropout;
}

TEST_F(Linear, IsAnApproximationThatIgnoresTheScale) {
  AttentionProblem p;
  const auto t = random_qkv(2, 2, 5, 5, 8);
  p.query = t.q;
  p.key = t.k;
  p.value = t.v;
  const auto& linear = select_attention_backend("linear", p);
  EXPECT_FALSE(linear.exact());
  EXPECT_EQ(linear.priority(), -20);
  EXPECT_NE(select_attention_backend("auto", p).name(), "linear");
  const auto by_default = scaled_dot_product_attention(p, "linear").output;
  p.scale = 0.05;
  EXPECT_EQ(max_abs_diff(scaled_dot_product_attention(p, "linear").output, by_default), 0.0);
  // ... and it is not softmax attention.
  EXPECT_GT(max_abs_diff(scaled_dot_product_attention(p, "math").output, by_default), 1e-3);
}

// Peak memory ----------------------------------------------------------------------------------

TEST_F(Linear, CausalPeakMemoryHoldsNeitherScoresNorPerPositionStates) {
  // L = S = 4096, E = Ev = 64: the [L, S] weights would take 64 MiB, and so would a
  // cumulative-sum state per position, [L, E, Ev]; q, k, v take 1 MiB each.
  const int64_t n = 4096, e = 64;
  const int64_t quadratic_bytes = n * n * static_cast<int64_t>(sizeof(float));
  const auto t = random_qkv(1, 1, n, n, e);
  const auto mask = AttentionMask().key_lengths(torch::tensor({n - 10})).causal();
  for (const bool backward : {false, true}) {
    SCOPED_TRACE(backward ? "forward and backward" : "forward");
    const auto q = t.q.detach().requires_grad_(backward);
    const auto k = t.k.detach().requires_grad_(backward);
    const auto v = t.v.detach().requires_grad_(backward);
    int64_t math = 0, linear = 0;
    for (const char* backend : {"math", "linear"}) {
      install_cpu_memory_tracking();
      PeakMemoryScope scope(torch::kCPU);
      {
        const auto out = run({q, k, v}, mask, /*chunk=*/256, backend).output;
        if (backward) out.sum().backward();
      }
      (std::string(backend) == "math" ? math : linear) = scope.peak_above_start();
    }
    const std::string stage = backward ? "_forward_backward" : "_forward";
    RecordProperty("math_peak_bytes" + stage, std::to_string(math));
    RecordProperty("linear_peak_bytes" + stage, std::to_string(linear));
    EXPECT_GE(math, quadratic_bytes);  // the harness sees an [L, S] matrix when there is one
    // O(N·E) features, outputs and gradients (1 MiB each), 256 × 256 tiles (256 KiB, 16 of them
    // kept for the backward) and 16 states of 16 KiB: about 7 MiB forward, 16 MiB with backward.
    EXPECT_LE(linear, quadratic_bytes / 2) << "math peak " << math;
    EXPECT_GT(linear, 0);
  }
}

}  // namespace test_attention_linear
}  // namespace attnzoo
