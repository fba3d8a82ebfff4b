// The `chunked` backend (online-softmax tiles, FlashAttention-2 style recomputing backward) against
// the `math` reference: every mask kind alone and combined, awkward sizes and chunk sizes,
// gradients of q, k, v and the bias, fully masked rows, bf16, its refusals, and its peak memory
// measured through c10's CPU allocator.
#include "attention_test_util.h"

#include "tools/bench/memory_tracking.h"

#include <cmath>
#include <limits>

namespace attnzoo {
namespace test_attention_chunked {

using testing::error_of;
using testing::max_abs_diff;
using testing::Qkv;
using testing::random_qkv;

struct Size {
  int64_t b, h, l, s, e;
};

std::string describe(const Size& z, int64_t chunk) {
  return "B=" + std::to_string(z.b) + " H=" + std::to_string(z.h) + " L=" + std::to_string(z.l) +
         " S=" + std::to_string(z.s) + " E=" + std::to_string(z.e) +
         " chunk=" + std::to_string(chunk);
}

// L or S not multiples of the chunks below, L > S and L < S, L = 1, head_dim 36 and 40, batch 7.
const std::vector<Size> kSizes = {{1, 1, 1, 1, 8},    {2, 3, 5, 7, 36}, {7, 2, 16, 16, 40},
                                  {3, 4, 33, 17, 64}, {1, 2, 1, 9, 16}, {2, 2, 13, 30, 8}};
// 1 (one key per tile), sizes that do not divide the lengths, and one larger than every length.
const std::vector<int64_t> kChunks = {1, 4, 7, 256};

AttentionResult run(const Qkv& t, const AttentionMask& mask, const std::string& backend,
                    int64_t chunk = 256, bool need_weights = false, double dropout_p = 0.0) {
  auto p = testing::problem_of(t, mask);
  p.need_weights = need_weights;
  p.dropout_p = dropout_p;
  p.options.chunk_size(chunk);
  return scaled_dot_product_attention(p, backend);
}

std::vector<std::pair<std::string, AttentionMask>> mask_cases(const Size& z,
                                                              torch::Dtype dtype = torch::kFloat) {
  return testing::all_mask_cases(z.b, z.h, z.l, z.s, dtype);
}

class Chunked : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(20261130); }
};

TEST_F(Chunked, MatchesMathForEveryMaskKindInFloat32) {
  for (const auto& z : kSizes) {
    const auto t = random_qkv(z.b, z.h, z.l, z.s, z.e);
    for (const auto& [name, mask] : mask_cases(z)) {
      const auto math = run(t, mask, "math").output;
      for (const int64_t chunk : kChunks) {
        SCOPED_TRACE(describe(z, chunk) + ", mask " + name);
        const auto out = run(t, mask, "chunked", chunk).output;
        ASSERT_EQ(out.sizes(), math.sizes());
        EXPECT_EQ(out.scalar_type(), torch::kFloat);
        EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
        EXPECT_LE(max_abs_diff(out, math), 1e-5);
      }
    }
  }
}

TEST_F(Chunked, MatchesMathForEveryMaskKindInFloat64) {
  for (const auto& z : kSizes) {
    const auto t = random_qkv(z.b, z.h, z.l, z.s, z.e, torch::kDouble);
    for (const auto& [name, mask] : mask_cases(z, torch::kDouble)) {
      const auto math = run(t, mask, "math").output;
      for (const int64_t chunk : kChunks) {
        SCOPED_TRACE(describe(z, chunk) + ", mask " + name);
        EXPECT_LE(max_abs_diff(run(t, mask, "chunked", chunk).output, math), 1e-10);
      }
    }
  }
}

