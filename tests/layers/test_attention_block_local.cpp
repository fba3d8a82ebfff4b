// The block_local backend: its pattern against a slow construction by loops, then the backend
// against math given that pattern as an explicit attn_mask — every mask kind, awkward sizes
// (L < b, L not a multiple of b, w > b, g >= L), dtypes, gradients, fully masked rows, errors, and
// the layer.
#include <attnzoo/layers/attention_block_local.h>

#include "attention_test_util.h"

#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace attnzoo {
namespace test_attention_block_local {

using testing::error_of;
using testing::max_abs_diff;
using testing::Qkv;

AttentionBackendOptions pattern_options(int64_t b, int64_t w, int64_t g) {
  return AttentionBackendOptions().block_size(b).window(w).global_tokens(g);
}

std::string describe(int64_t l, int64_t b, int64_t w, int64_t g) {
  return "L=" + std::to_string(l) + " b=" + std::to_string(b) + " w=" + std::to_string(w) +
         " g=" + std::to_string(g);
}

// The pattern built block by block with plain loops, from the definition in the header (no
// arithmetic on the block index shared with the library's vectorised formula).
torch::Tensor loop_pattern(int64_t l, int64_t b, int64_t w, int64_t g) {
  auto pattern = torch::zeros({l, l}, torch::kBool);
  auto a = pattern.accessor<bool, 2>();
  for (int64_t i = 0; i < l; ++i) {
    for (int64_t j = 0; j < l; ++j) {
      if (i < g || j < g) a[i][j] = true;  // global rows and columns
    }
  }
  for (int64_t start = g; start < l; start += b) {
    const int64_t end = std::min(start + b, l);
    for (int64_t i = start; i < end; ++i) {
      for (int64_t j = std::max(g, start - w); j < std::min(l, end + w); ++j) a[i][j] = true;
    }
  }
  return pattern;
}

// `mask` with every key outside the pattern excluded as well: math on it is what block_local
// computes.
AttentionMask with_pattern(AttentionMask mask, const torch::Tensor& pattern) {
  const auto outside = pattern.logical_not();
  mask.attn_mask(mask.attn_mask().defined() ? mask.attn_mask().logical_or(outside) : outside);
  return mask;
}

// q, k, v of a self-attention problem; non-contiguous ones are head views of one fused [B, L, 3,
// H, E] tensor, as the layer produces them.
Qkv self_attention_qkv(int64_t b, int64_t h, int64_t l, int64_t e, torch::Dtype dtype,
                       bool contiguous) {
  if (contiguous) return testing::random_qkv(b, h, l, l, e, dtype);
  const auto fused = torch::randn({b, l, 3, h, e}, torch::dtype(dtype)).permute({2, 0, 3, 1, 4});
  return {fused[0], fused[1], fused[2]};
}

AttentionResult run(const Qkv& t, const AttentionMask& mask, const std::string& backend,
                    const AttentionBackendOptions& options = {}, double dropout_p = 0.0) {
  auto p = testing::problem_of(t, mask);
  p.options = options;
  p.dropout_p = dropout_p;
  return scaled_dot_product_attention(p, backend);
}

// Every mask kind alone and all combined, for a self-attention problem of B × H × L
// (attention_test_util.h).
std::vector<std::pair<std::string, AttentionMask>> mask_cases(int64_t b, int64_t h, int64_t l,
                                                              torch::Dtype dtype) {
  return testing::all_mask_cases(b, h, l, l, dtype);
}

class BlockLocal : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(20261207); }
};

TEST_F(BlockLocal, PatternOfASmallCaseIsTheDocumentedOne) {
  // L = 6, b = 2, w = 1, g = 1: position 0 is global; blocks [1, 3), [3, 5), [5, 6).
  const auto expected = torch::tensor({1, 1, 1, 1, 1, 1,   //
                                       1, 1, 1, 1, 0, 0,   // block [1, 3): keys 1..3 (+ global)
                                       1, 1, 1, 1, 0, 0,   //
                                       1, 0, 1, 1, 1, 1,   // block [3, 5): keys 2..5
                                       1, 0, 1, 1, 1, 1,   //
                                       1, 0, 0, 0, 1, 1})  // block [5, 6): keys 4..5
                            .to(torch::kBool)
                            .view({6, 6});
  const auto pattern = block_local_pattern(6, pattern_options(2, 1, 1), torch::kCPU);
  EXPECT_EQ(pattern.scalar_type(), torch::kBool);
  EXPECT_TRUE(torch::equal(pattern, expected)) << pattern;
}

