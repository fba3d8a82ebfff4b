// The int8 row passes (quantize_rows_int8, dequantize_rows_int8, requantize_rows_int8) on each of
// their instruction-set paths: quantizing against the formula computed by LibTorch's float32 ops
// (bit for bit), the scale-back against float64 for every activation (GELU through float64 erf,
// and over a dense grid of its range against its stated bound),
// bfloat16 in and out, the requantized rows against quantizing the float result, rows of NaN,
// infinity and zeros, sizes that leave vector tails, and the input checks.
#include <attnzoo/kernels/ops.h>
#include "common/test_util.h"

#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace test_int8_rows {

using attnzoo::kernels::dequantize_rows_int8;
using attnzoo::kernels::int8_rows_cpu_vector_width;
using attnzoo::kernels::quantize_rows_int8;
using attnzoo::kernels::requantize_rows_int8;
using attnzoo::testing::error_of;
using ::testing::HasSubstr;

// Sets ATTNZOO_INT8_ROWS_ISA for the lifetime of the guard (the passes read it at each call).
class RowsIsa {
 public:
  explicit RowsIsa(const char* isa) {
    if (isa != nullptr) setenv("ATTNZOO_INT8_ROWS_ISA", isa, 1);
  }
  ~RowsIsa() { unsetenv("ATTNZOO_INT8_ROWS_ISA"); }
  RowsIsa(const RowsIsa&) = delete;
  RowsIsa& operator=(const RowsIsa&) = delete;
};

// The processor's own path, then AVX2 and the baseline (each at most the processor's).
const std::vector<const char*> kIsas = {nullptr, "avx2", "baseline"};

std::string isa_name(const char* isa) { return isa == nullptr ? "best" : isa; }

// Widths that leave every tail length of 16-, 8- and 4-lane vectors.
const std::vector<int64_t> kWidths = {1, 3, 8, 15, 16, 17, 31, 100, 385};

TEST(Int8Rows, IsaSelection) {
  const int64_t best = int8_rows_cpu_vector_width();
  EXPECT_THAT(best, ::testing::AnyOf(4, 8, 16));
  {
    RowsIsa isa("avx2");
    EXPECT_EQ(int8_rows_cpu_vector_width(), std::min<int64_t>(best, 8));
  }
  RowsIsa isa("baseline");
  EXPECT_EQ(int8_rows_cpu_vector_width(), 4);
}

// Per row: scale = max|x| / 127 (1 for zeros), values = round(x · (1 / scale)), all in float32
// with ties to even, as LibTorch computes them.
TEST(Int8Rows, QuantizeIsTheFormulaBitForBit) {
  for (const char* isa_value : kIsas) {
    RowsIsa isa(isa_value);
    for (const int64_t k : kWidths) {
      for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
        torch::manual_seed(k);
        // Rows of very different ranges, one of zeros.
        auto x = (torch::randn({6, k}) * torch::logspace(-3, 3, 6).unsqueeze(1)).to(dtype);
        x[2].zero_();
        const auto [values, scales] = quantize_rows_int8(x);
        const auto xf = x.to(torch::kFloat);
        auto expected_scales = xf.abs().amax(1) / 127.0f;
        expected_scales.masked_fill_(expected_scales == 0, 1.0f);
        const auto expected = torch::round(xf * (1.0f / expected_scales).unsqueeze(1));
        const std::string where = isa_name(isa_value) + " K" + std::to_string(k) + " " +
                                  std::string(c10::toString(dtype));
        ASSERT_EQ(values.scalar_type(), torch::kChar) << where;
        EXPECT_TRUE(torch::equal(scales, expected_scales)) << where;
        EXPECT_TRUE(torch::equal(values.to(torch::kFloat), expected)) << where;
        EXPECT_EQ(values.abs().max().item<int>(), 127) << where;  // every row spans the range
      }
    }
  }
}

TEST(Int8Rows, NonFiniteRowsGetANaNScaleAndZeros) {
  for (const char* isa_value : kIsas) {
    RowsIsa isa(isa_value);
    auto x = torch::randn({4, 37});
    x[0][36] = NAN;
    x[1][0] = INFINITY;
    x[3][20] = -INFINITY;
    const auto [values, scales] = quantize_rows_int8(x);
    for (const int row : {0, 1, 3}) {
      EXPECT_TRUE(std::isnan(scales[row].item<float>())) << isa_name(isa_value) << " " << row;
      EXPECT_EQ(values[row].abs().max().item<int>(), 0) << isa_name(isa_value) << " " << row;
    }
    EXPECT_FALSE(std::isnan(scales[2].item<float>()));
    EXPECT_EQ(values[2].abs().max().item<int>(), 127);
  }
}

