// int8_linear (dynamic quantization: weights per output channel, activations per row) against the
// float product: exact on integer data that needs no rounding, within the rounding bound
// elsewhere, rows independent of each other's range; PackedLinear's int8 switch (requantizing
// after a weight update, the float path for autograd and for narrow layers over many rows,
// refusals); attnzoo's own int8 product and LibTorch's giving the same values; attention, MLP and
// feed-forward layers switched at once by set_int8_inference.
#include "common/test_util.h"

#include <attnzoo/kernels/ops.h>
#include <attnzoo/layers/attention.h>
#include <attnzoo/layers/conformer_parts.h>
#include <attnzoo/layers/int8_inference.h>
#include <attnzoo/layers/packed_linear.h>
#include <attnzoo/layers/quantized_linear.h>
#include <attnzoo/layers/transformer_parts.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace attnzoo {
namespace test_quantized_linear {

using testing::error_of;
using testing::max_abs_diff;

TEST(Int8Linear, ExactWhereNothingIsRounded) {
  // Integer rows whose largest magnitude is 127 and weight rows likewise: every scale is 1, every
  // value already an int8, so the int32 sums are the exact products.
  torch::manual_seed(1);
  const auto x = torch::randint(-127, 128, {37, 64}).to(torch::kFloat);
  x.select(1, 5).fill_(127);
  const auto w = torch::randint(-127, 128, {48, 64}).to(torch::kFloat);
  w.select(1, 9).fill_(-127);
  const auto bias = torch::randint(-1000, 1000, {48}).to(torch::kFloat);
  const auto ours = int8_linear(x, quantize_weight_int8(w), bias);
  const auto expected = torch::matmul(x.to(torch::kDouble), w.t().to(torch::kDouble)) + bias;
  // The sums (below 2^24) and the integer bias are exact in float32 too.
  EXPECT_EQ(max_abs_diff(ours, expected), 0.0);
  EXPECT_EQ(ours.sizes(), (std::vector<int64_t>{37, 48}));
}

TEST(Int8Linear, SumsPast2To24StayCloseToExact) {
  // Rows of 4096 products of ±127 with ±127: sums up to 6.6·10^7, past float32's exact integers.
  // Exact where the CPU multiplies int8 (VNNI, AMX); elsewhere the float32 product of the same
  // integers, within a relative 10^-6 of the exact sums (layers/quantized_linear.cpp).
  torch::manual_seed(3);
  const auto x = (torch::randint(0, 2, {9, 4096}) * 2 - 1).to(torch::kFloat) * 127;
  x[0].fill_(127);
  const auto w = (torch::randint(0, 2, {16, 4096}) * 2 - 1).to(torch::kFloat) * 127;
  w[0].fill_(127);
  const auto ours = int8_linear(x, quantize_weight_int8(w), {}).to(torch::kDouble);
  const auto expected = torch::matmul(x.to(torch::kDouble), w.t().to(torch::kDouble));
  EXPECT_EQ(expected[0][0].item<double>(), 4096.0 * 127 * 127);
  EXPECT_LE(max_abs_diff(ours, expected), 1e-6 * 4096.0 * 127 * 127);
}

TEST(Int8Linear, WithinTheRoundingBoundAndRowsAreIndependent) {
  torch::manual_seed(2);
  auto x = torch::randn({3, 5, 96});
  x[1][2].mul_(1000.0);  // an outlier token
  const auto w = torch::randn({80, 96}) * 0.1;
  const auto quantized = quantize_weight_int8(w);
  const auto ours = int8_linear(x, quantized, {});
  const auto xd = x.to(torch::kDouble).reshape({-1, 96}), wd = w.to(torch::kDouble);
  const auto exact = torch::matmul(xd, wd.t()).view({3, 5, 80});
  // |Δ| <= r·Σ|W|/2 + s·Σ|x|/2 + K·r·s/4 per element (layers/quantized_linear.h).
  const auto r = (xd.abs().amax(1) / 127.0).view({-1, 1});
  const auto s = (wd.abs().amax(1) / 127.0).view({1, -1});
  const auto bound = r * wd.abs().sum(1).view({1, -1}) / 2 + s * xd.abs().sum(1).view({-1, 1}) / 2 +
                     96.0 * r * s / 4;
  const auto error = (ours.to(torch::kDouble).view({-1, 80}) - torch::matmul(xd, wd.t())).abs();
  EXPECT_TRUE((error <= bound * (1 + 1e-6) + 1e-5).all().item<bool>())
      << "largest excess " << (error - bound).max().item<double>();
  // The outlier's scale is its own: the other rows match the float product as if it were not
  // there, to about 1% of their magnitude.
  auto others = torch::ones({15}, torch::kBool);
  others[7] = false;
  const auto rel = (ours.view({15, 80}).index({others}).to(torch::kDouble) -
                    exact.view({15, 80}).index({others}))
                       .abs()
                       .max()
                       .item<double>() /
                   exact.view({15, 80}).index({others}).abs().max().item<double>();
  EXPECT_LT(rel, 0.02);
  EXPECT_GT(rel, 0.0);
  // A row with a NaN or an infinity is NaN, the others untouched.
  auto poisoned = x.clone();
  poisoned[0][1][3] = NAN;
  poisoned[2][4][0] = INFINITY;
  const auto out = int8_linear(poisoned, quantized, {});
  EXPECT_TRUE(torch::isnan(out[0][1]).all().item<bool>());
  EXPECT_TRUE(torch::isnan(out[2][4]).all().item<bool>());
  EXPECT_EQ(max_abs_diff(out[1], ours[1]), 0.0);
  // bfloat16 in, bfloat16 out.
  EXPECT_EQ(int8_linear(x.to(torch::kBFloat16), quantized, {}).scalar_type(), torch::kBFloat16);
}

TEST(Int8Linear, Refusals) {
  const auto quantized = quantize_weight_int8(torch::randn({4, 8}));
  EXPECT_NE(error_of([&] {
              int8_linear(torch::randn({2, 7}), quantized, {});
            }).find("K = 8"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              int8_linear(torch::randn({2, 8}, torch::kDouble), quantized, {});
            }).find("float32 or bfloat16"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              int8_linear(torch::randn({2, 8}), quantized, torch::randn({5}));
            }).find("bias"),
            std::string::npos);
  auto bad = torch::randn({4, 8});
  bad[1][2] = NAN;
  EXPECT_NE(error_of([&] { quantize_weight_int8(bad); }).find("NaN"), std::string::npos);
}

