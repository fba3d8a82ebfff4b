// attnzoo::flash_attention: on CPU (the LibTorch reference in float64, the CPU kernel in float32
// and bfloat16 on each of its paths) against attention written out in float64 with every mask kind,
// the log-sum-exp, rows without a visible key, gradients against autograd through the float64
// expression, and the input checks; with a GPU, the fused kernel against float64 by
// FlashAttention's rule (error at most twice LibTorch's own at the same precision), with poisoned
// outputs and awkward sizes. The same for attnzoo::flash_attention_backward (the fused backward
// kernel on CUDA), directly and through autograd.
#include <attnzoo/kernels/ops.h>
#include "common/test_util.h"

#include <torch/torch.h>

#include "kernel_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace test_flash_attention {

using attnzoo::kernels::flash_attention;
using attnzoo::kernels::flash_attention_backward;
using attnzoo::testing::error_of;
using ::testing::HasSubstr;

constexpr const char* kKernelName = "flash_attention";

struct Case {
  int64_t batch, q_len, k_len, heads, head_dim;
  bool lengths = false, bias = false, causal = false, bottom_right = false;
  bool broadcast_bias = false;       // bias [1, H, L, S]
  bool head_broadcast_bias = false;  // bias [B, 1, L, S]
};

std::string describe(const Case& c) {
  std::ostringstream out;
  out << "B" << c.batch << " L" << c.q_len << " S" << c.k_len << " H" << c.heads << " E"
      << c.head_dim << (c.lengths ? " lengths" : "") << (c.bias ? " bias" : "")
      << (c.broadcast_bias ? "(broadcast)" : "")
      << (c.head_broadcast_bias ? "(head-broadcast)" : "")
      << (c.causal ? (c.bottom_right ? " causal(bottom-right)" : " causal") : "");
  return out.str();
}

struct Inputs {
  torch::Tensor q, k, v;  // views of fused projections, as the attention layer makes them
  std::optional<torch::Tensor> lengths, bias;
};

// q, k, v as strided views of one [B, L, 3, H, E] tensor (self-attention, L = S) or of [B, L, H, E]
// and [B, S, 2, H, E] tensors (cross-attention), so the kernel reads by strides as in the layer.
Inputs make_inputs(const Case& c, torch::TensorOptions options, int64_t seed) {
  torch::manual_seed(seed);
  Inputs in;
  if (c.q_len == c.k_len) {
    const auto qkv = torch::randn({c.batch, c.q_len, 3, c.heads, c.head_dim}, options);
    in.q = qkv.select(2, 0);
    in.k = qkv.select(2, 1);
    in.v = qkv.select(2, 2);
  } else {
    in.q = torch::randn({c.batch, c.q_len, c.heads, c.head_dim}, options);
    const auto kv = torch::randn({c.batch, c.k_len, 2, c.heads, c.head_dim}, options);
    in.k = kv.select(2, 0);
    in.v = kv.select(2, 1);
  }
  if (c.lengths) {
    // Lengths from 0 (no visible key) to S, spread over the batch.
    auto lengths = torch::randint(0, c.k_len + 1, {c.batch}, torch::kLong);
    lengths[0] = c.k_len;
    if (c.batch > 1) lengths[1] = 0;
    in.lengths = lengths.to(options.device());
  }
  if (c.bias) {
    in.bias = torch::randn(
        {c.broadcast_bias ? 1 : c.batch, c.head_broadcast_bias ? 1 : c.heads, c.q_len, c.k_len},
        options);
  }
  return in;
}

// [B, 1, L, S]: key j visible to query i of entry b (below its length; causal: j <= i + offset).
torch::Tensor visible_keys(const Inputs& in, const Case& c, torch::Device device) {
  const auto j = torch::arange(c.k_len, torch::kLong).view({1, 1, 1, c.k_len});
  const auto i = torch::arange(c.q_len, torch::kLong).view({1, 1, c.q_len, 1});
  auto visible = torch::ones({c.batch, 1, c.q_len, c.k_len}, torch::kBool);
  if (in.lengths) visible = visible & (j < in.lengths->cpu().view({c.batch, 1, 1, 1}));
  if (c.causal) visible = visible & (j <= i + (c.bottom_right ? c.k_len - c.q_len : 0));
  return visible.to(device);
}

// Attention written out in float64: softmax over the visible keys, zeros on rows without one.
// -> out [B, L, H, E], lse [B, H, L]
std::pair<torch::Tensor, torch::Tensor> float64_attention(const Inputs& in, const Case& c,
                                                          double scale) {
  const auto q = in.q.to(torch::kCPU, torch::kFloat64).permute({0, 2, 1, 3});
  const auto k = in.k.to(torch::kCPU, torch::kFloat64).permute({0, 2, 1, 3});
  const auto v = in.v.to(torch::kCPU, torch::kFloat64).permute({0, 2, 1, 3});
  auto logits = torch::matmul(q, k.transpose(-2, -1)) * scale;
  if (in.bias) logits = logits + in.bias->to(torch::kCPU, torch::kFloat64);
  const auto visible = visible_keys(in, c, torch::kCPU);
  logits = logits.masked_fill(visible.logical_not(), -INFINITY);
  const auto lse = torch::logsumexp(logits, -1);
  auto p = torch::exp(logits - lse.unsqueeze(-1));
  p = torch::where(torch::isfinite(lse).unsqueeze(-1), p, torch::zeros_like(p));
  return {torch::matmul(p, v).permute({0, 2, 1, 3}).contiguous(), lse};
}

const std::vector<Case>& cpu_cases() {
  static const std::vector<Case> cases = {
      {2, 7, 7, 3, 8},
      {2, 7, 7, 3, 8, /*lengths=*/true},
      {3, 5, 9, 2, 16, true, true},
      {2, 9, 9, 2, 12, false, false, /*causal=*/true},
      {2, 5, 9, 2, 12, false, false, true, /*bottom_right=*/true},
      {2, 9, 5, 2, 12, true, true, true, true},  // L > S: the first rows see no key
      {2, 6, 6, 4, 36, true, true, false, false, /*broadcast_bias=*/true},
      {1, 1, 1, 1, 4},
  };
  return cases;
}

