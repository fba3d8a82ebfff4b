// The int8 product (pack_int8_weight_cpu, int8_matmul_packed_cpu) against the exact product of the
// same integers (float64 matmul: every sum here is an integer far below 2^53): shapes that leave
// every row-tile and panel tail, the extreme values (−128 in x, ±127 in W) at the largest K the
// kernel takes, no rows and no inputs, the packed layout, and the input checks. The product scaled
// back in its tiles (int8_linear_packed_cpu) against dequantize_rows_int8 of the int32 sums (value
// for value without an activation and with ReLU, within float32's rounding of the exponential
// otherwise) and the float64 scale-back of the exact sums. Skipped where the processor has
// no AVX-512 VNNI (the kernel is not offered there).
#include "common/test_util.h"

#include <attnzoo/kernels/ops.h>

#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace test_int8_matmul_cpu {

using attnzoo::kernels::dequantize_rows_int8;
using attnzoo::kernels::int8_linear_packed_cpu;
using attnzoo::kernels::int8_matmul_packed_cpu;
using attnzoo::kernels::int8_matmul_packed_cpu_available;
using attnzoo::kernels::pack_int8_weight_cpu;
using attnzoo::testing::error_of;
using ::testing::HasSubstr;

#define SKIP_WITHOUT_VNNI()                                                        \
  if (!int8_matmul_packed_cpu_available()) {                                       \
    GTEST_SKIP() << "no AVX-512 VNNI: attnzoo's int8 product is not offered here"; \
  }

torch::Tensor exact(const torch::Tensor& x, const torch::Tensor& weight_t) {
  return torch::matmul(x.to(torch::kDouble), weight_t.to(torch::kDouble)).to(torch::kLong);
}

void expect_exact(const torch::Tensor& x, const torch::Tensor& weight_t, const std::string& what) {
  const auto y = int8_matmul_packed_cpu(x, pack_int8_weight_cpu(weight_t), weight_t.size(1));
  ASSERT_EQ(y.scalar_type(), torch::kInt) << what;
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{x.size(0), weight_t.size(1)})) << what;
  const auto wrong = (y.to(torch::kLong) != exact(x, weight_t)).sum().item<int64_t>();
  EXPECT_EQ(wrong, 0) << what << ": elements that differ from the exact product";
}

torch::Tensor random_int8(std::vector<int64_t> sizes, int64_t low = -127, int64_t high = 128) {
  return torch::randint(low, high, sizes, torch::kChar);
}

TEST(Int8MatmulCpu, PackedLayout) {
  SKIP_WITHOUT_VNNI();
  const auto w = random_int8({8, 40});
  const auto packed = pack_int8_weight_cpu(w);
  ASSERT_EQ(packed.scalar_type(), torch::kByte);
  ASSERT_EQ(packed.sizes(), (std::vector<int64_t>{2, 2, 32, 4}));
  for (int64_t n = 0; n < 64; ++n) {
    for (int64_t k = 0; k < 8; ++k) {
      const int64_t value = packed[n / 32][k / 4][n % 32][k % 4].item<int64_t>();
      EXPECT_EQ(value, n < 40 ? w[k][n].item<int64_t>() + 128 : 128) << n << ", " << k;
    }
  }
}

TEST(Int8MatmulCpu, ExactEveryTail) {
  SKIP_WITHOUT_VNNI();
  torch::manual_seed(0);
  // Rows: below, at and past one 12-row tile and a ViT batch; outputs: part of a panel, one, one
  // and a half, six; inputs: one group of 4, ViT-Ti's 192 and its MLP's 768.
  for (int64_t m : {1, 5, 12, 13, 197}) {
    for (int64_t n : {8, 32, 48, 192}) {
      for (int64_t k : {4, 12, 192, 768}) {
        expect_exact(random_int8({m, k}), random_int8({k, n}),
                     std::to_string(m) + "x" + std::to_string(k) + " -> " + std::to_string(n));
      }
    }
  }
}

TEST(Int8MatmulCpu, ExtremeValuesAtTheLargestK) {
  SKIP_WITHOUT_VNNI();
  // K = 2^16 with x = −128 and W = ±127 everywhere: the largest sums the kernel promises to hold,
  // and the shifted weight's correction at its largest (128·Σx = −2^30 per row).
  const int64_t k = int64_t{1} << 16;
  const auto x = torch::full({3, k}, -128, torch::kChar);
  auto w = torch::full({k, 33}, 127, torch::kChar);
  w.index_put_({torch::indexing::Slice(), torch::indexing::Slice(16, 33)}, -127);
  expect_exact(x, w, "K = 65536, extremes");
  expect_exact(random_int8({5, k}, -128), random_int8({k, 17}), "K = 65536, random");
}

TEST(Int8MatmulCpu, NoRowsNoInputsAndStridedX) {
  SKIP_WITHOUT_VNNI();
  torch::manual_seed(1);
  const auto w = random_int8({16, 40});
  const auto packed = pack_int8_weight_cpu(w);
  EXPECT_EQ(int8_matmul_packed_cpu(random_int8({0, 16}), packed, 40).sizes(),
            (std::vector<int64_t>{0, 40}));
  // K = 0: every sum is empty.
  const auto y =
      int8_matmul_packed_cpu(random_int8({3, 0}), pack_int8_weight_cpu(random_int8({0, 5})), 5);
  EXPECT_TRUE(torch::equal(y, torch::zeros({3, 5}, torch::kInt)));
  // A transposed x: taken as its values, not its memory.
  const auto xt = random_int8({16, 7}).t();
  ASSERT_FALSE(xt.is_contiguous());
  EXPECT_TRUE(torch::equal(int8_matmul_packed_cpu(xt, packed, 40).to(torch::kLong), exact(xt, w)));
}