TEST_F(BlockLocal, PatternEqualsTheLoopConstruction) {
  // Includes L < b, L not a multiple of b, w > b, g >= L, L = 0 and 1.
  for (int64_t l : {0, 1, 2, 5, 7, 12, 33}) {
    for (int64_t b : {1, 2, 3, 4, 16, 40}) {
      for (int64_t w : {0, 1, 2, 5, 7}) {
        for (int64_t g : {0, 1, 3, 7, 40}) {
          const auto pattern = block_local_pattern(l, pattern_options(b, w, g), torch::kCPU);
          ASSERT_EQ(pattern.sizes(), (std::vector<int64_t>{l, l}));
          EXPECT_TRUE(torch::equal(pattern, loop_pattern(l, b, w, g))) << describe(l, b, w, g);
        }
      }
    }
  }
  // Every row has at least its own position: the pattern alone never empties a row.
  const auto pattern = block_local_pattern(33, pattern_options(3, 0, 1), torch::kCPU);
  EXPECT_TRUE(pattern.diagonal().all().item<bool>());
}

// block_local == math(attn_mask |= ~pattern) over the grid of sizes and every mask kind.
void expect_equals_math_over_the_grid(torch::Dtype dtype, double tolerance) {
  const int64_t heads = 2, head_dim = 36;
  int64_t config = 0;
  for (int64_t l : {1, 7, 33}) {
    for (int64_t b : {1, 3, 16, 40}) {
      for (int64_t w : {0, 2, 5}) {
        for (int64_t g : {0, 1, 3}) {
          for (int64_t batch : {1, 5}) {
            const bool contiguous = (config++ % 2) == 0;
            const auto t = self_attention_qkv(batch, heads, l, head_dim, dtype, contiguous);
            const auto options = pattern_options(b, w, g);
            const auto pattern = block_local_pattern(l, options, torch::kCPU);
            for (const auto& [name, mask] : mask_cases(batch, heads, l, dtype)) {
              SCOPED_TRACE(describe(l, b, w, g) + " B=" + std::to_string(batch) + " mask " + name +
                           (contiguous ? "" : " (strided)"));
              const auto ours = run(t, mask, "block_local", options).output;
              const auto math = run(t, with_pattern(mask, pattern), "math").output;
              ASSERT_EQ(ours.sizes(), math.sizes());
              ASSERT_EQ(ours.scalar_type(), dtype);
              ASSERT_FALSE(ours.isnan().any().item<bool>());
              EXPECT_LE(max_abs_diff(ours, math), tolerance);
            }
          }
        }
      }
    }
  }
}

TEST_F(BlockLocal, EqualsMathWithTheExplicitPatternInFloat32) {
  expect_equals_math_over_the_grid(torch::kFloat, 1e-5);
}

TEST_F(BlockLocal, EqualsMathWithTheExplicitPatternInFloat64) {
  expect_equals_math_over_the_grid(torch::kDouble, 1e-10);
}

TEST_F(BlockLocal, Bfloat16StaysAsCloseToFloat64AsMath) {
  const int64_t batch = 5, heads = 2, l = 33, head_dim = 36;
  for (const auto& [b, w, g] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {3, 2, 1}, {16, 0, 0}, {1, 5, 3}, {40, 2, 1}}) {
    const auto options = pattern_options(b, w, g);
    const auto pattern = block_local_pattern(l, options, torch::kCPU);
    const auto t = self_attention_qkv(batch, heads, l, head_dim, torch::kBFloat16, false);
    const Qkv wide{t.q.to(torch::kDouble), t.k.to(torch::kDouble), t.v.to(torch::kDouble)};
    for (const auto& [name, mask] : mask_cases(batch, heads, l, torch::kBFloat16)) {
      SCOPED_TRACE(describe(l, b, w, g) + " mask " + name);
      const auto explicit_mask = with_pattern(mask, pattern);
      // The float64 reference from the same bf16 inputs (and bias).
      const auto reference = run(wide, explicit_mask, "math").output;
      const auto ours = run(t, mask, "block_local", options).output;
      const auto math = run(t, explicit_mask, "math").output;
      EXPECT_EQ(ours.scalar_type(), torch::kBFloat16);
      const double our_error = max_abs_diff(ours, reference);
      // FlashAttention's rule against LibTorch's own path at the same precision; the floor covers
      // cases where math happens to round almost exactly (a few bf16 units on outputs ~1).
      EXPECT_LE(our_error, std::max(2 * max_abs_diff(math, reference), 1.6e-2));
      EXPECT_LE(our_error, 4e-2);
    }
  }
}