TEST(FlashAttention, ReferenceEqualsFloat64Attention) {
  for (const auto& c : cpu_cases()) {
    const auto in = make_inputs(c, torch::dtype(torch::kFloat64), 1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    const auto [out, lse] =
        flash_attention(in.q, in.k, in.v, in.lengths, in.bias, c.causal, c.bottom_right);
    const auto [expected, expected_lse] = float64_attention(in, c, scale);
    ASSERT_EQ(out.sizes(), expected.sizes()) << describe(c);
    EXPECT_LE((out - expected).abs().max().item<double>(), 1e-12) << describe(c);
    ASSERT_EQ(lse.sizes(), (std::vector<int64_t>{c.batch, c.heads, c.q_len}));
    EXPECT_EQ(lse.scalar_type(), torch::kFloat32);
    const auto finite = torch::isfinite(expected_lse);
    EXPECT_TRUE(torch::equal(torch::isfinite(lse), finite)) << describe(c);
    EXPECT_LE(
        (lse.to(torch::kFloat64) - expected_lse).masked_select(finite).abs().max().item<double>(),
        1e-5)
        << describe(c);
  }
}

TEST(FlashAttention, RowsWithoutAVisibleKeyAreZero) {
  const Case c{3, 4, 4, 2, 8, /*lengths=*/true};
  auto in = make_inputs(c, torch::dtype(torch::kFloat32), 2);
  in.lengths = torch::tensor({4, 0, 2}, torch::kLong);
  const auto [out, lse] = flash_attention(in.q, in.k, in.v, in.lengths);
  EXPECT_EQ(out[1].abs().max().item<double>(), 0.0);
  EXPECT_TRUE(torch::isneginf(lse[1]).all().item<bool>());
  EXPECT_GT(out[0].abs().max().item<double>(), 0.0);
  // Keys past a length do not matter, whatever they hold (even NaN).
  auto k = in.k.clone();
  auto v = in.v.clone();
  k.slice(1, 2).select(0, 2).fill_(std::numeric_limits<float>::quiet_NaN());
  v.slice(1, 2).select(0, 2).fill_(std::numeric_limits<float>::quiet_NaN());
  const auto again = std::get<0>(flash_attention(in.q, k, v, in.lengths));
  EXPECT_TRUE(torch::isfinite(again).all().item<bool>());
  EXPECT_TRUE(torch::allclose(again[2], out[2]));
}

// Rows masked wholly by a huge finite bias (-1e9, float32's lowest) are float32 math: the average
// of the values, and autograd's gradients through float32 softmax; a partly masked row ignores
// the masked keys.
TEST(FlashAttention, RowsOfHugeFiniteBiasAreFloat32Math) {
  torch::manual_seed(21);
  const auto q = torch::randn({1, 6, 1, 8}, torch::requires_grad()),
             k = torch::randn({1, 6, 1, 8}, torch::requires_grad()),
             v = torch::randn({1, 6, 1, 8}, torch::requires_grad());
  auto bias = torch::zeros({1, 1, 6, 6});
  bias[0][0][2].fill_(-1e9);
  bias[0][0][4].fill_(std::numeric_limits<float>::lowest());
  bias[0][0][5].slice(0, 0, 3).fill_(-1e9);
  const auto out = std::get<0>(flash_attention(q, k, v, std::nullopt, bias));
  const auto qh = q.permute({0, 2, 1, 3}), kh = k.permute({0, 2, 1, 3}),
             vh = v.permute({0, 2, 1, 3});
  const auto expected =
      torch::matmul(
          torch::softmax(torch::matmul(qh, kh.transpose(-2, -1)) / std::sqrt(8.0) + bias, -1), vh)
          .permute({0, 2, 1, 3});
  EXPECT_LE((out - expected).abs().max().item<double>(), 1e-6);
  EXPECT_LE((out[0][2][0] - v[0].mean(0)[0]).abs().max().item<double>(), 1e-6);
  const auto g = torch::randn_like(out);
  const auto ours = torch::autograd::grad({out}, {q, k, v}, {g});
  const auto theirs = torch::autograd::grad({expected}, {q, k, v}, {g});
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_LE((ours[i] - theirs[i]).abs().max().item<double>(), 1e-5) << "gradient " << i;
  }
}

TEST(FlashAttention, ScaleDefaultsToOneOverTheSquareRootOfTheHeadDim) {
  const Case c{1, 5, 5, 2, 16};
  const auto in = make_inputs(c, torch::dtype(torch::kFloat64), 3);
  const auto by_default = std::get<0>(flash_attention(in.q, in.k, in.v));
  const auto explicit_scale = std::get<0>(
      flash_attention(in.q, in.k, in.v, std::nullopt, std::nullopt, false, false, 0.25));
  EXPECT_LE((by_default - explicit_scale).abs().max().item<double>(), 1e-12);
  const auto other =
      std::get<0>(flash_attention(in.q, in.k, in.v, std::nullopt, std::nullopt, false, false, 0.5));
  EXPECT_GT((by_default - other).abs().max().item<double>(), 1e-3);
}

// Gradients of sum(out * g) against autograd through the float64 expression.
void expect_gradients_match(const Case& c, torch::Device device, torch::Dtype dtype,
                            double tolerance) {
  auto in = make_inputs(c, torch::dtype(torch::kFloat64), 4);
  const auto leaf = [&](const torch::Tensor& x) {
    return x.detach().to(device, dtype).requires_grad_(true);
  };
  const auto q = leaf(in.q), k = leaf(in.k), v = leaf(in.v);
  std::optional<torch::Tensor> bias;
  if (in.bias) bias = leaf(*in.bias);
  std::optional<torch::Tensor> lengths;
  if (in.lengths) lengths = in.lengths->to(device);
  const auto g = torch::randn({c.batch, c.q_len, c.heads, c.head_dim}, torch::kFloat64);
  const auto out = std::get<0>(flash_attention(q, k, v, lengths, bias, c.causal, c.bottom_right));
  (out.to(torch::kFloat64).cpu() * g).sum().backward();

  Inputs ref;
  ref.q = in.q.detach().clone().requires_grad_(true);
  ref.k = in.k.detach().clone().requires_grad_(true);
  ref.v = in.v.detach().clone().requires_grad_(true);
  ref.lengths = in.lengths;
  if (in.bias) ref.bias = in.bias->detach().clone().requires_grad_(true);
  const auto expected =
      float64_attention(ref, c, 1.0 / std::sqrt(static_cast<double>(c.head_dim))).first;
  (expected * g).sum().backward();
  const auto diff = [](const torch::Tensor& a, const torch::Tensor& b) {
    return (a.to(torch::kCPU, torch::kFloat64) - b).abs().max().item<double>();
  };
  EXPECT_LE(diff(q.grad(), ref.q.grad()), tolerance) << describe(c);
  EXPECT_LE(diff(k.grad(), ref.k.grad()), tolerance) << describe(c);
  EXPECT_LE(diff(v.grad(), ref.v.grad()), tolerance) << describe(c);
  if (bias) {
    EXPECT_LE(diff(bias->grad(), ref.bias->grad()), tolerance) << describe(c);
  }
}

TEST(FlashAttention, GradientsMatchAutogradThroughFloat64Attention) {
  for (const auto& c : cpu_cases()) expect_gradients_match(c, torch::kCPU, torch::kFloat64, 1e-10);
  // A broadcast bias gets its gradient summed over the batch.
  expect_gradients_match({3, 4, 4, 2, 8, false, true, false, false, true}, torch::kCPU,
                         torch::kFloat64, 1e-10);
}

// The float64 autograd gradients of sum(attention(in) * g) (attention written out in float64 on
// `device`). -> dq, dk, dv, d_bias (undefined without a bias)
std::vector<torch::Tensor> float64_gradients(const Inputs& in, const Case& c,
                                             const torch::Tensor& g, torch::Device device) {
  const auto leaf = [&](const torch::Tensor& x) {
    return x.detach().to(device, torch::kFloat64).requires_grad_(true);
  };
  const auto q = leaf(in.q), k = leaf(in.k), v = leaf(in.v);
  const auto bias = in.bias ? leaf(*in.bias) : torch::Tensor();
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  auto logits = torch::matmul(q.permute({0, 2, 1, 3}), k.permute({0, 2, 3, 1})) * scale;
  if (bias.defined()) logits = logits + bias;
  Inputs lengths_only;
  lengths_only.lengths = in.lengths;
  const auto visible = visible_keys(lengths_only, c, device);
  logits = logits.masked_fill(visible.logical_not(), -INFINITY);
  // Rows without a visible key: zeros, with no NaN on the way (softmax of a row of -inf).
  const auto empty = visible.logical_not().all(-1, /*keepdim=*/true);
  auto p = torch::softmax(torch::where(empty, torch::zeros_like(logits), logits), -1);
  p = torch::where(empty, torch::zeros_like(p), p);
  const auto out = torch::matmul(p, v.permute({0, 2, 1, 3})).permute({0, 2, 1, 3});
  (out * g.to(device, torch::kFloat64)).sum().backward();
  return {q.grad(), k.grad(), v.grad(), bias.defined() ? bias.grad() : torch::Tensor()};
}

