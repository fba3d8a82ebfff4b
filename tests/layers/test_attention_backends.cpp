// The backends against each other and against an explicit float64 loop: every mask kind, biases,
// fully masked rows, awkward sizes and dtypes.
#include "attention_test_util.h"

#include <attnzoo/layers/attention_block_local.h>

#include <gmock/gmock.h>

#include <cmath>
#include <limits>

namespace attnzoo {
namespace test_attention_backends {

using testing::max_abs_diff;
using testing::Qkv;
using testing::random_qkv;
using testing::run_backend;

struct Size {
  int64_t b, h, l, s, e;
};

std::string describe(const Size& z) {
  return "B=" + std::to_string(z.b) + " H=" + std::to_string(z.h) + " L=" + std::to_string(z.l) +
         " S=" + std::to_string(z.s) + " E=" + std::to_string(z.e);
}

const std::vector<Size> kSizes = {
    {1, 1, 1, 1, 8}, {2, 3, 5, 7, 36}, {7, 2, 16, 16, 40}, {3, 4, 33, 17, 64}, {1, 2, 1, 9, 16}};

// Every mask kind, alone and combined (attention_test_util.h).
std::vector<std::pair<std::string, AttentionMask>> mask_cases(const Size& z) {
  return testing::all_mask_cases(z.b, z.h, z.l, z.s);
}

// softmax(q·kᵀ·scale + bias) v over the allowed keys, row by row in float64 with plain loops; a row
// with no allowed key gives zeros. Independent of the backends' tensor formulation.
torch::Tensor loop_reference(const Qkv& t, const AttentionMask& mask) {
  const auto q = t.q.to(torch::kDouble), k = t.k.to(torch::kDouble), v = t.v.to(torch::kDouble);
  const int64_t b = q.size(0), h = q.size(1), l = q.size(2), s = k.size(2), ev = v.size(3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  auto allowed = mask.allowed(l, s, torch::kCPU);
  const auto allowed_full = allowed ? allowed->expand({b, h, l, s}).contiguous()
                                    : torch::ones({b, h, l, s}, torch::kBool);
  const auto bias_full = mask.bias().defined()
                             ? mask.bias().to(torch::kDouble).expand({b, h, l, s}).contiguous()
                             : torch::zeros({b, h, l, s}, torch::kDouble);
  auto out = torch::zeros({b, h, l, ev}, torch::kDouble);
  auto qa = q.accessor<double, 4>(), ka = k.accessor<double, 4>(), va = v.accessor<double, 4>();
  auto oa = out.accessor<double, 4>();
  auto ma = allowed_full.accessor<bool, 4>();
  auto ba = bias_full.accessor<double, 4>();
  std::vector<double> score(s);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      for (int64_t li = 0; li < l; ++li) {
        double top = -std::numeric_limits<double>::infinity();
        for (int64_t si = 0; si < s; ++si) {
          if (!ma[bi][hi][li][si]) continue;
          double dot = 0.0;
          for (int64_t ei = 0; ei < q.size(3); ++ei) dot += qa[bi][hi][li][ei] * ka[bi][hi][si][ei];
          score[si] = dot * scale + ba[bi][hi][li][si];
          top = std::max(top, score[si]);
        }
        if (top == -std::numeric_limits<double>::infinity()) continue;  // no key: zeros
        double total = 0.0;
        for (int64_t si = 0; si < s; ++si) {
          score[si] = ma[bi][hi][li][si] ? std::exp(score[si] - top) : 0.0;
          total += score[si];
        }
        for (int64_t si = 0; si < s; ++si) {
          for (int64_t ei = 0; ei < ev; ++ei) {
            oa[bi][hi][li][ei] += score[si] / total * va[bi][hi][si][ei];
          }
        }
      }
    }
  }
  return out;
}

class Backends : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(20261129); }
};

TEST_F(Backends, MathAndSdpaMatchTheLoopReferenceInFloat32) {
  for (const auto& z : kSizes) {
    const auto t = random_qkv(z.b, z.h, z.l, z.s, z.e);
    for (const auto& [name, mask] : mask_cases(z)) {
      SCOPED_TRACE(describe(z) + ", mask " + name);
      const auto reference = loop_reference(t, mask);
      const auto math = run_backend(t, mask, "math").output;
      const auto sdpa = run_backend(t, mask, "sdpa").output;
      EXPECT_FALSE(math.isnan().any().item<bool>());
      EXPECT_FALSE(sdpa.isnan().any().item<bool>());
      EXPECT_LE(max_abs_diff(math, reference), 1e-5);
      EXPECT_LE(max_abs_diff(sdpa, reference), 1e-5);
      EXPECT_LE(max_abs_diff(math, sdpa), 1e-5);
    }
  }
}