torch::Tensor activate64(const torch::Tensor& v, const std::string& activation) {
  if (activation == "gelu") return 0.5 * v * (1 + torch::erf(v / std::sqrt(2.0)));
  if (activation == "gelu_tanh") {
    return 0.5 * v * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v.pow(3))));
  }
  if (activation == "silu") return v * torch::sigmoid(v);
  if (activation == "relu") return v.clamp_min(0);
  return v;
}

struct ScaleBackInputs {
  torch::Tensor acc, row_scales, col_scales, bias;
};

// int32 sums of K = 256 products of int8s, with scales that bring the results to [-8, 8]: the
// activations' curved part and both of their tails.
ScaleBackInputs scale_back_inputs(int64_t m, int64_t n, int64_t seed) {
  torch::manual_seed(seed);
  const auto acc = torch::randint(-600000, 600000, {m, n}, torch::kInt);
  const auto row_scales = torch::rand({m}) * 0.01 + 0.002;
  const auto col_scales = torch::rand({n}) * 0.001 + 0.0002;
  return {acc, row_scales, col_scales, torch::randn({n})};
}

TEST(Int8Rows, ScaleBackMatchesFloat64ForEachActivation) {
  for (const char* isa_value : kIsas) {
    RowsIsa isa(isa_value);
    for (const int64_t n : kWidths) {
      const auto in = scale_back_inputs(5, n, n);
      const auto v = in.acc.to(torch::kDouble) * in.row_scales.to(torch::kDouble).unsqueeze(1) *
                         in.col_scales.to(torch::kDouble) +
                     in.bias.to(torch::kDouble);
      for (const std::string activation : {"none", "gelu", "gelu_tanh", "silu", "relu"}) {
        const std::string where = isa_name(isa_value) + " N" + std::to_string(n) + " " + activation;
        const auto expected = activate64(v, activation);
        // float32 rounding of the product, the sum and the activation's arithmetic; erf's
        // approximation (1.5e-7 absolute) times |v| / 2 for the erf GELU.
        const auto bound = 1e-6 * (1 + v.abs());
        const auto y = dequantize_rows_int8(in.acc, in.row_scales, in.col_scales, in.bias,
                                            activation, torch::kFloat);
        const auto error = (y.to(torch::kDouble) - expected).abs();
        EXPECT_TRUE((error <= bound).all().item<bool>())
            << where << ": largest error " << error.max().item<double>();
        // The same from float32 sums (CPUs without int8 products multiply in float32).
        const auto from_float =
            dequantize_rows_int8(in.acc.to(torch::kFloat), in.row_scales, in.col_scales, in.bias,
                                 activation, torch::kFloat);
        EXPECT_TRUE(torch::equal(from_float, y)) << where;
        // bfloat16 out: y rounded to nearest even.
        const auto y16 = dequantize_rows_int8(in.acc, in.row_scales, in.col_scales, in.bias,
                                              activation, torch::kBFloat16);
        ASSERT_EQ(y16.scalar_type(), torch::kBFloat16) << where;
        EXPECT_TRUE(torch::equal(y16, y.to(torch::kBFloat16))) << where;
        // Without a bias.
        const auto unbiased = dequantize_rows_int8(in.acc, in.row_scales, in.col_scales,
                                                   std::nullopt, activation, torch::kFloat);
        const auto unbiased_error =
            (unbiased.to(torch::kDouble) - activate64(v - in.bias.to(torch::kDouble), activation))
                .abs();
        EXPECT_TRUE((unbiased_error <= bound).all().item<bool>()) << where << " (no bias)";
      }
    }
  }
}

// The erf GELU of the epilogues (common/cpu_activation.h) over its whole range, the clamp and
// both tails included: float32 sums scaled by ones are exact, so y is the activation of x alone,
// within the 2.4e-7·|x| the header states, on every instruction-set path (with or without the
// compiler's fused multiply-adds: an -O1 sanitizer build left them out).
TEST(Int8Rows, GeluWithinItsStatedBoundEverywhere) {
  const auto x = torch::linspace(-12.0, 12.0, 1 << 20).reshape({1024, 1024});
  const auto expected = activate64(x.to(torch::kDouble), "gelu");
  for (const char* isa_value : kIsas) {
    RowsIsa isa(isa_value);
    const auto y = dequantize_rows_int8(x, torch::ones({1024}), torch::ones({1024}), std::nullopt,
                                        "gelu", torch::kFloat);
    const auto relative =
        (y.to(torch::kDouble) - expected).abs() / x.to(torch::kDouble).abs().clamp_min(1e-30);
    EXPECT_LE(relative.max().item<double>(), 2.4e-7) << isa_name(isa_value);
  }
}