// Awkward sizes for the backward: L = 1, 7, 33; E = 36, 40; both bias broadcasts; rows without a
// visible key (a length of 0, L > S bottom-right).
const std::vector<Case>& backward_cpu_cases() {
  static const std::vector<Case> cases = {
      {2, 1, 1, 2, 36},
      {2, 7, 7, 3, 40, /*lengths=*/true, /*bias=*/true},
      {3, 33, 33, 2, 36, true, true, false, false, /*broadcast_bias=*/true},
      {3, 33, 33, 2, 40, true, true, false, false, false, /*head_broadcast_bias=*/true},
      {2, 7, 33, 2, 36, true, true, /*causal=*/true, /*bottom_right=*/true},
      {2, 33, 7, 2, 40, false, true, true, true, true},  // L > S: the first rows see no key
      {2, 33, 33, 3, 36, true, false, true},
      {1, 1, 7, 1, 40, true, true},
  };
  return cases;
}

TEST(FlashAttention, BackwardOpEqualsFloat64Gradients) {
  for (const auto& c : backward_cpu_cases()) {
    const auto in = make_inputs(c, torch::dtype(torch::kFloat64), 6);
    const auto [out, lse] =
        flash_attention(in.q, in.k, in.v, in.lengths, in.bias, c.causal, c.bottom_right);
    const auto g = torch::randn({c.batch, c.q_len, c.heads, c.head_dim}, torch::kFloat64);
    const auto [dq, dk, dv, d_bias] =
        flash_attention_backward(in.q, in.k, in.v, out, g, lse, in.lengths, in.bias, c.causal,
                                 c.bottom_right, std::nullopt, in.bias.has_value());
    const auto expected = float64_gradients(in, c, g, torch::kCPU);
    ASSERT_EQ(dq.sizes(), in.q.sizes()) << describe(c);
    ASSERT_EQ(dk.sizes(), in.k.sizes()) << describe(c);
    ASSERT_EQ(dv.sizes(), in.v.sizes()) << describe(c);
    EXPECT_LE((dq - expected[0]).abs().max().item<double>(), 1e-10) << describe(c);
    EXPECT_LE((dk - expected[1]).abs().max().item<double>(), 1e-10) << describe(c);
    EXPECT_LE((dv - expected[2]).abs().max().item<double>(), 1e-10) << describe(c);
    ASSERT_EQ(d_bias.has_value(), in.bias.has_value()) << describe(c);
    if (d_bias) {
      ASSERT_EQ(d_bias->sizes(), in.bias->sizes()) << describe(c);
      EXPECT_LE((*d_bias - expected[3]).abs().max().item<double>(), 1e-10) << describe(c);
    }
    // And through autograd.
    expect_gradients_match(c, torch::kCPU, torch::kFloat64, 1e-10);
  }
}

TEST(FlashAttention, BackwardOpIsRegisteredWithItsSchema) {
  const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("attnzoo::flash_attention_backward", "");
  EXPECT_EQ(op.schema().returns().size(), 4u);
  EXPECT_EQ(op.schema().arguments().size(), 12u);
  // Without bias_requires_grad (or without a bias) there is no d_bias.
  const Case c{2, 5, 5, 2, 8, true, true};
  const auto in = make_inputs(c, torch::dtype(torch::kFloat32), 7);
  const auto [out, lse] = flash_attention(in.q, in.k, in.v, in.lengths, in.bias);
  const auto g = torch::randn_like(out);
  EXPECT_FALSE(std::get<3>(flash_attention_backward(in.q, in.k, in.v, out, g, lse, in.lengths,
                                                    in.bias, false, false, std::nullopt, false))
                   .has_value());
  EXPECT_FALSE(std::get<3>(flash_attention_backward(in.q, in.k, in.v, out, g, lse, in.lengths,
                                                    std::nullopt, false, false, std::nullopt, true))
                   .has_value());
}

TEST(FlashAttention, BackwardIgnoresKeysPastTheLength) {
  const Case c{3, 6, 6, 2, 8, /*lengths=*/true};
  auto in = make_inputs(c, torch::dtype(torch::kFloat64), 8);
  in.lengths = torch::tensor({6, 0, 3}, torch::kLong);
  const auto [out, lse] = flash_attention(in.q, in.k, in.v, in.lengths);
  const auto g = torch::randn_like(out);
  const auto clean = flash_attention_backward(in.q, in.k, in.v, out, g, lse, in.lengths);
  auto k = in.k.clone(), v = in.v.clone();
  k.slice(1, 3).select(0, 2).fill_(std::numeric_limits<double>::quiet_NaN());
  v.slice(1, 3).select(0, 2).fill_(std::numeric_limits<double>::quiet_NaN());
  const auto [dq, dk, dv, d_bias] = flash_attention_backward(in.q, k, v, out, g, lse, in.lengths);
  EXPECT_TRUE(torch::isfinite(dq).all().item<bool>());
  EXPECT_TRUE(torch::allclose(dq, std::get<0>(clean)));
  EXPECT_TRUE(torch::allclose(dv, std::get<2>(clean)));
  // No gradient reaches the keys past a length, nor any key of an entry without one.
  EXPECT_EQ(dk.slice(1, 3).select(0, 2).abs().max().item<double>(), 0.0);
  EXPECT_EQ(dv[1].abs().max().item<double>(), 0.0);
  EXPECT_EQ(dq[1].abs().max().item<double>(), 0.0);
}

TEST(FlashAttention, BackwardInputChecksNameTheArgument) {
  const auto q = torch::randn({2, 5, 3, 8});
  const auto lse = torch::randn({2, 3, 5});
  EXPECT_THAT(error_of<c10::Error>([&] { flash_attention_backward(q, q, q, q[0], q, lse); }),
              HasSubstr("out and d_out must be q's shape"));
  EXPECT_THAT(error_of<c10::Error>(
                  [&] { flash_attention_backward(q, q, q, q, q.to(torch::kFloat64), lse); }),
              HasSubstr("out and d_out must have q's dtype"));
  EXPECT_THAT(
      error_of<c10::Error>([&] { flash_attention_backward(q, q, q, q, q, lse.transpose(1, 2)); }),
      HasSubstr("lse must be float32 [B, H, L] = [2, 3, 5]"));
  EXPECT_THAT(error_of<c10::Error>(
                  [&] { flash_attention_backward(q, q, q, q, q, lse.to(torch::kFloat64)); }),
              HasSubstr("lse must be float32"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                flash_attention_backward(q, q, torch::randn({2, 6, 3, 8}), q, q, lse);
              }),
              HasSubstr("k and v must have the same S"));
}