TEST_F(Backends, MathAndSdpaAgreeInFloat64) {
  for (const auto& z : kSizes) {
    const auto t = random_qkv(z.b, z.h, z.l, z.s, z.e, torch::kDouble);
    for (const auto& [name, mask] : mask_cases(z)) {
      SCOPED_TRACE(describe(z) + ", mask " + name);
      const auto reference = loop_reference(t, mask);
      EXPECT_LE(max_abs_diff(run_backend(t, mask, "math").output, reference), 1e-12);
      EXPECT_LE(max_abs_diff(run_backend(t, mask, "sdpa").output, reference), 1e-12);
    }
  }
}

TEST_F(Backends, Bfloat16StaysCloseToFloat64) {
  for (const auto& z : kSizes) {
    const auto t = random_qkv(z.b, z.h, z.l, z.s, z.e, torch::kBFloat16);
    for (const auto& [name, mask] : mask_cases(z)) {
      SCOPED_TRACE(describe(z) + ", mask " + name);
      const auto reference = loop_reference(t, mask);  // from the same bf16 inputs, in float64
      for (const char* backend : {"math", "sdpa"}) {
        const auto out = run_backend(t, mask, backend).output;
        EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
        // bf16 keeps 8 bits of mantissa: a few units of 2^-8 on outputs of magnitude ~1.
        EXPECT_LE(max_abs_diff(out, reference), 4e-2) << backend;
      }
    }
  }
}

TEST_F(Backends, FullyMaskedRowsGiveZerosAndZeroWeights) {
  const auto t = random_qkv(2, 2, 4, 5, 8);
  auto attn = torch::zeros({4, 5}, torch::kBool);
  attn[1].fill_(true);  // query 1 excluded from every key
  const auto mask = AttentionMask().attn_mask(attn).key_lengths(torch::tensor({5L, 0L}));
  for (const char* backend : {"math", "sdpa"}) {
    SCOPED_TRACE(backend);
    const auto out = run_backend(t, mask, backend).output;
    EXPECT_EQ(out.select(2, 1).abs().max().item<double>(), 0.0);  // query 1, every batch
    EXPECT_EQ(out[1].abs().max().item<double>(), 0.0);            // batch 1 has no keys
    EXPECT_GT(out[0].select(1, 0).abs().max().item<double>(), 0.0);
  }
  const auto weights = run_backend(t, mask, "math", /*need_weights=*/true).weights;
  EXPECT_EQ(weights[1].abs().max().item<double>(), 0.0);
  EXPECT_EQ(weights.select(2, 1).abs().max().item<double>(), 0.0);
  const auto row_sums = weights[0].select(1, 0).sum(-1);  // batch 0, query 0: a normal row
  EXPECT_LE(max_abs_diff(row_sums, torch::ones_like(row_sums)), 1e-6);
}

TEST_F(Backends, CausalMatchesTheExplicitMaskInBothAlignments) {
  const auto t = random_qkv(2, 3, 6, 4, 16);  // L > S: bottom-right leaves rows empty
  const auto rows = torch::arange(6).unsqueeze(1);
  const auto cols = torch::arange(4).unsqueeze(0);
  for (const auto alignment : {CausalAlignment::kTopLeft, CausalAlignment::kBottomRight}) {
    const int64_t offset = alignment == CausalAlignment::kBottomRight ? 4 - 6 : 0;
    const auto excluded = cols > rows + offset;
    const auto explicit_mask = run_backend(t, AttentionMask().attn_mask(excluded), "math").output;
    for (const char* backend : {"math", "sdpa"}) {
      const auto out = run_backend(t, AttentionMask().causal(true, alignment), backend).output;
      EXPECT_LE(max_abs_diff(out, explicit_mask), 1e-6) << backend;
    }
  }
}

TEST_F(Backends, KeyLengthsEqualTheEquivalentPaddingMask) {
  const auto t = random_qkv(3, 2, 5, 6, 8);
  const auto lengths = torch::tensor({6L, 1L, 4L});
  const auto padding = torch::arange(6).unsqueeze(0) >= lengths.unsqueeze(1);
  for (const char* backend : {"math", "sdpa"}) {
    EXPECT_EQ(
        max_abs_diff(run_backend(t, AttentionMask().key_lengths(lengths), backend).output,
                     run_backend(t, AttentionMask().key_padding_mask(padding), backend).output),
        0.0);
  }
}