TEST(Int8Linear, PackedLinearSwitchRequantizesAndKeepsAutogradInFloat) {
  torch::manual_seed(3);
  torch::nn::Linear linear(32, 16);
  PackedLinear packed;
  packed.set_int8(true);
  const auto x = torch::randn({4, 32});
  const auto before = [&] {
    torch::NoGradGuard no_grad;
    return packed(linear, x);
  }();
  const auto reference = int8_linear(x, quantize_weight_int8(linear->weight), linear->bias);
  EXPECT_EQ(max_abs_diff(before, reference), 0.0);
  EXPECT_GT(max_abs_diff(before, linear(x)), 0.0);
  {
    torch::NoGradGuard no_grad;
    linear->weight.mul_(2.0);  // an in-place update: the cache must notice
  }
  const auto after = [&] {
    torch::NoGradGuard no_grad;
    return packed(linear, x);
  }();
  EXPECT_EQ(max_abs_diff(after, int8_linear(x, quantize_weight_int8(linear->weight), linear->bias)),
            0.0);
  // Recording autograd: the float product, with gradients.
  const auto trained = packed(linear, x);
  EXPECT_TRUE(trained.requires_grad());
  EXPECT_EQ(max_abs_diff(trained, linear(x)), 0.0);
  // Copies keep the setting.
  const PackedLinear copy = packed;
  EXPECT_TRUE(copy.int8());
  torch::NoGradGuard no_grad;
  EXPECT_NE(error_of([&] { packed(linear, x.to(torch::kDouble)); }).find("float32 or bfloat16"),
            std::string::npos);
}

// Attention, an MLP and a Conformer feed-forward module in one model.
struct Blocks : torch::nn::Module {
  Blocks()
      : attention(register_module("attention", MultiheadAttention(64, 4))),
        mlp(register_module("mlp", Mlp(MlpOptions(64, 128)))),
        feed_forward(
            register_module("ff", ConformerFeedForward(ConformerFeedForwardOptions(64, 96)))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    const auto h = x + attention(x);
    return feed_forward(h + mlp(h));
  }
  MultiheadAttention attention;
  Mlp mlp;
  ConformerFeedForward feed_forward;
};