TEST_F(BlockLocal, LongSequenceEqualsMath) {
  // Many blocks: 2 global tokens, then 2049 = 32·64 + 1 positions (a last block of one).
  const int64_t l = 2051;
  const auto options = pattern_options(64, 16, 2);
  const auto t = self_attention_qkv(2, 2, l, 36, torch::kFloat, false);
  const auto pattern = block_local_pattern(l, options, torch::kCPU);
  for (const bool causal : {false, true}) {
    const auto mask = AttentionMask().key_lengths(torch::tensor({l, 1500L})).causal(causal);
    const auto ours = run(t, mask, "block_local", options).output;
    const auto math = run(t, with_pattern(mask, pattern), "math").output;
    EXPECT_LE(max_abs_diff(ours, math), 1e-5) << (causal ? "causal" : "");
  }
}

// Gradients of q, k, v (one fused leaf, strided views) and of the bias, block_local against math.
TEST_F(BlockLocal, GradientsEqualMathsWithTheExplicitPattern) {
  const int64_t batch = 5, heads = 2, head_dim = 36;
  for (const auto& [l, b, w, g] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{{33, 3, 2, 1},
                                                                   {7, 16, 0, 0},
                                                                   {33, 1, 5, 3},
                                                                   {7, 3, 0, 3},
                                                                   {33, 16, 5, 0},
                                                                   {1, 3, 2, 1}}) {
    const auto options = pattern_options(b, w, g);
    const auto pattern = block_local_pattern(l, options, torch::kCPU);
    const auto lengths =
        torch::randint(1, l + 1, {batch}, torch::kLong).index_fill_(0, torch::tensor({1L}), 0);
    for (const bool full_bias : {true, false}) {
      SCOPED_TRACE(describe(l, b, w, g) +
                   (full_bias ? " bias [B, H, L, L]" : " bias [1, H, L, L]"));
      const auto fused0 = torch::randn({batch, l, 3, heads, head_dim}, torch::kDouble);
      const auto bias0 = torch::randn({full_bias ? batch : 1, heads, l, l}, torch::kDouble);
      const auto weights = torch::randn({batch, heads, l, head_dim}, torch::kDouble);
      const auto attn = torch::rand({l, l}) < 0.3;
      auto gradients = [&](const std::string& backend) {
        auto fused = fused0.clone().requires_grad_();
        auto bias = bias0.clone().requires_grad_();
        const auto heads_view = fused.permute({2, 0, 3, 1, 4});
        const Qkv t{heads_view[0], heads_view[1], heads_view[2]};
        // Causal with one bias shape only: it would hide keys to the right of the blocks.
        auto mask =
            AttentionMask().key_lengths(lengths).attn_mask(attn).bias(bias).causal(full_bias);
        if (backend == "math") mask = with_pattern(mask, pattern);
        (run(t, mask, backend, options).output * weights).sum().backward();
        return std::make_pair(fused.grad(), bias.grad());
      };
      const auto [ours_qkv, ours_bias] = gradients("block_local");
      const auto [math_qkv, math_bias] = gradients("math");
      ASSERT_TRUE(torch::isfinite(ours_qkv).all().item<bool>());
      const char* names[] = {"q", "k", "v"};
      for (int64_t i = 0; i < 3; ++i) {
        EXPECT_LE(max_abs_diff(ours_qkv.select(2, i), math_qkv.select(2, i)), 1e-10) << names[i];
      }
      EXPECT_LE(max_abs_diff(ours_bias, math_bias), 1e-10) << "bias";
      // Bias entries outside the pattern get no gradient.
      EXPECT_EQ(ours_bias.masked_select(pattern.logical_not().expand_as(ours_bias))
                    .abs()
                    .sum()
                    .item<double>(),
                0.0);
    }
  }
}