TEST(FlashAttention, InputChecksNameTheArgument) {
  const auto q = torch::randn({2, 5, 3, 8});
  EXPECT_THAT(error_of<c10::Error>([&] { flash_attention(q[0], q, q); }),
              HasSubstr("q, k and v must be [B, L, H, E]"));
  EXPECT_THAT(error_of<c10::Error>([&] { flash_attention(q, q.to(torch::kFloat64), q); }),
              HasSubstr("k and v must have q's dtype"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                flash_attention(q, torch::randn({2, 5, 4, 8}), q);
              }),
              HasSubstr("must share B and H"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                flash_attention(q, q, torch::randn({2, 6, 3, 8}));
              }),
              HasSubstr("k and v must have the same S"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                flash_attention(q, q, q, torch::tensor({1.0, 2.0}));
              }),
              HasSubstr("key_lengths must be integer [B] = [2]"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                flash_attention(q, q, q, std::nullopt, torch::randn({2, 3, 5, 4}));
              }),
              HasSubstr("bias must be [1|B, 1|H, L, S] = [1|2, 1|3, 5, 5]"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                flash_attention(q, q, q, std::nullopt, torch::randn({2, 3, 5, 5}, torch::kFloat64));
              }),
              HasSubstr("bias must have q's dtype"));
}

// --- CPU kernel ------------------------------------------------------------------------------

// Sets ATTNZOO_FLASH_CPU_ISA for the lifetime of the guard (the op reads it at each call).
class CpuIsa {
 public:
  explicit CpuIsa(const char* isa) { setenv("ATTNZOO_FLASH_CPU_ISA", isa, 1); }
  ~CpuIsa() { unsetenv("ATTNZOO_FLASH_CPU_ISA"); }
  CpuIsa(const CpuIsa&) = delete;
  CpuIsa& operator=(const CpuIsa&) = delete;
};

// The kernel's paths this processor runs: {"avx512bf16", "avx512", "avx2"} (avx512bf16: the
// bfloat16 products, float32 calls there as in avx512), {"avx512", "avx2"}, {"avx2"} or none.
std::vector<std::string> cpu_kernel_paths() {
  std::vector<std::string> paths;
  if (attnzoo::kernels::flash_attention_cpu_bfloat16_products()) paths.push_back("avx512bf16");
  const int64_t width = attnzoo::kernels::flash_attention_cpu_vector_width();
  if (width >= 16) paths.push_back("avx512");
  if (width >= 8) paths.push_back("avx2");
  return paths;
}

// Sizes around the kernel's tiles: 6 queries a tile, keys in groups of 16 (AVX-512) or 8 (AVX2)
// and blocks of 256, head dims that are not a multiple of the vector width or of the output
// chunk (64 or 16 columns).
std::vector<Case> cpu_kernel_cases() {
  return {
      {1, 1, 1, 1, 4},
      {2, 7, 7, 3, 8},
      {2, 197, 197, 3, 64},
      {1, 300, 300, 2, 64},                                  // two key blocks
      {2, 37, 513, 2, 36, /*lengths=*/true, /*bias=*/true},  // three, cross-attention
      {2, 13, 29, 2, 80, false, false, /*causal=*/true, /*bottom_right=*/true},
      {2, 40, 17, 2, 12, true, true, true, true},  // rows without a key
      {3, 70, 70, 4, 128, true, true, false, false, /*broadcast_bias=*/true},
      {2, 9, 300, 3, 100, false, true, false, false, false, /*head_broadcast_bias=*/true},
      {1, 600, 600, 1, 24, false, false, true},  // causal over three blocks
  };
}

// The kernel's max error against float64 is at most twice that of LibTorch's attention in the
// same dtype (the op's reference path) plus two units in the last place of the largest output;
// lse within float32 rounding of the float64 one. `what` names the case in failures.
void expect_as_accurate_as_libtorch(const Inputs& in, const Case& c, const std::string& path,
                                    const std::string& what) {
  const auto dtype = in.q.scalar_type();
  const auto [expected, expected_lse] =
      float64_attention(in, c, 1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  torch::Tensor theirs;
  {
    CpuIsa reference("reference");
    theirs = std::get<0>(
        flash_attention(in.q, in.k, in.v, in.lengths, in.bias, c.causal, c.bottom_right));
  }
  CpuIsa isa(path.c_str());
  const auto [out, lse] =
      flash_attention(in.q, in.k, in.v, in.lengths, in.bias, c.causal, c.bottom_right);
  ASSERT_EQ(out.sizes(), expected.sizes()) << what;
  ASSERT_EQ(out.scalar_type(), dtype) << what;
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>()) << what;
  const double ours = (out.to(torch::kFloat64) - expected).abs().max().item<double>();
  const double libtorch = (theirs.to(torch::kFloat64) - expected).abs().max().item<double>();
  const double ulp = 2 * attnzoo::testing::epsilon(dtype) * expected.abs().max().item<double>();
  EXPECT_LE(ours, 2 * libtorch + ulp) << what << ": LibTorch's error " << libtorch;
  const auto finite = torch::isfinite(expected_lse);
  EXPECT_TRUE(torch::equal(torch::isfinite(lse), finite)) << what;
  if (finite.any().item<bool>()) {
    EXPECT_LE(
        (lse.to(torch::kFloat64) - expected_lse).masked_select(finite).abs().max().item<double>(),
        dtype == torch::kFloat32 ? 1e-5 : 0.05)
        << what;
  }
}

// Each path of the kernel, float32 and bfloat16, over the sizes around its tiles.
TEST(FlashAttention, CpuKernelIsAsAccurateAsLibTorch) {
  const auto paths = cpu_kernel_paths();
  if (paths.empty()) GTEST_SKIP() << "the CPU has no AVX2 + FMA: the CPU kernel is untested";
  for (const auto& path : paths) {
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      for (const auto& c : cpu_kernel_cases()) {
        expect_as_accurate_as_libtorch(make_inputs(c, torch::dtype(dtype), 5), c, path,
                                       path + " " + c10::toString(dtype) + " " + describe(c));
      }
    }
  }
}

// The kernel packs k and v from rows whose head dim is contiguous with vector loads and
// shuffles, and element by element otherwise: q, k and v whose head dim is the outermost
// dimension of their storage, and odd head dims (no whole bfloat16 pairs), are as accurate.
TEST(FlashAttention, CpuKernelReadsAnyLayoutOfTheHeadDim) {
  const auto paths = cpu_kernel_paths();
  if (paths.empty()) GTEST_SKIP() << "the CPU has no AVX2 + FMA: the CPU kernel is untested";
  for (const auto& path : paths) {
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      for (const auto& c : {Case{2, 197, 197, 3, 64}, Case{2, 40, 70, 5, 36, /*lengths=*/true},
                            Case{1, 33, 33, 2, 7}, Case{3, 50, 50, 4, 33}}) {
        Inputs in = make_inputs(c, torch::dtype(dtype), 9);
        // The same values, stored [E, B, L, H] or [E, B, S, H].
        const auto head_dim_outermost = [](const torch::Tensor& t) {
          return t.permute({3, 0, 1, 2}).contiguous().permute({1, 2, 3, 0});
        };
        in.q = head_dim_outermost(in.q);
        in.k = head_dim_outermost(in.k);
        in.v = head_dim_outermost(in.v);
        ASSERT_NE(in.k.stride(3), 1);
        expect_as_accurate_as_libtorch(
            in, c, path,
            path + " " + c10::toString(dtype) + " " + describe(c) + " head dim outermost");
        if (c.head_dim % 2 == 1) {
          expect_as_accurate_as_libtorch(make_inputs(c, torch::dtype(dtype), 10), c, path,
                                         path + " " + c10::toString(dtype) + " " + describe(c));
        }
      }
    }
  }
}

