// The float32 linear kernel (pack_linear_weight_cpu, linear_packed_cpu) against x·Wᵀ + b and the
// activation in float64: shapes that leave every row-tile and panel tail, without a bias, no
// inputs (K = 0), leading dims and strided x, NaN confined to its row, the packed layout, and the
// input checks. Skipped where the processor has no AVX-512 (the kernel is not offered there).
#include <attnzoo/kernels/ops.h>

#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace test_linear_cpu {

using attnzoo::kernels::linear_packed_cpu;
using attnzoo::kernels::linear_packed_cpu_available;
using attnzoo::kernels::pack_linear_weight_cpu;
using ::testing::HasSubstr;

#define SKIP_WITHOUT_AVX512()                                                          \
  if (!linear_packed_cpu_available()) {                                                \
    GTEST_SKIP() << "no AVX-512: attnzoo's float32 linear kernel is not offered here"; \
  }

const std::vector<std::string> kActivations = {"none", "gelu", "gelu_tanh", "silu", "relu"};

// act(y) in float64 from the definitions.
torch::Tensor activate(const torch::Tensor& y, const std::string& activation) {
  if (activation == "gelu") return 0.5 * y * (1.0 + torch::erf(y / std::sqrt(2.0)));
  if (activation == "gelu_tanh") {
    return 0.5 * y * (1.0 + torch::tanh(std::sqrt(2.0 / M_PI) * (y + 0.044715 * y.pow(3))));
  }
  if (activation == "silu") return y / (1.0 + torch::exp(-y));
  if (activation == "relu") return torch::where(y > 0, y, torch::zeros_like(y));
  return y;
}

// The float64 result and the bound of a float32 sum of K products begun at the bias: K + 1
// roundings of at most eps/2 of the running magnitude, bounded by Σ|x||w| + |b|, plus what the
// activation adds (its slope is at most 1.13, and GELU's approximation 2.4e-7·|y|).
struct Expected {
  torch::Tensor value, bound;
};

Expected expected(const torch::Tensor& x, const torch::Tensor& w,
                  const std::optional<torch::Tensor>& b, const std::string& activation) {
  const auto xd = x.to(torch::kDouble), wd = w.to(torch::kDouble);
  auto y = torch::matmul(xd, wd.t());
  auto magnitude = torch::matmul(xd.abs(), wd.abs().t());
  if (b) {
    y = y + b->to(torch::kDouble);
    magnitude = magnitude + b->to(torch::kDouble).abs();
  }
  const double k = static_cast<double>(x.size(-1));
  const double eps = std::numeric_limits<float>::epsilon();
  auto bound = 1.13 * (k + 1) * eps * magnitude + 4 * eps * y.abs() + 1e-30;
  return {activate(y, activation), bound};
}

void expect_within(const torch::Tensor& got, const Expected& want, const std::string& what) {
  ASSERT_EQ(got.scalar_type(), torch::kFloat) << what;
  ASSERT_EQ(got.sizes(), want.value.sizes()) << what;
  const auto excess = (got.to(torch::kDouble) - want.value).abs() - want.bound;
  EXPECT_LE(excess.max().item<double>(), 0.0) << what << ": worst error beyond the bound";
}

TEST(LinearCpu, PackedLayout) {
  SKIP_WITHOUT_AVX512();
  const auto w = torch::randn({40, 5});
  const auto packed = pack_linear_weight_cpu(w);
  ASSERT_EQ(packed.sizes(), (std::vector<int64_t>{2, 5, 32}));
  for (int64_t n = 0; n < 64; ++n) {
    for (int64_t k = 0; k < 5; ++k) {
      const float value = packed[n / 32][k][n % 32].item<float>();
      EXPECT_EQ(value, n < 40 ? w[n][k].item<float>() : 0.0f) << n << ", " << k;
    }
  }
}

TEST(LinearCpu, MatchesFloat64EveryTail) {
  SKIP_WITHOUT_AVX512();
  torch::manual_seed(0);
  // Rows: below, at and past one 12-row tile and a ViT-Ti batch; outputs: a part-filled panel,
  // one, one and a half, six; inputs: 1, odd, ViT-Ti's 192 and its MLP's 768.
  for (int64_t m : {1, 5, 12, 13, 197}) {
    for (int64_t n : {8, 32, 48, 192}) {
      for (int64_t k : {1, 7, 192, 768}) {
        const auto x = torch::randn({m, k});
        const auto w = torch::randn({n, k}) / std::sqrt(static_cast<double>(k));
        const auto b = torch::randn({n});
        const auto packed = pack_linear_weight_cpu(w);
        for (const auto& activation : kActivations) {
          const std::string what = std::to_string(m) + "x" + std::to_string(k) + " -> " +
                                   std::to_string(n) + " " + activation;
          expect_within(linear_packed_cpu(x, packed, n, b, activation),
                        expected(x, w, b, activation), what);
        }
      }
    }
  }
}