TEST_F(BlockLocal, FullyMaskedRowsGiveZerosAndFiniteZeroGradients) {
  const int64_t batch = 3, heads = 2, l = 13, head_dim = 36;
  const auto options = pattern_options(4, 1, 1);
  const auto pattern = block_local_pattern(l, options, torch::kCPU);
  // Query 9 is denied exactly the keys of its pattern: keys remain for it under the user mask
  // alone (math without the pattern would average over them), none under the pattern.
  auto attn = torch::zeros({l, l}, torch::kBool);
  attn[9] = pattern[9];
  ASSERT_FALSE(attn[9].all().item<bool>());
  const auto mask = AttentionMask().attn_mask(attn).key_lengths(torch::tensor({l, 0L, 5L}));
  auto q = torch::randn({batch, heads, l, head_dim}).requires_grad_();
  auto k = torch::randn({batch, heads, l, head_dim}).requires_grad_();
  auto v = torch::randn({batch, heads, l, head_dim}).requires_grad_();
  const auto out = run({q, k, v}, mask, "block_local", options).output;
  EXPECT_EQ(out.select(2, 9).abs().max().item<double>(), 0.0);  // query 9, every batch entry
  EXPECT_EQ(out[1].abs().max().item<double>(), 0.0);            // batch entry 1 has no keys
  EXPECT_GT(out[0].select(1, 8).abs().max().item<double>(), 0.0);
  EXPECT_LE(max_abs_diff(out, run({q, k, v}, with_pattern(mask, pattern), "math").output), 1e-5);
  out.sum().backward();
  for (const auto& grad : {q.grad(), k.grad(), v.grad()}) {
    EXPECT_TRUE(torch::isfinite(grad).all().item<bool>());
  }
  EXPECT_EQ(q.grad().select(2, 9).abs().max().item<double>(), 0.0);
  EXPECT_EQ(q.grad()[1].abs().max().item<double>(), 0.0);
  EXPECT_EQ(k.grad()[1].abs().max().item<double>(), 0.0);
  EXPECT_EQ(v.grad()[1].abs().max().item<double>(), 0.0);
}

TEST_F(BlockLocal, DropoutAveragesToMathWithThePattern) {
  // Dropout rescales the kept probabilities by 1/(1-p), so the mean over many draws tends to the
  // output without dropout: math's under the explicit pattern. The draws are the entries of one
  // batch of identical problems (stride-0 views of one).
  const int64_t l = 11, draws = 4000;
  const auto options = pattern_options(3, 1, 1);
  const auto one = self_attention_qkv(1, 1, l, 8, torch::kDouble, true);
  const auto mask = AttentionMask().key_lengths(torch::tensor({9L}));
  const auto plain =
      run(one, with_pattern(mask, block_local_pattern(l, options, torch::kCPU)), "math").output;
  const Qkv many{one.q.expand({draws, 1, l, 8}), one.k.expand({draws, 1, l, 8}),
                 one.v.expand({draws, 1, l, 8})};
  const auto many_mask = AttentionMask().key_lengths(torch::full({draws}, 9L, torch::kLong));
  const auto out = run(many, many_mask, "block_local", options, /*dropout_p=*/0.3).output;
  ASSERT_TRUE(torch::isfinite(out).all().item<bool>());
  EXPECT_GT(max_abs_diff(out[0], plain[0]), 1e-3);  // some probability was dropped
  const double deviation = max_abs_diff(out.mean(0, /*keepdim=*/true), plain);
  EXPECT_LE(deviation, 0.05);
}

TEST_F(BlockLocal, ErrorsNameTheBackendAndTheNumbers) {
  const auto cross = testing::random_qkv(1, 2, 5, 7, 8);
  const auto message = error_of([&] { run(cross, {}, "block_local"); });
  EXPECT_NE(message.find("block_local"), std::string::npos) << message;
  EXPECT_NE(message.find("self-attention"), std::string::npos) << message;
  EXPECT_NE(message.find("L = 5, S = 7"), std::string::npos) << message;

  const auto t = testing::random_qkv(1, 2, 5, 5, 8);
  auto p = testing::problem_of(t);
  p.need_weights = true;
  const auto weights = error_of([&] { scaled_dot_product_attention(p, "block_local"); });
  EXPECT_NE(weights.find("block_local"), std::string::npos) << weights;
  EXPECT_NE(weights.find("need_weights"), std::string::npos) << weights;

  const auto bad_block =
      error_of([&] { block_local_pattern(4, pattern_options(0, 0, 0), torch::kCPU); });
  EXPECT_NE(bad_block.find("block_size must be >= 1, got 0"), std::string::npos) << bad_block;
  const auto bad_length =
      error_of([&] { block_local_pattern(-1, pattern_options(2, 0, 0), torch::kCPU); });
  EXPECT_NE(bad_length.find("length must be >= 0, got -1"), std::string::npos) << bad_length;

  // A restricted pattern: never chosen by "auto", only by name.
  p.need_weights = false;
  const auto& backend = select_attention_backend("block_local", p);
  EXPECT_FALSE(backend.exact());
  EXPECT_EQ(backend.priority(), -10);
  EXPECT_NE(select_attention_backend("auto", p).name(), "block_local");
}