// The kernel is what runs: its sums go in another order than LibTorch's products, so its
// float32 output differs from the reference's in the last bits somewhere.
TEST(FlashAttention, CpuKernelIsNotTheReference) {
  if (cpu_kernel_paths().empty()) GTEST_SKIP() << "the CPU has no AVX2 + FMA";
  const Case c{1, 197, 197, 3, 64};
  const auto in = make_inputs(c, torch::dtype(torch::kFloat32), 6);
  torch::Tensor reference;
  {
    CpuIsa isa("reference");
    reference = std::get<0>(flash_attention(in.q, in.k, in.v));
  }
  const auto ours = std::get<0>(flash_attention(in.q, in.k, in.v));
  EXPECT_FALSE(torch::equal(ours, reference));
  EXPECT_LE((ours - reference).abs().max().item<double>(), 1e-5);
}

// bfloat16 calls take the AVX512-BF16 products where the processor has them: their probabilities
// are rounded to bfloat16 for the value product, so the output differs from the float32
// arithmetic's of the avx512 path somewhere, by a few bfloat16 units at most.
TEST(FlashAttention, CpuKernelTakesTheBfloat16ProductsWhereTheCpuHasThem) {
  if (!attnzoo::kernels::flash_attention_cpu_bfloat16_products()) {
    GTEST_SKIP() << "the CPU has no AVX512-BF16";
  }
  const Case c{2, 197, 197, 3, 64};
  const auto in = make_inputs(c, torch::dtype(torch::kBFloat16), 8);
  const auto products = std::get<0>(flash_attention(in.q, in.k, in.v));
  torch::Tensor widened;
  {
    CpuIsa isa("avx512");
    EXPECT_FALSE(attnzoo::kernels::flash_attention_cpu_bfloat16_products());
    widened = std::get<0>(flash_attention(in.q, in.k, in.v));
  }
  EXPECT_FALSE(torch::equal(products, widened));
  const double largest = widened.abs().max().item<double>();
  EXPECT_LE((products.to(torch::kFloat64) - widened.to(torch::kFloat64)).abs().max().item<double>(),
            4 * attnzoo::testing::epsilon(torch::kBFloat16) * largest);
}

// Keys past a length hold NaN and infinities in the padding of a batch: no row sees them. The
// length is odd, so that one bfloat16 pair of keys holds a visible key and a padded one.
TEST(FlashAttention, CpuKernelIgnoresPaddingPastTheLength) {
  for (const auto& path : cpu_kernel_paths()) {
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      const Case c{2, 50, 300, 2, 64, /*lengths=*/true};
      auto in = make_inputs(c, torch::dtype(dtype), 7);
      in.lengths = torch::tensor({300, 271}, torch::kLong);
      CpuIsa isa(path.c_str());
      const auto clean = std::get<0>(flash_attention(in.q, in.k, in.v, in.lengths));
      auto k = in.k.clone(), v = in.v.clone();
      k[1].slice(0, 271).fill_(std::numeric_limits<float>::quiet_NaN());
      v[1].slice(0, 271).fill_(std::numeric_limits<float>::infinity());
      const auto poisoned = std::get<0>(flash_attention(in.q, k, v, in.lengths));
      EXPECT_TRUE(torch::equal(clean, poisoned)) << path << " " << c10::toString(dtype);
    }
  }
}

// --- CPU kernel with the relative position term ---------------------------------------------

struct RelativeCase {
  int64_t batch, q_len, k_len, heads, head_dim;
  bool lengths = false;          // the second entry sees part of the keys (none if q_len < 8)
  bool shared_positions = true;  // positions [1, P, H, E], else [B, P, H, E]
};

struct RelativeInputs {
  torch::Tensor q_content, q_position, k, v, positions;  // [B, L|S|P, H, E]
  std::optional<torch::Tensor> lengths;
};

RelativeInputs make_relative_inputs(const RelativeCase& c, torch::Dtype dtype, int64_t seed) {
  torch::manual_seed(seed);
  const auto o = torch::dtype(dtype);
  RelativeInputs in;
  const auto q = torch::randn({c.batch, c.q_len, c.heads, c.head_dim}, o);
  in.q_content = q + torch::randn({c.heads, c.head_dim}, o) * 0.5;
  in.q_position = q + torch::randn({c.heads, c.head_dim}, o) * 0.5;
  // Scores of a few units: softmaxes neither flat nor one-hot.
  in.k = torch::randn({c.batch, c.k_len, c.heads, c.head_dim}, o) * 1.5;
  in.v = torch::randn({c.batch, c.k_len, c.heads, c.head_dim}, o);
  in.positions =
      torch::randn({c.shared_positions ? 1 : c.batch, c.q_len + c.k_len - 1, c.heads, c.head_dim},
                   o) *
      1.5;
  if (c.lengths) {
    std::vector<int64_t> lengths(static_cast<size_t>(c.batch), c.k_len);
    lengths.back() = c.k_len * 2 / 3;
    in.lengths = torch::tensor(lengths, torch::kLong);
  }
  return in;
}

// Transformer-XL's score index by index (query i's position score with key j is row L − 1 − i + j
// of positions), the softmax over the keys within the length, in `compute`: [B, L, H, E].
torch::Tensor relative_attention_math(const RelativeInputs& in, double scale,
                                      torch::Dtype compute) {
  const auto heads_first = [&](const torch::Tensor& t) { return t.to(compute).transpose(1, 2); };
  const auto qc = heads_first(in.q_content), qp = heads_first(in.q_position);
  const auto k = heads_first(in.k), v = heads_first(in.v), pos = heads_first(in.positions);
  const int64_t l = qc.size(2), s = k.size(2);
  const auto i = torch::arange(l, torch::kLong).view({l, 1});
  const auto j = torch::arange(s, torch::kLong).view({1, s});
  const auto rows = (l - 1 - i + j).view({1, 1, l, s});
  const auto position_scores = torch::matmul(qp, pos.transpose(-2, -1));  // [B, H, L, P]
  auto scores = (torch::matmul(qc, k.transpose(-2, -1)) +
                 position_scores.gather(3, rows.expand({qc.size(0), qc.size(1), l, s}))) *
                scale;
  if (in.lengths) {
    const auto excluded = (j.view({1, 1, 1, s}) >= in.lengths->view({-1, 1, 1, 1}));
    scores = scores.masked_fill(excluded, -std::numeric_limits<double>::infinity());
  }
  return torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2);
}

std::vector<RelativeCase> relative_cases() {
  return {
      {1, 1, 1, 1, 4},
      {2, 7, 7, 2, 8, true},
      {2, 197, 197, 3, 64, true, false},  // per-entry positions
      {1, 300, 300, 4, 36},               // two key blocks
      {2, 37, 513, 2, 36, true},          // a cache: fewer queries than keys, three blocks
      {2, 13, 29, 2, 13, false, false},   // an odd head dim
      {1, 600, 600, 1, 24},               // three blocks, a tile's window across groups
  };
}