TEST_F(Chunked, NonContiguousInputsAndValueWidthDifferentFromHeadDim) {
  // q, k, v as strided views of fused projections ([B, L, 3, H, E] -> [B, H, L, E]), and a value
  // of another width (Ev = 24 vs E = 40) taken as a transposed view.
  const int64_t b = 3, h = 2, l = 11, s = 9, e = 40, ev = 24;
  const auto fused_q = torch::randn({b, l, 3, h, e});
  const auto fused_kv = torch::randn({b, s, 2, h, e});
  Qkv t{fused_q.select(2, 1).transpose(1, 2), fused_kv.select(2, 0).transpose(1, 2),
        torch::randn({b, h, ev, s}).transpose(2, 3)};
  ASSERT_FALSE(t.q.is_contiguous());
  ASSERT_FALSE(t.k.is_contiguous());
  ASSERT_FALSE(t.v.is_contiguous());
  const auto mask = AttentionMask()
                        .key_lengths(torch::tensor({9L, 4L, 0L}))
                        .bias(torch::randn({h, s, l}).transpose(1, 2))  // a strided bias too
                        .causal(true, CausalAlignment::kBottomRight);
  const auto math = run(t, mask, "math").output;
  for (const int64_t chunk : kChunks) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const auto out = run(t, mask, "chunked", chunk).output;
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{b, h, l, ev}));
    EXPECT_LE(max_abs_diff(out, math), 1e-5);
  }
}

TEST_F(Chunked, SkippedKeyTilesPastTheLongestSequenceChangeNothing) {
  // Short key_lengths in a long key sequence: the key tiles past 5 are skipped outright.
  const auto t = random_qkv(2, 2, 6, 40, 8, torch::kDouble);
  const auto mask = AttentionMask().key_lengths(torch::tensor({3L, 5L}));
  const auto math = run(t, mask, "math").output;
  for (const int64_t chunk : {1L, 2L, 4L, 5L, 64L}) {
    EXPECT_LE(max_abs_diff(run(t, mask, "chunked", chunk).output, math), 1e-12) << chunk;
  }
}

TEST_F(Chunked, LayerWithChunkedBackendEqualsMathLayer) {
  auto options = MultiheadAttentionOptions(48, 3).head_dim(40).backend("math");
  MultiheadAttention math(options);
  auto chunked = std::dynamic_pointer_cast<MultiheadAttentionImpl>(math->clone());
  chunked->options.backend_options(AttentionBackendOptions().chunk_size(3));
  chunked->set_backend("chunked");
  const auto x = torch::randn({11, 7, 48}).transpose(0, 1);  // non-contiguous [B, L, D]
  const auto mask = AttentionMask().key_lengths(torch::tensor({11L, 3L, 0L, 5L, 11L, 1L, 9L}));
  EXPECT_LE(max_abs_diff(math(x, mask), chunked->forward(x, mask)), 1e-5);
}

// Gradients of q, k, v and the bias from one backend, for the same upstream gradient.
std::vector<torch::Tensor> backend_grads(const Qkv& t, const torch::Tensor& bias,
                                         AttentionMask mask, const std::string& backend,
                                         const torch::Tensor& upstream, int64_t chunk = 256) {
  auto q = t.q.detach().clone().requires_grad_();
  auto k = t.k.detach().clone().requires_grad_();
  auto v = t.v.detach().clone().requires_grad_();
  auto b = bias.detach().clone().requires_grad_();
  const auto out = run({q, k, v}, mask.bias(b), backend, chunk).output;
  (out * upstream).sum().backward();
  return {q.grad(), k.grad(), v.grad(), b.grad()};
}