TEST_F(BlockLocal, LayerEqualsTheMathLayerGivenThePattern) {
  const int64_t l = 13;  // 1 global token + 12 = 3 blocks of 4
  const auto backend_options = AttentionBackendOptions().block_size(4).global_tokens(1);
  MultiheadAttention local(
      MultiheadAttentionOptions(72, 2).backend("block_local").backend_options(backend_options));
  auto math = std::dynamic_pointer_cast<MultiheadAttentionImpl>(local->clone());
  math->set_backend("math");
  for (const int64_t length : {l, 14L}) {  // 14: the last block is partial
    SCOPED_TRACE("L = " + std::to_string(length));
    const auto p = block_local_pattern(length, backend_options, torch::kCPU);
    auto x0 = torch::randn({length, 3, 72}).transpose(0, 1);  // [B, L, D], non-contiguous
    const auto mask = AttentionMask().key_lengths(torch::tensor({length, 6L, 0L}));
    auto x_local = x0.detach().clone().requires_grad_();
    auto x_math = x0.detach().clone().requires_grad_();
    const auto a = local(x_local, mask);
    const auto b = math->forward(x_math, with_pattern(mask, p));
    EXPECT_EQ(a.sizes(), (std::vector<int64_t>{3, length, 72}));
    EXPECT_LE(max_abs_diff(a, b), 1e-5);
    a.sum().backward();
    b.sum().backward();
    EXPECT_LE(max_abs_diff(x_local.grad(), x_math.grad()), 1e-5);
    EXPECT_LE(max_abs_diff(local->qkv->weight.grad(), math->qkv->weight.grad()), 1e-4);
    local->zero_grad();
    math->zero_grad();
  }
}

TEST_F(BlockLocal, EqualsMathOnTheGpu_CUDA) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  const int64_t batch = 5, heads = 2, l = 33, head_dim = 36;
  for (const auto& [b, w, g] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {3, 2, 1}, {16, 0, 0}, {1, 5, 3}, {40, 2, 1}}) {
    const auto options = pattern_options(b, w, g);
    const auto pattern = block_local_pattern(l, options, torch::kCUDA);
    const auto cpu = self_attention_qkv(batch, heads, l, head_dim, torch::kFloat, false);
    for (const auto dtype : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
      const Qkv t{cpu.q.to(torch::kCUDA, dtype), cpu.k.to(torch::kCUDA, dtype),
                  cpu.v.to(torch::kCUDA, dtype)};
      const Qkv wide{t.q.cpu().to(torch::kDouble), t.k.cpu().to(torch::kDouble),
                     t.v.cpu().to(torch::kDouble)};
      for (const auto& [name, mask] : mask_cases(batch, heads, l, torch::kFloat)) {
        SCOPED_TRACE(describe(l, b, w, g) + " mask " + name + " " +
                     std::string(c10::toString(dtype)));
        // Masks stay on the CPU for the reference and move to the GPU with the bias in `dtype`.
        auto on_gpu = AttentionMask().causal(mask.causal(), mask.causal_alignment());
        if (mask.key_lengths().defined()) on_gpu.key_lengths(mask.key_lengths().cuda());
        if (mask.key_padding_mask().defined()) {
          on_gpu.key_padding_mask(mask.key_padding_mask().cuda());
        }
        if (mask.attn_mask().defined()) on_gpu.attn_mask(mask.attn_mask().cuda());
        if (mask.bias().defined()) on_gpu.bias(mask.bias().to(torch::kCUDA, dtype));
        auto wide_mask = with_pattern(mask, pattern.cpu());
        if (mask.bias().defined()) wide_mask.bias(mask.bias().to(dtype).to(torch::kDouble));
        const auto reference = run(wide, wide_mask, "math").output;
        const auto ours = run(t, on_gpu, "block_local", options).output;
        const auto math = run(t, with_pattern(on_gpu, pattern), "math").output;
        ASSERT_TRUE(ours.is_cuda());
        const double our_error = max_abs_diff(ours.cpu(), reference);
        const double floor = dtype == torch::kFloat ? 1e-5 : dtype == torch::kHalf ? 4e-3 : 1.6e-2;
        EXPECT_LE(our_error, std::max(2 * max_abs_diff(math.cpu(), reference), floor));
      }
    }
  }
}

}  // namespace test_attention_block_local
}  // namespace attnzoo