// As flash_attention's kernel: at most twice the error of the same formula in LibTorch ops (in
// float32 for both dtypes, as the op's reference) against float64, plus two units in the last
// place of the largest output. Each path, float32 and bfloat16.
TEST(FlashAttention, CpuRelativeKernelIsAsAccurateAsLibTorch) {
  const auto paths = cpu_kernel_paths();
  if (paths.empty()) GTEST_SKIP() << "the CPU has no AVX2 + FMA: the CPU kernel is untested";
  for (const auto& path : paths) {
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      for (const auto& c : relative_cases()) {
        const auto in = make_relative_inputs(c, dtype, 11);
        const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
        const auto expected = relative_attention_math(in, scale, torch::kFloat64);
        const auto theirs = relative_attention_math(in, scale, torch::kFloat32).to(dtype);
        CpuIsa isa(path.c_str());
        const auto out = attnzoo::kernels::flash_attention_relative_cpu(
            in.q_content, in.q_position, in.k, in.v, in.positions, in.lengths, scale);
        std::ostringstream what;
        what << path << " " << c10::toString(dtype) << " B=" << c.batch << " L=" << c.q_len
             << " S=" << c.k_len << " H=" << c.heads << " E=" << c.head_dim
             << (c.lengths ? " lengths" : "") << (c.shared_positions ? "" : " per-entry");
        ASSERT_EQ(out.sizes(), expected.sizes()) << what.str();
        ASSERT_EQ(out.scalar_type(), dtype) << what.str();
        const double ours = (out.to(torch::kFloat64) - expected).abs().max().item<double>();
        const double libtorch = (theirs.to(torch::kFloat64) - expected).abs().max().item<double>();
        const double ulp =
            2 * attnzoo::testing::epsilon(dtype) * expected.abs().max().item<double>();
        EXPECT_LE(ours, 2 * libtorch + ulp) << what.str() << ": LibTorch's error " << libtorch;
      }
    }
  }
}

// The position term counts: without it (zero positions) the output is another one, and a shift
// of the positions by one row changes it too (the index L − 1 − i + j, not a neighbour, is read).
TEST(FlashAttention, CpuRelativeKernelReadsTheShiftedPositionRow) {
  if (cpu_kernel_paths().empty()) GTEST_SKIP() << "the CPU has no AVX2 + FMA";
  const RelativeCase c{1, 20, 20, 2, 16};
  auto in = make_relative_inputs(c, torch::kFloat32, 12);
  const double scale = 0.25;
  const auto run = [&](const torch::Tensor& positions) {
    return attnzoo::kernels::flash_attention_relative_cpu(in.q_content, in.q_position, in.k, in.v,
                                                          positions, std::nullopt, scale);
  };
  const auto expected = relative_attention_math(in, scale, torch::kFloat64);
  EXPECT_LE((run(in.positions).to(torch::kFloat64) - expected).abs().max().item<double>(), 1e-5);
  const auto rolled = torch::roll(in.positions, 1, 1);
  EXPECT_GT((run(rolled).to(torch::kFloat64) - expected).abs().max().item<double>(), 1e-2);
  EXPECT_GT((run(torch::zeros_like(in.positions)).to(torch::kFloat64) - expected)
                .abs()
                .max()
                .item<double>(),
            1e-2);
}

TEST(FlashAttention, CpuRelativeKernelRefusalsNameTheArgument) {
  const auto in = make_relative_inputs({2, 5, 5, 2, 8}, torch::kFloat32, 13);
  using attnzoo::kernels::flash_attention_relative_cpu;
  EXPECT_THAT(error_of<c10::ValueError>([&] {
                flash_attention_relative_cpu(in.q_content, in.q_position, in.k, in.v,
                                             in.positions.narrow(1, 0, 8), std::nullopt, 1.0);
              }),
              HasSubstr("positions must be [1|B, L + S - 1, H, E] = [1|2, 9, 2, 8]"));
  EXPECT_THAT(error_of<c10::ValueError>([&] {
                flash_attention_relative_cpu(in.q_content, in.q_position.narrow(1, 0, 4), in.k,
                                             in.v, in.positions, std::nullopt, 1.0);
              }),
              HasSubstr("q_position must be q_content's"));
  EXPECT_THAT(error_of<c10::ValueError>([&] {
                flash_attention_relative_cpu(in.q_content, in.q_position, in.k,
                                             in.v.to(torch::kFloat64), in.positions, std::nullopt,
                                             1.0);
              }),
              HasSubstr("every input must be a CPU tensor of q_content's dtype"));
  EXPECT_THAT(error_of<c10::ValueError>([&] {
                flash_attention_relative_cpu(in.q_content, in.q_position, in.k, in.v, in.positions,
                                             torch::tensor({1.0, 2.0}), 1.0);
              }),
              HasSubstr("key_lengths must be integral [B] = [2]"));
}

// --- CUDA ------------------------------------------------------------------------------------

// Fills freed blocks of the caching allocator with NaN, so that the outputs the op allocates next
// most likely start as NaN: an element the kernel skips shows up.
void poison_allocator(int64_t elements) {
  torch::full({elements}, std::numeric_limits<float>::quiet_NaN(),
              torch::dtype(torch::kFloat32).device(torch::kCUDA));
}

// FlashAttention's rule: the kernel's max error against float64 is at most twice that of
// LibTorch's own attention (the reference path of the op, in the same dtype) plus a few units in
// the last place of the largest output.
void expect_as_accurate_as_libtorch(const Case& c, torch::Dtype dtype, int64_t seed) {
  const auto options = torch::dtype(dtype).device(torch::kCUDA);
  const auto in = make_inputs(c, options, seed);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  poison_allocator(4 * c.batch * c.q_len * c.heads * std::max<int64_t>(c.head_dim, 8));
  const auto [out, lse] =
      flash_attention(in.q, in.k, in.v, in.lengths, in.bias, c.causal, c.bottom_right);
  torch::cuda::synchronize();
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{c.batch, c.q_len, c.heads, c.head_dim}));
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>()) << describe(c) << ": unwritten elements";
  const auto [expected, expected_lse] = float64_attention(in, c, scale);
  // LibTorch's attention in the dtype on the GPU (matmul, softmax, matmul, as SDPA's math path),
  // with the same visible keys.
  const auto qh = in.q.permute({0, 2, 1, 3}), kh = in.k.permute({0, 2, 1, 3}),
             vh = in.v.permute({0, 2, 1, 3});
  auto logits = torch::matmul(qh, kh.transpose(-2, -1)) * scale;
  if (in.bias) logits = logits + *in.bias;
  const auto mask_visible = visible_keys(in, c, torch::kCUDA);
  logits = logits.masked_fill(mask_visible.logical_not(), -INFINITY);
  auto p = torch::softmax(logits, -1);
  p = torch::where(torch::isnan(p), torch::zeros_like(p), p);
  const auto theirs_out = torch::matmul(p, vh).permute({0, 2, 1, 3});
  const double ours = (out.to(torch::kCPU, torch::kFloat64) - expected).abs().max().item<double>();
  const double theirs =
      (theirs_out.to(torch::kCPU, torch::kFloat64) - expected).abs().max().item<double>();
  const double eps = dtype == torch::kFloat16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  const double ulp = 2 * eps * expected.abs().max().item<double>();
  EXPECT_LE(ours, 2 * theirs + ulp) << describe(c) << ": LibTorch's error " << theirs;
  const auto finite = torch::isfinite(expected_lse);
  EXPECT_TRUE(torch::equal(torch::isfinite(lse.cpu()), finite)) << describe(c);
  if (finite.any().item<bool>()) {
    EXPECT_LE((lse.to(torch::kCPU, torch::kFloat64) - expected_lse)
                  .masked_select(finite)
                  .abs()
                  .max()
                  .item<double>(),
              0.05)
        << describe(c);
  }
}