void expect_gradients_match_math(torch::Dtype dtype, double tolerance) {
  const char* names[] = {"q", "k", "v", "bias"};
  for (const Size& z : {Size{3, 2, 7, 9, 36}, Size{2, 3, 10, 6, 8}, Size{1, 2, 1, 5, 16}}) {
    const auto t = random_qkv(z.b, z.h, z.l, z.s, z.e, dtype);
    const auto upstream = torch::randn({z.b, z.h, z.l, z.e}, dtype);
    auto attn = torch::rand({z.l, z.s}) < 0.3;
    attn[z.l / 2].fill_(true);  // a fully masked row
    auto lengths = torch::randint(1, z.s + 1, {z.b}, torch::kLong);
    lengths[0] = 0;  // a batch entry with no key
    const auto f = torch::TensorOptions().dtype(dtype);
    // Bias shapes broadcast over different dims, so that d(bias) is reduced over each of them.
    const std::vector<std::pair<std::string, torch::Tensor>> biases = {
        {"bhls", torch::randn({z.b, z.h, z.l, z.s}, f)},
        {"1hls", torch::randn({1, z.h, z.l, z.s}, f)},
        {"ls", torch::randn({z.l, z.s}, f)},
        {"b11s", torch::randn({z.b, 1, 1, z.s}, f)},
        {"h1s", torch::randn({z.h, 1, z.s}, f)},
    };
    const std::vector<std::pair<std::string, AttentionMask>> masks = {
        {"bias only", AttentionMask()},
        {"lengths with a zero", AttentionMask().key_lengths(lengths)},
        {"attn_mask with an empty row", AttentionMask().attn_mask(attn)},
        {"causal top-left", AttentionMask().causal()},
        {"causal bottom-right", AttentionMask().causal(true, CausalAlignment::kBottomRight)},
        {"everything", AttentionMask().key_lengths(lengths).attn_mask(attn).causal(
                           true, CausalAlignment::kBottomRight)},
    };
    for (const auto& [bias_name, bias] : biases) {
      for (const auto& [mask_name, mask] : masks) {
        const auto math = backend_grads(t, bias, mask, "math", upstream);
        for (const int64_t chunk : {1L, 4L, 256L}) {
          SCOPED_TRACE(describe(z, chunk) + ", bias " + bias_name + ", " + mask_name);
          const auto chunked = backend_grads(t, bias, mask, "chunked", upstream, chunk);
          for (size_t i = 0; i < math.size(); ++i) {
            ASSERT_TRUE(chunked[i].defined()) << names[i];
            EXPECT_EQ(chunked[i].sizes(), math[i].sizes()) << names[i];
            EXPECT_EQ(chunked[i].scalar_type(), dtype) << names[i];
            EXPECT_TRUE(torch::isfinite(chunked[i]).all().item<bool>()) << names[i];
            EXPECT_LE(max_abs_diff(chunked[i], math[i]), tolerance) << names[i];
          }
        }
      }
    }
  }
}

TEST_F(Chunked, GradientsOfQKVAndBiasEqualMathInFloat64) {
  expect_gradients_match_math(torch::kDouble, 1e-8);
}

TEST_F(Chunked, GradientsOfQKVAndBiasEqualMathInFloat32) {
  expect_gradients_match_math(torch::kFloat, 1e-5);
}

TEST_F(Chunked, GradientsFlowWithoutABiasAndIntoNonContiguousInputs) {
  const auto fused = torch::randn({2, 8, 3, 2, 16}, torch::kDouble);  // [B, L, 3, H, E]
  auto leaf = fused.clone().requires_grad_();
  const auto upstream = torch::randn({2, 2, 8, 16}, torch::kDouble);
  const auto mask = AttentionMask().key_padding_mask(torch::rand({2, 8}) < 0.3).causal();
  std::vector<torch::Tensor> grads;
  for (const char* backend : {"math", "chunked"}) {
    if (leaf.grad().defined()) leaf.mutable_grad().zero_();
    const Qkv t{leaf.select(2, 0).transpose(1, 2), leaf.select(2, 1).transpose(1, 2),
                leaf.select(2, 2).transpose(1, 2)};
    (run(t, mask, backend, /*chunk=*/3).output * upstream).sum().backward();
    grads.push_back(leaf.grad().clone());
  }
  EXPECT_GT(grads[0].abs().max().item<double>(), 0.0);
  EXPECT_LE(max_abs_diff(grads[0], grads[1]), 1e-10);
}