TEST(Int8MatmulCpu, ScaledBackInTheTilesAsDequantizeRows) {
  SKIP_WITHOUT_VNNI();
  torch::manual_seed(2);
  for (int64_t m : {1, 13, 197}) {
    for (int64_t n : {8, 48, 192}) {
      const int64_t k = 64;
      const auto x = random_int8({m, k});
      const auto w = random_int8({k, n});
      const auto packed = pack_int8_weight_cpu(w);
      const auto row_scales = torch::rand({m}) * 0.01 + 1e-3;
      const auto col_scales = torch::rand({n}) * 0.01 + 1e-3;
      const auto bias = torch::randn({n});
      const auto sums = int8_matmul_packed_cpu(x, packed, n);
      // The float64 scale-back of the exact sums: the fused result within float32 rounding.
      const auto reference = exact(x, w).to(torch::kDouble) *
                                 row_scales.to(torch::kDouble).unsqueeze(1) *
                                 col_scales.to(torch::kDouble) +
                             bias.to(torch::kDouble);
      for (const auto* activation : {"none", "gelu", "gelu_tanh", "silu", "relu"}) {
        for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
          for (const bool with_bias : {true, false}) {
            const std::string what = std::to_string(m) + " x " + std::to_string(n) + " " +
                                     activation + (with_bias ? " bias " : " ") +
                                     c10::toString(dtype);
            const std::optional<torch::Tensor> b =
                with_bias ? std::optional<torch::Tensor>(bias) : std::nullopt;
            const auto fused =
                int8_linear_packed_cpu(x, row_scales, packed, col_scales, b, activation, dtype);
            const auto unfused =
                dequantize_rows_int8(sums, row_scales, col_scales, b, activation, dtype);
            ASSERT_EQ(fused.scalar_type(), dtype) << what;
            if (std::string(activation) == "none" || std::string(activation) == "relu") {
              EXPECT_TRUE(torch::equal(fused, unfused)) << what;
            } else {
              // The same formula compiled in two places: the compiler may fuse a multiply and
              // an add into one FMA in one and not the other (a sanitizer build did), an ulp of
              // float32 apart, which bfloat16's rounding can turn into one of its own ulps.
              const double ulps = dtype == torch::kFloat ? 8 * 0x1p-24 : 0x1p-8;
              // Relative to the larger of the output, its input and 1: the erf GELU's output
              // is x·r + x/2, for negative x a difference of terms of x's size.
              const auto want = unfused.to(torch::kDouble);
              const auto input =
                  dequantize_rows_int8(sums, row_scales, col_scales, b, "none", torch::kFloat)
                      .to(torch::kDouble);
              const auto gap = (fused.to(torch::kDouble) - want).abs() -
                               ulps * torch::clamp_min(torch::max(want.abs(), input.abs()), 1.0);
              EXPECT_LE(gap.max().item<double>(), 0.0) << what;
            }
            if (std::string(activation) == "none" && with_bias && dtype == torch::kFloat) {
              const auto error = (fused.to(torch::kDouble) - reference).abs();
              EXPECT_LE((error - 4e-7 * reference.abs()).max().item<double>(), 1e-6) << what;
            }
          }
        }
      }
    }
  }
  // A row scale of NaN (a row that held NaN): that row NaN, the others finite.
  const auto x = random_int8({5, 8});
  auto row_scales = torch::ones({5});
  row_scales[2] = std::numeric_limits<float>::quiet_NaN();
  const auto y = int8_linear_packed_cpu(x, row_scales, pack_int8_weight_cpu(random_int8({8, 20})),
                                        torch::ones({20}), std::nullopt, "gelu", torch::kFloat);
  EXPECT_TRUE(torch::isnan(y[2]).all().item<bool>());
  EXPECT_EQ(torch::isfinite(y).sum().item<int64_t>(), 4 * 20);
}

TEST(Int8MatmulCpu, RefusesWhatItCannotRun) {
  SKIP_WITHOUT_VNNI();
  const auto x = random_int8({4, 8});
  const auto packed = pack_int8_weight_cpu(random_int8({8, 40}));
  EXPECT_THAT(error_of<c10::Error>([&] { int8_matmul_packed_cpu(x.to(torch::kInt), packed, 40); }),
              HasSubstr("x must be a Char CPU tensor"));
  EXPECT_THAT(error_of<c10::Error>([&] { int8_matmul_packed_cpu(x, packed.to(torch::kChar), 40); }),
              HasSubstr("packed must be a Byte CPU tensor"));
  EXPECT_THAT(error_of<c10::Error>([&] { int8_matmul_packed_cpu(x, packed, 70); }),
              HasSubstr("packed must be pack_int8_weight_cpu's"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                int8_matmul_packed_cpu(random_int8({4, 12}), packed, 40);
              }),
              HasSubstr("packed must be pack_int8_weight_cpu's"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                int8_matmul_packed_cpu(random_int8({2, 4, 8}), packed, 40);
              }),
              HasSubstr("x must be [M, K]"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                pack_int8_weight_cpu(random_int8({6, 40}));
              }),
              HasSubstr("in_features must be a multiple of 4 and at most 65536, got 6"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                pack_int8_weight_cpu(torch::randn({8, 40}));
              }),
              HasSubstr("weight_t must be a Char CPU tensor"));
}

}  // namespace test_int8_matmul_cpu