// A narrow layer runs many rows in float (int8 would be slower there), few rows in int8; a wide
// one runs every call in int8. Alternating between the two paths keeps both caches: the results
// stay the same call after call, and a weight update still reaches both.
TEST(Int8Linear, NarrowLayersTakeTheFloatPathOnManyRows) {
  torch::manual_seed(5);
  EXPECT_TRUE(PackedLinear::int8_pays(PackedLinear::kInt8MaxNarrowRows, 96, 288));
  EXPECT_FALSE(PackedLinear::int8_pays(PackedLinear::kInt8MaxNarrowRows + 1, 96, 288));
  EXPECT_FALSE(PackedLinear::int8_pays(1576, 384, 96));
  EXPECT_TRUE(PackedLinear::int8_pays(1576, 144, 576));
  EXPECT_TRUE(PackedLinear::int8_pays(1576, 768, 192));
  torch::NoGradGuard no_grad;
  torch::nn::Linear narrow(96, 288), wide(256, 256);
  PackedLinear narrow_int8, narrow_float, wide_int8;
  narrow_int8.set_int8(true);
  wide_int8.set_int8(true);
  const auto few = torch::randn({2, 100, 96});   // 200 rows
  const auto many = torch::randn({3, 400, 96});  // 1200 rows
  const auto int8_of = [](const torch::nn::Linear& l, const torch::Tensor& x) {
    return int8_linear(x, quantize_weight_int8(l->weight), l->bias);
  };
  for (int pass = 0; pass < 2; ++pass) {
    EXPECT_EQ(max_abs_diff(narrow_int8(narrow, few), int8_of(narrow, few)), 0.0) << pass;
    const auto floats = narrow_int8(narrow, many);
    EXPECT_EQ(max_abs_diff(floats, narrow_float(narrow, many)), 0.0) << pass;
    EXPECT_GT(max_abs_diff(floats, int8_of(narrow, many)), 0.0) << pass;
  }
  narrow->weight.mul_(-1.0);
  EXPECT_EQ(max_abs_diff(narrow_int8(narrow, few), int8_of(narrow, few)), 0.0);
  EXPECT_EQ(max_abs_diff(narrow_int8(narrow, many), narrow_float(narrow, many)), 0.0);
  const auto x = torch::randn({1200, 256});
  EXPECT_EQ(max_abs_diff(wide_int8(wide, x), int8_of(wide, x)), 0.0);
  // Without the fallback, every call in int8.
  PackedLinear::set_int8_fallback(false);
  EXPECT_TRUE(PackedLinear::int8_pays(100000, 8, 8));
  const auto all_int8 = narrow_int8(narrow, many);
  PackedLinear::set_int8_fallback(true);
  EXPECT_EQ(max_abs_diff(all_int8, int8_of(narrow, many)), 0.0);
}

// The activation in the scale-back: the float activation of the float output, to float32's
// rounding of the activation (the erf GELU within 2.4e-7·|x| more).
TEST(Int8Linear, TheActivationInTheScaleBackIsTheFloatActivation) {
  torch::manual_seed(6);
  const auto x = torch::randn({5, 7, 80}) * 2;
  const auto w = torch::randn({130, 80}) * 0.2;
  const auto bias = torch::randn({130});
  const auto quantized = quantize_weight_int8(w);
  const auto plain = int8_linear(x, quantized, bias);
  EXPECT_GT(plain.abs().max().item<double>(), 3.0);  // the activations' curved range is reached
  for (const auto activation :
       {Activation::kGelu, Activation::kGeluTanh, Activation::kSilu, Activation::kRelu}) {
    const auto fused = int8_linear(x, quantized, bias, activation);
    const auto expected = apply_activation(plain.to(torch::kDouble), activation);
    const auto error = (fused.to(torch::kDouble) - expected).abs();
    EXPECT_TRUE((error <= 1e-6 * (1 + plain.abs().to(torch::kDouble))).all().item<bool>())
        << to_string(activation) << ": largest error " << error.max().item<double>();
    EXPECT_GT(max_abs_diff(fused, plain), 0.1) << to_string(activation);
  }
}