std::vector<Case> cuda_cases() {
  std::vector<Case> cases;
  for (const int64_t n : {1, 7, 197, 1000}) {
    for (const int64_t e : {36, 40, 64, 128}) cases.push_back({2, n, n, 3, e});
  }
  cases.push_back({1, 4097, 4097, 2, 64});
  cases.push_back({64, 197, 197, 2, 64});
  cases.push_back({4, 500, 500, 4, 36, /*lengths=*/true, /*bias=*/true});
  cases.push_back({4, 300, 300, 4, 64, true, true, false, false, /*broadcast_bias=*/true});
  cases.push_back({3, 333, 333, 2, 64, true, false, /*causal=*/true});
  cases.push_back({2, 100, 300, 2, 96, false, false, true, /*bottom_right=*/true});
  cases.push_back({2, 300, 100, 2, 32, true, true, true, true});  // rows without a key
  cases.push_back({5, 64, 200, 4, 128, true});                    // cross-attention
  return cases;
}

TEST(FlashAttention, KernelIsAsAccurateAsLibTorch_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  int64_t seed = 10;
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    for (const auto& c : cuda_cases()) expect_as_accurate_as_libtorch(c, dtype, ++seed);
  }
}

TEST(FlashAttention, GradientsMatchFloat64_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  // float32 inputs: the forward and flash_attention_backward both take the LibTorch reference on
  // CUDA (the fused kernels are bf16 and fp16 only).
  for (const auto& c :
       {Case{2, 37, 37, 2, 64, true, true}, Case{2, 20, 50, 2, 36, true, false, true, true}}) {
    expect_gradients_match(c, torch::kCUDA, torch::kFloat32, 1e-4);
  }
}

// The fused backward against float64 by FlashAttention's rule: each of dq, dk, dv, d_bias has a max
// error at most twice LibTorch's own (autograd through matmul, softmax, matmul in the dtype on the
// GPU) plus a few units in the last place and FlashAttention's absolute floor. The outputs are
// poisoned first, so that an element the kernel skips shows up as NaN. through_autograd: the
// gradients of flash_attention's out through autograd instead of a direct call of the op.
void expect_backward_as_accurate_as_libtorch(const Case& c, torch::Dtype dtype, int64_t seed,
                                             bool through_autograd = false) {
  const auto options = torch::dtype(dtype).device(torch::kCUDA);
  const auto in = make_inputs(c, options, seed);
  const auto g = torch::randn({c.batch, c.q_len, c.heads, c.head_dim}, options);
  const bool with_bias = in.bias.has_value();
  std::vector<torch::Tensor> ours(4);
  if (through_autograd) {
    const auto q = in.q.detach().requires_grad_(true), k = in.k.detach().requires_grad_(true),
               v = in.v.detach().requires_grad_(true);
    std::optional<torch::Tensor> bias;
    if (with_bias) bias = in.bias->detach().requires_grad_(true);
    const auto out =
        std::get<0>(flash_attention(q, k, v, in.lengths, bias, c.causal, c.bottom_right));
    poison_allocator(4 * (c.batch * c.heads * (c.q_len + 2 * c.k_len) * c.head_dim));
    (out * g).sum().backward();
    ours = {q.grad(), k.grad(), v.grad(), with_bias ? bias->grad() : torch::Tensor()};
  } else {
    const auto [out, lse] =
        flash_attention(in.q, in.k, in.v, in.lengths, in.bias, c.causal, c.bottom_right);
    poison_allocator(4 * (c.batch * c.heads * (c.q_len + 2 * c.k_len) * c.head_dim));
    auto [dq, dk, dv, d_bias] =
        flash_attention_backward(in.q, in.k, in.v, out, g, lse, in.lengths, in.bias, c.causal,
                                 c.bottom_right, std::nullopt, with_bias);
    ASSERT_EQ(d_bias.has_value(), with_bias) << describe(c);
    ours = {dq, dk, dv, d_bias.value_or(torch::Tensor())};
  }
  torch::cuda::synchronize();

  // LibTorch's own gradients in the dtype, same masks, no NaN on the way.
  const auto leaf = [](const torch::Tensor& x) { return x.detach().clone().requires_grad_(true); };
  const auto q = leaf(in.q), k = leaf(in.k), v = leaf(in.v);
  const auto bias = with_bias ? leaf(*in.bias) : torch::Tensor();
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  auto logits = torch::matmul(q.permute({0, 2, 1, 3}), k.permute({0, 2, 3, 1})) * scale;
  if (with_bias) logits = logits + bias;
  const auto visible = visible_keys(in, c, torch::kCUDA);
  logits = logits.masked_fill(visible.logical_not(), -INFINITY);
  const auto empty = visible.logical_not().all(-1, /*keepdim=*/true);
  auto p = torch::softmax(torch::where(empty, torch::zeros_like(logits), logits), -1);
  p = torch::where(empty, torch::zeros_like(p), p);
  (torch::matmul(p, v.permute({0, 2, 1, 3})).permute({0, 2, 1, 3}) * g).sum().backward();
  const std::vector<torch::Tensor> theirs = {q.grad(), k.grad(), v.grad(),
                                             with_bias ? bias.grad() : torch::Tensor()};
  const auto expected = float64_gradients(in, c, g, torch::kCUDA);

  const double eps = dtype == torch::kFloat16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  const char* names[] = {"dq", "dk", "dv", "d_bias"};
  for (int i = 0; i < (with_bias ? 4 : 3); ++i) {
    ASSERT_TRUE(ours[i].defined()) << describe(c) << ": " << names[i];
    ASSERT_EQ(ours[i].sizes(), expected[i].sizes()) << describe(c) << ": " << names[i];
    EXPECT_TRUE(torch::isfinite(ours[i]).all().item<bool>())
        << describe(c) << ": " << names[i] << " has unwritten (NaN) elements";
    const double err = (ours[i].to(torch::kFloat64) - expected[i]).abs().max().item<double>();
    const double ref = (theirs[i].to(torch::kFloat64) - expected[i]).abs().max().item<double>();
    const double ulp = 2 * eps * expected[i].abs().max().item<double>();
    // FlashAttention's absolute floor: twice the dtype's rounding at magnitude 0.3 (theirs can be
    // exactly 0, e.g. dq at L = S = 1).
    const auto rounded = expected[i].to(dtype);
    const double floor = 2 * ((rounded + 0.3 - 0.3) - rounded).abs().max().item<double>();
    EXPECT_LE(err, 2 * ref + ulp + floor)
        << describe(c) << ": " << names[i] << ", LibTorch's error " << ref
        << (through_autograd ? " (through autograd)" : "");
  }
}

std::vector<Case> backward_cuda_cases() {
  std::vector<Case> cases;
  for (const int64_t n : {1, 7, 197, 1000}) {
    for (const int64_t e : {36, 40, 64, 128}) cases.push_back({2, n, n, 3, e});
  }
  cases.push_back({64, 7, 7, 2, 40, /*lengths=*/true, /*bias=*/true});
  cases.push_back({64, 197, 197, 2, 64});
  cases.push_back({4, 500, 500, 4, 36, true, true});
  cases.push_back({4, 300, 300, 4, 64, true, true, false, false, /*broadcast_bias=*/true});
  cases.push_back({4, 197, 197, 3, 40, true, true, false, false, false, /*head_broadcast=*/true});
  cases.push_back({3, 333, 333, 2, 64, true, false, /*causal=*/true});
  cases.push_back({2, 100, 300, 2, 96, false, true, true, /*bottom_right=*/true});
  cases.push_back({2, 300, 100, 2, 32, true, true, true, true});  // rows without a key
  cases.push_back({5, 64, 200, 4, 128, true, true});              // cross-attention
  return cases;
}