TEST_F(Chunked, FullyMaskedRowsGiveZerosAndFiniteZeroGradients) {
  auto q = torch::randn({2, 2, 4, 8}).requires_grad_();
  auto k = torch::randn({2, 2, 5, 8}).requires_grad_();
  auto v = torch::randn({2, 2, 5, 8}).requires_grad_();
  auto attn = torch::zeros({4, 5}, torch::kBool);
  attn[1].fill_(true);  // query 1 excluded from every key
  const auto mask = AttentionMask()
                        .attn_mask(attn)
                        .key_lengths(torch::tensor({5L, 0L}))  // batch 1 has no keys
                        .bias(torch::randn({4, 5}));           // a bias that needs no gradient
  for (const int64_t chunk : {1L, 2L, 256L}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    for (auto* t : {&q, &k, &v}) {
      if (t->grad().defined()) t->mutable_grad().zero_();
    }
    const auto out = run({q, k, v}, mask, "chunked", chunk).output;
    EXPECT_EQ(out.select(2, 1).abs().max().item<double>(), 0.0);  // query 1, every batch
    EXPECT_EQ(out[1].abs().max().item<double>(), 0.0);            // batch 1
    EXPECT_GT(out[0].select(1, 0).abs().max().item<double>(), 0.0);
    out.sum().backward();
    for (auto* t : {&q, &k, &v}) EXPECT_TRUE(torch::isfinite(t->grad()).all().item<bool>());
    EXPECT_EQ(q.grad().select(2, 1).abs().max().item<double>(), 0.0);
    EXPECT_EQ(q.grad()[1].abs().max().item<double>(), 0.0);
    EXPECT_EQ(k.grad()[1].abs().max().item<double>(), 0.0);
    EXPECT_EQ(v.grad()[1].abs().max().item<double>(), 0.0);
    EXPECT_GT(v.grad()[0].abs().max().item<double>(), 0.0);
  }
}

TEST_F(Chunked, Bfloat16StaysCloseToFloat64AndBackpropagates) {
  for (const auto& z : kSizes) {
    const auto t = random_qkv(z.b, z.h, z.l, z.s, z.e, torch::kBFloat16);
    const Qkv t64{t.q.to(torch::kDouble), t.k.to(torch::kDouble), t.v.to(torch::kDouble)};
    for (const auto& [name, mask] : mask_cases(z)) {
      SCOPED_TRACE(describe(z, 4) + ", mask " + name);
      const auto reference = run(t64, mask, "math").output;  // the same bf16 inputs, in float64
      const auto out = run(t, mask, "chunked", 4).output;
      EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
      // bf16 keeps 8 bits of mantissa: a few units of 2^-8 on outputs of magnitude ~1.
      EXPECT_LE(max_abs_diff(out, reference), 4e-2);
    }
  }
  const auto t = random_qkv(2, 2, 9, 7, 16, torch::kBFloat16);
  const auto bias = torch::randn({2, 9, 7});
  const auto upstream = torch::randn({2, 2, 9, 16}, torch::kBFloat16);
  const auto mask = AttentionMask().key_lengths(torch::tensor({7L, 0L})).causal();
  const Qkv t64{t.q.to(torch::kDouble), t.k.to(torch::kDouble), t.v.to(torch::kDouble)};
  const auto math =
      backend_grads(t64, bias.to(torch::kDouble), mask, "math", upstream.to(torch::kDouble));
  const auto chunked = backend_grads(t, bias, mask, "chunked", upstream, 4);
  for (size_t i = 0; i < math.size(); ++i) {
    SCOPED_TRACE("gradient " + std::to_string(i));
    EXPECT_EQ(chunked[i].scalar_type(), i < 3 ? torch::kBFloat16 : torch::kFloat);
    EXPECT_LE(max_abs_diff(chunked[i], math[i]), 0.1 * (1.0 + math[i].abs().max().item<double>()));
  }
}