TEST(Int8Rows, ScaleBackKeepsNaNRows) {
  const auto in = scale_back_inputs(3, 40, 1);
  auto row_scales = in.row_scales.clone();
  row_scales[1] = NAN;  // a row whose input held NaN or an infinity
  for (const std::string activation : {"none", "gelu", "gelu_tanh", "silu", "relu"}) {
    const auto y =
        dequantize_rows_int8(in.acc, row_scales, in.col_scales, in.bias, activation, torch::kFloat);
    EXPECT_TRUE(torch::isnan(y[1]).all().item<bool>()) << activation;
    EXPECT_TRUE(torch::isfinite(y[0]).all().item<bool>()) << activation;
    const auto [values, scales] =
        requantize_rows_int8(in.acc, row_scales, in.col_scales, in.bias, activation);
    EXPECT_TRUE(std::isnan(scales[1].item<float>())) << activation;
    EXPECT_EQ(values[1].abs().max().item<int>(), 0) << activation;
  }
}

// requantize_rows_int8 = quantize_rows_int8 of the float32 scale-back, which it never writes.
TEST(Int8Rows, RequantizeIsQuantizingTheFloatResult) {
  for (const char* isa_value : kIsas) {
    RowsIsa isa(isa_value);
    for (const int64_t n : kWidths) {
      const auto in = scale_back_inputs(7, n, 100 + n);
      for (const std::string activation : {"none", "gelu", "silu"}) {
        const std::string where = isa_name(isa_value) + " N" + std::to_string(n) + " " + activation;
        const auto [values, scales] =
            requantize_rows_int8(in.acc, in.row_scales, in.col_scales, in.bias, activation);
        const auto [expected_values, expected_scales] = quantize_rows_int8(dequantize_rows_int8(
            in.acc, in.row_scales, in.col_scales, in.bias, activation, torch::kFloat));
        EXPECT_TRUE(torch::equal(values, expected_values)) << where;
        EXPECT_TRUE(torch::equal(scales, expected_scales)) << where;
      }
    }
  }
}

TEST(Int8Rows, EmptyProblems) {
  const auto [values, scales] = quantize_rows_int8(torch::zeros({0, 8}));
  EXPECT_EQ(values.sizes(), (std::vector<int64_t>{0, 8}));
  EXPECT_EQ(scales.size(0), 0);
  // Rows of no columns: scale 1, as a row of zeros.
  const auto [none_values, none_scales] = requantize_rows_int8(
      torch::zeros({3, 0}, torch::kInt), torch::ones({3}), torch::ones({0}), std::nullopt, "none");
  EXPECT_EQ(none_values.sizes(), (std::vector<int64_t>{3, 0}));
  EXPECT_TRUE(torch::equal(none_scales, torch::ones({3})));
}

TEST(Int8Rows, Refusals) {
  EXPECT_THAT(error_of([] {
                quantize_rows_int8(torch::zeros({2, 3}, torch::kDouble));
              }),
              HasSubstr("x must be float32 or bfloat16"));
  EXPECT_THAT(error_of([] {
                quantize_rows_int8(torch::zeros({2, 3, 4}));
              }),
              HasSubstr("x must be a contiguous 2-D CPU tensor"));
  EXPECT_THAT(error_of([] {
                quantize_rows_int8(torch::zeros({4, 3}).t());
              }),
              HasSubstr("contiguous"));
  const auto in = scale_back_inputs(2, 5, 1);
  EXPECT_THAT(error_of([&] {
                dequantize_rows_int8(in.acc, in.row_scales, in.col_scales, in.bias, "swish",
                                     torch::kFloat);
              }),
              HasSubstr("activation must be none, gelu, gelu_tanh, silu or relu, got 'swish'"));
  EXPECT_THAT(error_of([&] {
                dequantize_rows_int8(in.acc, in.row_scales, in.col_scales.narrow(0, 0, 4), in.bias,
                                     "none", torch::kFloat);
              }),
              HasSubstr("col_scales must be a contiguous float32 CPU vector of 5 elements"));
  EXPECT_THAT(error_of([&] {
                dequantize_rows_int8(in.acc, in.row_scales.to(torch::kDouble), in.col_scales,
                                     in.bias, "none", torch::kFloat);
              }),
              HasSubstr("row_scales must be a contiguous float32 CPU vector of 2 elements"));
  EXPECT_THAT(error_of([&] {
                requantize_rows_int8(in.acc, in.row_scales, in.col_scales, torch::zeros({6}),
                                     "none");
              }),
              HasSubstr("bias must be a contiguous float32 CPU vector of 5 elements"));
  EXPECT_THAT(error_of([&] {
                dequantize_rows_int8(in.acc.to(torch::kLong), in.row_scales, in.col_scales, in.bias,
                                     "none", torch::kFloat);
              }),
              HasSubstr("acc must be int32 or float32"));
  EXPECT_THAT(error_of([&] {
                dequantize_rows_int8(in.acc, in.row_scales, in.col_scales, in.bias, "none",
                                     torch::kHalf);
              }),
              HasSubstr("dtype must be float32 or bfloat16"));
}

}  // namespace test_int8_rows