TEST_F(Backends, PaddedKeysDoNotChangeTheResult) {
  // Attention over the first n keys equals attention over n keys plus masked garbage.
  const auto t = random_qkv(1, 2, 3, 4, 8);
  auto padded = t;
  padded.k = torch::cat({t.k, 1e3 * torch::randn({1, 2, 5, 8})}, 2);
  padded.v = torch::cat({t.v, 1e3 * torch::randn({1, 2, 5, 8})}, 2);
  const auto mask = AttentionMask().key_lengths(torch::tensor({4L}));
  for (const char* backend : {"math", "sdpa"}) {
    EXPECT_LE(max_abs_diff(run_backend(padded, mask, backend).output,
                           run_backend(t, AttentionMask(), backend).output),
              1e-5)
        << backend;
  }
}

// On the CPU, float32 training: sdpa (flash, first in the order, takes inference where the
// processor has AVX512-BF16: test_attention_flash.cpp).
TEST_F(Backends, AutoPicksSdpaButMathForWeights) {
  auto p = testing::problem_of(random_qkv(1, 1, 2, 2, 4));
  p.query = p.query.detach().requires_grad_();
  EXPECT_EQ(select_attention_backend("auto", p).name(), "sdpa");
  p.need_weights = true;
  EXPECT_EQ(select_attention_backend("auto", p).name(), "math");
  const auto names = attention_backend_names();
  EXPECT_EQ(names, (std::vector<std::string>{"flash", "sdpa", "chunked", "math", "block_local",
                                             "linear"}));
}

TEST_F(Backends, LayerBackendsAgreeWithQkNormAndExplicitHeadDim) {
  auto options = MultiheadAttentionOptions(48, 3).head_dim(40).qk_norm(true).backend("math");
  MultiheadAttention math(options);
  auto sdpa = std::dynamic_pointer_cast<MultiheadAttentionImpl>(math->clone());
  sdpa->set_backend("sdpa");
  EXPECT_EQ(math->qkv->weight.sizes(), (std::vector<int64_t>{3 * 3 * 40, 48}));
  EXPECT_EQ(math->proj->weight.sizes(), (std::vector<int64_t>{48, 120}));
  // Non-contiguous input: a transposed view of [L, B, D] storage.
  const auto x = torch::randn({11, 7, 48}).transpose(0, 1);
  const auto mask = AttentionMask().key_lengths(torch::tensor({11L, 3L, 0L, 5L, 11L, 1L, 9L}));
  const auto a = math(x, mask);
  const auto b = sdpa->forward(x, mask);
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{7, 11, 48}));
  EXPECT_LE(max_abs_diff(a, b), 1e-5);
  // Batch entry 2 has no keys: attention yields zeros, so the layer yields the projection bias.
  EXPECT_LE(max_abs_diff(a[2], math->proj->bias.expand({11, 48})), 1e-6);
}

TEST_F(Backends, WeightsFollowTheConfiguredBackendsPattern) {
  const auto options = AttentionBackendOptions().block_size(3).window(1);
  MultiheadAttention layer(
      MultiheadAttentionOptions(16, 2).backend("block_local").backend_options(options));
  const auto x = torch::randn({2, 8, 16});
  const auto mask = AttentionMask().key_lengths(torch::tensor({8L, 5L}));
  const auto with_weights = layer->forward_with_weights(x, {}, mask);
  EXPECT_LE(max_abs_diff(with_weights.output, layer(x, mask)), 1e-5);
  const auto outside = block_local_pattern(8, options).logical_not();
  EXPECT_EQ((with_weights.weights * outside).abs().max().item<double>(), 0.0);
  layer->set_backend("linear");
  EXPECT_THAT(testing::error_of([&] { layer->forward_with_weights(x); }),
              ::testing::HasSubstr("no attention probabilities"));
}

TEST_F(Backends, DropoutActsInTrainingOnlyAndWeightsArePreDropout) {
  MultiheadAttention layer(MultiheadAttentionOptions(32, 4).attn_drop(0.5));
  const auto x = torch::randn({2, 10, 32});
  layer->eval();
  const auto eval_a = layer(x);
  const auto eval_b = layer(x);
  EXPECT_EQ(max_abs_diff(eval_a, eval_b), 0.0);
  layer->train();
  for (const char* backend : {"math", "sdpa"}) {
    layer->set_backend(backend);
    const auto train = layer(x);
    EXPECT_GT(max_abs_diff(train, eval_a), 1e-3) << backend;
  }
  const auto with_weights = layer->forward_with_weights(x);
  const auto sums = with_weights.weights.sum(-1);
  EXPECT_LE(max_abs_diff(sums, torch::ones_like(sums)), 1e-5);
}

}  // namespace test_attention_backends
}  // namespace attnzoo