TEST(FlashAttention, BackwardKernelIsAsAccurateAsLibTorch_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  int64_t seed = 100;
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    for (const auto& c : backward_cuda_cases()) {
      expect_backward_as_accurate_as_libtorch(c, dtype, ++seed);
    }
  }
}

TEST(FlashAttention, BackwardKernelThroughAutograd_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  int64_t seed = 200;
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    for (const auto& c : {Case{2, 197, 197, 3, 64, true, true},
                          Case{3, 65, 65, 2, 36, true, true, false, false, true},
                          Case{2, 33, 77, 2, 128, true, true, true, true, false, true}}) {
      expect_backward_as_accurate_as_libtorch(c, dtype, ++seed, /*through_autograd=*/true);
    }
  }
}

// The case tools/device_check.sh runs under compute-sanitizer (memcheck, racecheck): small enough
// for its time budget, yet through every part of both kernels (key lengths with a row of no
// visible key, a per-head bias and its gradient, a partial last tile of rows and of keys).
TEST(FlashAttention, SanitizerCase_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  for (const int64_t n : {197, 1000}) {
    const Case c{2, n, n, 2, 64, /*lengths=*/true, /*bias=*/true};
    expect_as_accurate_as_libtorch(c, torch::kBFloat16, 400 + n);
    expect_backward_as_accurate_as_libtorch(c, torch::kBFloat16, 500 + n);
  }
}

// More than 65535 (batch, head) pairs: the grid is one-dimensional (grid.y stops at 65535).
TEST(FlashAttention, MoreThan65535BatchHeadPairs_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  const Case c{32800, 3, 3, 2, 32, /*lengths=*/true, /*bias=*/true};  // B·H = 65600
  expect_as_accurate_as_libtorch(c, torch::kBFloat16, 300);
  expect_backward_as_accurate_as_libtorch(c, torch::kBFloat16, 301);
}

// A float32 bias far below fp16's range (-1e9, float32's lowest) stays finite in the kernel, as in
// float32 math: a row masked only by such values gets the average of the values (float32 cannot
// tell the scores apart next to -1e9), not zeros; a row partly masked by them ignores those keys.
TEST(FlashAttention, FiniteBiasBelowTheHalfRangeIsFloat32Math_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  const int64_t B = 2, L = 40, H = 2, E = 64;
  const float lowest = std::numeric_limits<float>::lowest();
  auto bias = torch::zeros({B, H, L, L});
  bias[0][0][3].fill_(-1e9);                     // a whole row
  bias[1][1][5].fill_(lowest);                   // a whole row
  bias[0][1][7].slice(0, 0, 30).fill_(-1e9);     // part of a row
  bias[1][0][9].slice(0, 10, 40).fill_(lowest);  // part of a row
  for (const auto dtype : {torch::kFloat16, torch::kBFloat16}) {
    torch::manual_seed(7);
    const auto options = torch::dtype(dtype).device(torch::kCUDA);
    const auto q = torch::randn({B, L, H, E}, options), k = torch::randn({B, L, H, E}, options),
               v = torch::randn({B, L, H, E}, options);
    const auto bias_cuda = bias.to(torch::kCUDA).requires_grad_(true);
    const auto out = std::get<0>(flash_attention(q, k, v, std::nullopt, bias_cuda));
    // float32 math on the same (rounded) inputs.
    const auto q32 = q.to(torch::kFloat).permute({0, 2, 1, 3});
    const auto k32 = k.to(torch::kFloat).permute({0, 2, 1, 3});
    const auto v32 = v.to(torch::kFloat).permute({0, 2, 1, 3});
    const auto logits =
        torch::matmul(q32, k32.transpose(-2, -1)) / std::sqrt(double(E)) + bias.to(torch::kCUDA);
    const auto expected = torch::matmul(torch::softmax(logits, -1), v32).permute({0, 2, 1, 3});
    ASSERT_TRUE(torch::isfinite(out).all().item<bool>()) << c10::toString(dtype);
    const double eps = dtype == torch::kFloat16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    EXPECT_LE((out.to(torch::kFloat) - expected).abs().max().item<double>(), 8 * eps * 4)
        << c10::toString(dtype);
    // The wholly masked rows: the values' average over the keys.
    const auto mean = v32.mean(2);  // [B, H, E]
    EXPECT_LE((out[0].select(0, 3).select(0, 0).to(torch::kFloat) - mean[0][0])
                  .abs()
                  .max()
                  .item<double>(),
              8 * eps);
    EXPECT_LE((out[1].select(0, 5).select(0, 1).to(torch::kFloat) - mean[1][1])
                  .abs()
                  .max()
                  .item<double>(),
              8 * eps);
    // The backward: finite everywhere; dq equals float32 math's on the rows that see a key
    // through a normal logit. A wholly masked row's recomputed probabilities are not its forward's
    // (the saved log-sum-exp, near -1e9 or -1.7e38, has lost log(S) to rounding), so its dq and
    // its share of dk, dv and d(bias) are not float32 math's: kernels/README.md.
    const auto q_leaf = q.detach().requires_grad_(true);
    const auto g = torch::randn({B, L, H, E}, options);
    (std::get<0>(flash_attention(q_leaf, k, v, std::nullopt, bias_cuda)) * g).sum().backward();
    EXPECT_TRUE(torch::isfinite(bias_cuda.grad()).all().item<bool>()) << c10::toString(dtype);
    EXPECT_TRUE(torch::isfinite(q_leaf.grad()).all().item<bool>()) << c10::toString(dtype);
    const auto q32_leaf = q32.detach().requires_grad_(true);
    const auto expected_out =
        torch::matmul(
            torch::softmax(torch::matmul(q32_leaf, k32.transpose(-2, -1)) / std::sqrt(double(E)) +
                               bias.to(torch::kCUDA),
                           -1),
            v32)
            .permute({0, 2, 1, 3});
    (expected_out * g.to(torch::kFloat)).sum().backward();
    auto keep = torch::ones({B, L, H, 1}, torch::kBool);
    keep[0][3][0] = false;
    keep[1][5][1] = false;
    const auto dq =
        q_leaf.grad().to(torch::kFloat).masked_fill(keep.logical_not().to(torch::kCUDA), 0);
    const auto dq_expected =
        q32_leaf.grad().permute({0, 2, 1, 3}).masked_fill(keep.logical_not().to(torch::kCUDA), 0);
    EXPECT_LE((dq - dq_expected).abs().max().item<double>(),
              16 * eps * dq_expected.abs().max().item<double>())
        << c10::toString(dtype);
  }
}

TEST(FlashAttention, Float32AndWideHeadsTakeTheReference_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  for (const auto& c : {Case{2, 33, 33, 2, 64, true, true}, Case{1, 17, 17, 2, 160}}) {
    const auto dtype = c.head_dim > 128 ? torch::kFloat16 : torch::kFloat32;
    const auto in = make_inputs(c, torch::dtype(dtype).device(torch::kCUDA), 5);
    const auto out = std::get<0>(flash_attention(in.q, in.k, in.v, in.lengths, in.bias));
    const auto expected =
        float64_attention(in, c, 1.0 / std::sqrt(static_cast<double>(c.head_dim))).first;
    EXPECT_LE((out.to(torch::kCPU, torch::kFloat64) - expected).abs().max().item<double>(),
              dtype == torch::kFloat32 ? 1e-5 : 1e-2)
        << describe(c);
  }
}

}  // namespace test_flash_attention