TEST_F(Chunked, RefusesWeightsAndDropoutNamingTheBackend) {
  const auto t = random_qkv(1, 1, 3, 3, 4);
  const auto weights = error_of([&] { run(t, {}, "chunked", 256, /*need_weights=*/true); });
  EXPECT_NE(weights.find("'chunked'"), std::string::npos) << weights;
  EXPECT_NE(weights.find("need_weights"), std::string::npos) << weights;
  const auto dropout = error_of([&] { run(t, {}, "chunked", 256, false, /*dropout_p=*/0.1); });
  EXPECT_NE(dropout.find("'chunked'"), std::string::npos) << dropout;
  EXPECT_NE(dropout.find("dropout"), std::string::npos) << dropout;
}

TEST_F(Chunked, IsExactAndRanksBetweenSdpaAndMath) {
  const auto p = testing::problem_of(random_qkv(1, 1, 2, 2, 4));
  const auto& chunked = select_attention_backend("chunked", p);
  EXPECT_EQ(chunked.name(), "chunked");
  EXPECT_TRUE(chunked.exact());
  EXPECT_EQ(chunked.priority(), 5);
  EXPECT_GT(chunked.priority(), select_attention_backend("math", p).priority());
  EXPECT_LT(chunked.priority(), select_attention_backend("sdpa", p).priority());
}

TEST_F(Chunked, DoubleBackwardIsRefusedWithAMessage) {
  auto q = torch::randn({1, 1, 3, 4}, torch::kDouble).requires_grad_();
  const auto t = random_qkv(1, 1, 3, 3, 4, torch::kDouble);
  const auto out = run({q, t.k, t.v}, {}, "chunked", 2).output;
  const auto message = error_of([&] {
    torch::autograd::grad({out.pow(2).sum()}, {q}, {}, /*retain_graph=*/true,
                          /*create_graph=*/true);
  });
  EXPECT_NE(message.find("double backward"), std::string::npos) << message;
}

// Peak memory ----------------------------------------------------------------------------------

// Peak bytes newly allocated while computing attention (and its backward when `backward`).
int64_t peak_bytes(const Qkv& t, const AttentionMask& mask, const std::string& backend,
                   bool backward) {
  const auto q = t.q.detach().requires_grad_(backward);
  const auto k = t.k.detach().requires_grad_(backward);
  const auto v = t.v.detach().requires_grad_(backward);
  install_cpu_memory_tracking();
  PeakMemoryScope scope(torch::kCPU);
  {
    const auto out = run({q, k, v}, mask, backend, /*chunk=*/256).output;
    if (backward) out.sum().backward();
  }
  return scope.peak_above_start();
}

TEST_F(Chunked, PeakMemoryStaysFarBelowTheScoreMatrix) {
  // One head of 4096 × 4096: a float score matrix alone is 64 MiB; q, k, v are 256 KiB each.
  const int64_t n = 4096;
  const int64_t score_bytes = n * n * static_cast<int64_t>(sizeof(float));
  const auto t = random_qkv(1, 1, n, n, 16);
  const auto mask = AttentionMask().key_lengths(torch::tensor({n - 100})).causal();
  for (const bool backward : {false, true}) {
    SCOPED_TRACE(backward ? "forward and backward" : "forward");
    // The harness sees the score matrix when there is one: math's peak holds at least it.
    const auto math = peak_bytes(t, mask, "math", backward);
    EXPECT_GE(math, score_bytes);
    // Tiles of 256 × 256 (256 KiB) and O(N·E) outputs, statistics and gradients.
    const auto chunked = peak_bytes(t, mask, "chunked", backward);
    const std::string stage = backward ? "_forward_backward" : "_forward";
    RecordProperty("math_peak_bytes" + stage, std::to_string(math));
    RecordProperty("chunked_peak_bytes" + stage, std::to_string(chunked));
    EXPECT_LE(chunked, score_bytes / 16) << "math peak " << math;
    EXPECT_GT(chunked, 0);
  }
}

}  // namespace test_attention_chunked
}  // namespace attnzoo