// int8_linear_to_rows is the float32 result quantized per row, exactly; the second layer of a
// pair on those rows is int8_linear on them.
// Where the weight is packed for attnzoo's own int8 product (processors with AVX-512 VNNI), the
// layer takes it; the same weight unpacked takes LibTorch's integer product and the scale-back
// pass. Both multiply the same integers exactly and scale back in the same order: the same values
// without an activation, for both output dtypes and the MLP's int8 rows; with GELU or SiLU within
// an ulp or two of float32 (the compiler may contract the exponential's polynomial differently in
// the two places), which bfloat16 and the int8 rows may round one step apart.
TEST(Int8Linear, OwnProductAndLibTorchsGiveTheSameValues) {
  torch::manual_seed(9);
  const auto x = torch::randn({2, 29, 96});
  const auto w = torch::randn({120, 96}) * 0.1, b = torch::randn({120});
  const auto packed = quantize_weight_int8(w);
  if (!packed.packed.defined()) {
    GTEST_SKIP() << "no AVX-512 VNNI: every int8 layer takes LibTorch's integer product here";
  }
  Int8Weight unpacked = packed;
  unpacked.packed = torch::Tensor();
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const auto activation : {Activation::kNone, Activation::kGelu, Activation::kSilu}) {
      const auto xd = x.to(dtype);
      const auto what = std::string(c10::toString(dtype)) + " " + to_string(activation);
      const auto ours = int8_linear(xd, packed, b, activation).to(torch::kDouble);
      const auto theirs = int8_linear(xd, unpacked, b, activation).to(torch::kDouble);
      const auto ours_rows = int8_linear_to_rows(xd, packed, b, activation);
      const auto theirs_rows = int8_linear_to_rows(xd, unpacked, b, activation);
      if (activation == Activation::kNone) {
        EXPECT_TRUE(torch::equal(ours, theirs)) << what;
        EXPECT_TRUE(torch::equal(ours_rows.values, theirs_rows.values)) << what;
        EXPECT_TRUE(torch::equal(ours_rows.scales, theirs_rows.scales)) << what;
        continue;
      }
      const double ulps = dtype == torch::kFloat ? 8 * 0x1p-24 : 0x1p-8;
      // Relative to the output, or to 1 below it (near zero the activations are differences of
      // larger terms).
      EXPECT_LE(
          ((ours - theirs).abs() - ulps * torch::clamp_min(theirs.abs(), 1.0)).max().item<double>(),
          0.0)
          << what;
      EXPECT_LE((ours_rows.values.to(torch::kInt) - theirs_rows.values.to(torch::kInt))
                    .abs()
                    .max()
                    .item<int>(),
                1)
          << what;
      EXPECT_LE(((ours_rows.scales - theirs_rows.scales).abs() - 1e-6 * theirs_rows.scales.abs())
                    .max()
                    .item<double>(),
                0.0)
          << what;
    }
  }
}

TEST(Int8Linear, RowsOutEqualTheFloatResultQuantized) {
  torch::manual_seed(7);
  const auto x = torch::randn({3, 11, 64});
  const auto w1 = torch::randn({200, 64}) * 0.1, w2 = torch::randn({48, 200}) * 0.1;
  const auto b1 = torch::randn({200}), b2 = torch::randn({48});
  const auto q1 = quantize_weight_int8(w1), q2 = quantize_weight_int8(w2);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const auto xd = x.to(dtype);
    const auto rows = int8_linear_to_rows(xd, q1, b1, Activation::kGelu);
    ASSERT_EQ(rows.values.sizes(), (std::vector<int64_t>{33, 200}));
    const auto [values, scales] = kernels::quantize_rows_int8(
        int8_linear(xd.to(torch::kFloat), q1, b1, Activation::kGelu).reshape({33, 200}));
    EXPECT_TRUE(torch::equal(rows.values, values)) << dtype;
    EXPECT_TRUE(torch::equal(rows.scales, scales)) << dtype;
    const auto out = int8_linear(rows, q2, b2, Activation::kNone, dtype);
    EXPECT_EQ(out.scalar_type(), dtype);
    const auto two_steps =
        int8_linear(int8_linear(xd.to(torch::kFloat), q1, b1, Activation::kGelu), q2, b2).to(dtype);
    EXPECT_EQ(max_abs_diff(out, two_steps.reshape({33, 48})), 0.0) << dtype;
  }
  EXPECT_NE(error_of([&] {
              int8_linear(Int8Rows{torch::zeros({2, 63}, torch::kChar), torch::ones({2})}, q1, b1,
                          Activation::kNone, torch::kFloat);
            }).find("K = 64"),
            std::string::npos);
  const auto none = int8_linear_to_rows(torch::randn({0, 64}), q1, b1, Activation::kNone);
  EXPECT_EQ(none.values.sizes(), (std::vector<int64_t>{0, 200}));
}