TEST(LinearCpu, WithoutBiasAndWithoutInputs) {
  SKIP_WITHOUT_AVX512();
  torch::manual_seed(1);
  const auto x = torch::randn({13, 40});
  const auto w = torch::randn({50, 40});
  expect_within(linear_packed_cpu(x, pack_linear_weight_cpu(w), 50, std::nullopt, "silu"),
                expected(x, w, std::nullopt, "silu"), "no bias");
  // K = 0: every output is the activated bias.
  const auto empty_x = torch::empty({3, 0});
  const auto empty_w = torch::empty({33, 0});
  const auto b = torch::randn({33});
  const auto y = linear_packed_cpu(empty_x, pack_linear_weight_cpu(empty_w), 33, b, "relu");
  EXPECT_TRUE(torch::equal(y, torch::relu(b).expand({3, 33})));
  // No rows: an empty result of the right shape.
  EXPECT_EQ(
      linear_packed_cpu(torch::empty({0, 40}), pack_linear_weight_cpu(w), 50, std::nullopt, "none")
          .sizes(),
      (std::vector<int64_t>{0, 50}));
}

TEST(LinearCpu, LeadingDimsAndStridedInput) {
  SKIP_WITHOUT_AVX512();
  torch::manual_seed(2);
  const auto w = torch::randn({64, 24});
  const auto b = torch::randn({64});
  const auto packed = pack_linear_weight_cpu(w);
  // [24, 2, 5] transposed to [5, 2, 24]: not contiguous.
  const auto x = torch::randn({24, 2, 5}).permute({2, 1, 0});
  ASSERT_FALSE(x.is_contiguous());
  const auto y = linear_packed_cpu(x, packed, 64, b, "gelu");
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{5, 2, 64}));
  EXPECT_TRUE(torch::equal(y, linear_packed_cpu(x.contiguous(), packed, 64, b, "gelu")));
  expect_within(y, expected(x, w, b, "gelu"), "strided");
}

TEST(LinearCpu, NanStaysInItsRow) {
  SKIP_WITHOUT_AVX512();
  torch::manual_seed(3);
  auto x = torch::randn({30, 16});
  x[17][3] = std::numeric_limits<float>::quiet_NaN();
  const auto w = torch::randn({40, 16});
  const auto y = linear_packed_cpu(x, pack_linear_weight_cpu(w), 40, torch::randn({40}), "gelu");
  EXPECT_TRUE(torch::isnan(y[17]).all().item<bool>());
  EXPECT_TRUE(torch::isfinite(y.index({torch::indexing::Slice(0, 17)})).all().item<bool>());
  EXPECT_TRUE(torch::isfinite(y.index({torch::indexing::Slice(18)})).all().item<bool>());
}

TEST(LinearCpu, RefusesWhatItCannotRun) {
  SKIP_WITHOUT_AVX512();
  const auto x = torch::randn({4, 8});
  const auto w = torch::randn({40, 8});
  const auto packed = pack_linear_weight_cpu(w);
  const auto message = [](auto&& call) {
    try {
      call();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message([&] { linear_packed_cpu(x.to(torch::kDouble), packed, 40, {}, "none"); }),
              HasSubstr("x must be a float32 CPU tensor"));
  EXPECT_THAT(message([&] { linear_packed_cpu(x, packed, 70, {}, "none"); }),
              HasSubstr("packed must be pack_linear_weight_cpu's"));
  EXPECT_THAT(message([&] {
                linear_packed_cpu(torch::randn({4, 9}), packed, 40, {}, "none");
              }),
              HasSubstr("packed must be pack_linear_weight_cpu's"));
  EXPECT_THAT(message([&] { linear_packed_cpu(x, packed, 40, torch::randn({39}), "none"); }),
              HasSubstr("bias must be [40]"));
  EXPECT_THAT(message([&] { linear_packed_cpu(x, packed, 40, {}, "tanh"); }),
              HasSubstr("activation must be none, gelu, gelu_tanh, silu or relu"));
  EXPECT_THAT(message([&] {
                pack_linear_weight_cpu(torch::randn({3, 4, 5}));
              }),
              HasSubstr("weight must be [out_features, in_features]"));
}

}  // namespace test_linear_cpu
