// attnzoo::flash_attention: on CPU (the LibTorch reference) against attention written out in
// float64 with every mask kind, the log-sum-exp, rows without a visible key, gradients against
// autograd through the float64 expression, and the input checks; with a GPU, the fused kernel
// against float64 by FlashAttention's rule (error at most twice LibTorch's own at the same
// precision), with poisoned outputs and awkward sizes.
#include "kernels/ops.h"

#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

namespace {

using attnzoo::kernels::flash_attention;
using ::testing::HasSubstr;

#define SKIP_WITHOUT_CUDA()                                                                    \
  if (!torch::cuda::is_available()) {                                                          \
    GTEST_SKIP() << "no CUDA device: the CUDA kernel of attnzoo::flash_attention is untested"; \
  }

struct Case {
  int64_t batch, q_len, k_len, heads, head_dim;
  bool lengths = false, bias = false, causal = false, bottom_right = false;
  bool broadcast_bias = false;  // bias [1, H, L, S]
};

std::string describe(const Case& c) {
  std::ostringstream out;
  out << "B" << c.batch << " L" << c.q_len << " S" << c.k_len << " H" << c.heads << " E"
      << c.head_dim << (c.lengths ? " lengths" : "") << (c.bias ? " bias" : "")
      << (c.broadcast_bias ? "(broadcast)" : "")
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
    in.bias = torch::randn({c.broadcast_bias ? 1 : c.batch, c.heads, c.q_len, c.k_len}, options);
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

TEST(FlashAttention, InputChecksNameTheArgument) {
  const auto q = torch::randn({2, 5, 3, 8});
  const auto error = [](auto&& f) {
    try {
      f();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("(no error)");
  };
  EXPECT_THAT(error([&] { flash_attention(q[0], q, q); }),
              HasSubstr("q, k and v must be [B, L, H, E]"));
  EXPECT_THAT(error([&] { flash_attention(q, q.to(torch::kFloat64), q); }),
              HasSubstr("k and v must have q's dtype"));
  EXPECT_THAT(error([&] {
                flash_attention(q, torch::randn({2, 5, 4, 8}), q);
              }),
              HasSubstr("must share B and H"));
  EXPECT_THAT(error([&] {
                flash_attention(q, q, torch::randn({2, 6, 3, 8}));
              }),
              HasSubstr("k and v must have the same S"));
  EXPECT_THAT(error([&] {
                flash_attention(q, q, q, torch::tensor({1.0, 2.0}));
              }),
              HasSubstr("key_lengths must be integer [B] = [2]"));
  EXPECT_THAT(error([&] {
                flash_attention(q, q, q, std::nullopt, torch::randn({2, 3, 5, 4}));
              }),
              HasSubstr("bias must be [1|B, 1|H, L, S] = [1|2, 1|3, 5, 5]"));
  EXPECT_THAT(error([&] {
                flash_attention(q, q, q, std::nullopt, torch::randn({2, 3, 5, 5}, torch::kFloat64));
              }),
              HasSubstr("bias must have q's dtype"));
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
  SKIP_WITHOUT_CUDA();
  int64_t seed = 10;
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    for (const auto& c : cuda_cases()) expect_as_accurate_as_libtorch(c, dtype, ++seed);
  }
}

TEST(FlashAttention, GradientsMatchFloat64_CUDA) {
  SKIP_WITHOUT_CUDA();
  // The backward is LibTorch ops in float32 on the saved log-sum-exp; with bf16 inputs the
  // gradients carry bf16's rounding of the inputs and outputs.
  for (const auto& c :
       {Case{2, 37, 37, 2, 64, true, true}, Case{2, 20, 50, 2, 36, true, false, true, true}}) {
    expect_gradients_match(c, torch::kCUDA, torch::kFloat32, 1e-4);
  }
}

TEST(FlashAttention, Float32AndWideHeadsTakeTheReference_CUDA) {
  SKIP_WITHOUT_CUDA();
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

}  // namespace