// An MLP and a Conformer feed-forward module in int8 pass the hidden activations as int8 rows,
// within int8's error of the float module. In float32 that changes no number (the float hidden,
// quantized by the second layer, gives the same rows); in bfloat16 it shows: the one-by-one path
// rounds the hidden activations to bfloat16 first, the pair does not.
TEST(Int8Linear, FeedForwardPairsPassInt8Rows) {
  torch::manual_seed(8);
  Mlp mlp(MlpOptions(64, 256));
  ConformerFeedForward feed_forward(ConformerFeedForwardOptions(64, 192));
  mlp->eval();
  feed_forward->eval();
  const auto x = torch::randn({2, 13, 64});
  torch::NoGradGuard no_grad;
  const auto mlp_float = mlp->forward(x);
  const auto ff_float = feed_forward->forward_normed(x);
  mlp->set_int8(true);
  feed_forward->set_int8(true);
  const auto pair = [](const torch::nn::Linear& a, const torch::nn::Linear& b,
                       const torch::Tensor& in, Activation activation) {
    return int8_linear(
               int8_linear_to_rows(in, quantize_weight_int8(a->weight), a->bias, activation),
               quantize_weight_int8(b->weight), b->bias, Activation::kNone, in.scalar_type())
        .view({2, 13, 64});
  };
  const auto one_by_one = [](const torch::nn::Linear& a, const torch::nn::Linear& b,
                             const torch::Tensor& in, Activation activation) {
    return int8_linear(int8_linear(in, quantize_weight_int8(a->weight), a->bias, activation),
                       quantize_weight_int8(b->weight), b->bias);
  };
  const auto mlp_int8 = mlp->forward(x);
  EXPECT_EQ(max_abs_diff(mlp_int8, pair(mlp->fc1, mlp->fc2, x, Activation::kGelu)), 0.0);
  EXPECT_EQ(max_abs_diff(mlp_int8, one_by_one(mlp->fc1, mlp->fc2, x, Activation::kGelu)), 0.0);
  const auto ff_int8 = feed_forward->forward_normed(x);
  EXPECT_EQ(max_abs_diff(ff_int8,
                         pair(feed_forward->linear1, feed_forward->linear2, x, Activation::kSilu)),
            0.0);
  for (const auto& [ours, reference] :
       {std::pair{mlp_int8, mlp_float}, std::pair{ff_int8, ff_float}}) {
    const double diff = max_abs_diff(ours, reference);
    EXPECT_GT(diff, 0.0);
    EXPECT_LT(diff, 0.03 * reference.abs().max().item<double>());
  }
  // bfloat16: the pair, not the one-by-one path.
  mlp->to(torch::kBFloat16);
  const auto x16 = x.to(torch::kBFloat16);
  const auto mlp16 = mlp->forward(x16);
  EXPECT_EQ(max_abs_diff(mlp16, pair(mlp->fc1, mlp->fc2, x16, Activation::kGelu)), 0.0);
  EXPECT_GT(max_abs_diff(mlp16, one_by_one(mlp->fc1, mlp->fc2, x16, Activation::kGelu)), 0.0);
  // In training mode (where dropout would act between them) the layers run one by one.
  mlp->train();
  EXPECT_EQ(max_abs_diff(mlp->forward(x16), one_by_one(mlp->fc1, mlp->fc2, x16, Activation::kGelu)),
            0.0);
}

TEST(Int8Linear, AWholeModelSwitchedStaysCloseToFloat) {
  torch::manual_seed(4);
  Blocks model;
  model.eval();
  const auto x = torch::randn({2, 9, 64});
  torch::NoGradGuard no_grad;
  const auto fp32 = model.forward(x);
  EXPECT_EQ(set_int8_inference(model), 2 + 2 + 2);  // qkv, proj; fc1, fc2; linear1, linear2
  const auto int8 = model.forward(x);
  const double diff = max_abs_diff(int8, fp32);
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(diff, 0.05 * fp32.abs().max().item<double>());
  EXPECT_EQ(set_int8_inference(model, false), 6);
  EXPECT_LE(max_abs_diff(model.forward(x), fp32), 1e-6);
}

}  // namespace test_quantized_linear
}  // namespace attnzoo
