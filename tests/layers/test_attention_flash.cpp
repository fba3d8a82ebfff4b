// The `flash` backend: how it turns every mask kind into the kernel's inputs (key lengths, causal,
// one additive bias), checked on the CPU in float64, where attnzoo::flash_attention runs its
// LibTorch reference, against `math`, values and gradients; the CPU kernel (float32 and bfloat16)
// through the backend with every mask kind; where `auto` takes it and where it refuses; and, on a
// GPU, the fused kernel through the layer within twice LibTorch's own error.
#include "attention_test_util.h"

#include <attnzoo/kernels/ops.h>

#include <gmock/gmock.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace attnzoo {
namespace test_attention_flash {

using testing::max_abs_diff;

#define SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine"

// The problem with its scale stated (1/√E).
AttentionProblem scaled_problem_of(const testing::Qkv& t, const AttentionMask& mask) {
  auto p = testing::problem_of(t, mask);
  p.scale = 1.0 / std::sqrt(static_cast<double>(t.q.size(3)));
  return p;
}

// The backend's run() on float64 CPU tensors: the mask translation through the op's reference
// implementation.
TEST(FlashBackend, EveryMaskKindEqualsMathOnTheReference) {
  torch::manual_seed(11);
  const auto flash = make_flash_attention_backend();
  const auto math = make_math_attention_backend();
  for (const auto& [b, h, l, s, e] :
       std::vector<std::array<int64_t, 5>>{{2, 3, 5, 7, 36}, {3, 2, 9, 9, 16}, {1, 1, 1, 4, 8}}) {
    const auto t = testing::random_qkv(b, h, l, s, e, torch::kDouble);
    for (const auto& [name, mask] : testing::all_mask_cases(b, h, l, s, torch::kDouble)) {
      const auto p = scaled_problem_of(t, mask);
      const auto expected = math->run(p).output;
      const auto got = flash->run(p).output;
      ASSERT_EQ(got.sizes(), expected.sizes()) << name;
      EXPECT_LE(max_abs_diff(got, expected), 1e-12) << name << " B=" << b << " L=" << l;
    }
  }
}

TEST(FlashBackend, GradientsEqualMathOnTheReference) {
  torch::manual_seed(12);
  const auto flash = make_flash_attention_backend();
  const auto math = make_math_attention_backend();
  const int64_t b = 2, h = 2, l = 6, s = 8, e = 12;
  const auto padding =
      torch::tensor({0, 0, 1, 0, 0, 1, 1, 1}, torch::kBool).unsqueeze(0).expand({b, s}).clone();
  padding[1].fill_(false);
  const auto bias = torch::randn({1, h, l, s}, torch::kDouble);
  const auto mask = AttentionMask()
                        .key_padding_mask(padding)
                        .attn_mask(torch::rand({l, s}) < 0.2)
                        .key_lengths(torch::tensor({8L, 5L}))
                        .causal(true, CausalAlignment::kBottomRight);
  const auto t = testing::random_qkv(b, h, l, s, e, torch::kDouble);
  std::vector<std::vector<torch::Tensor>> grads;
  for (const auto* backend : {math.get(), flash.get()}) {
    auto q = t.q.clone().requires_grad_(), k = t.k.clone().requires_grad_(),
         v = t.v.clone().requires_grad_(), bb = bias.clone().requires_grad_();
    auto m = mask;
    m.bias(bb);
    auto p = scaled_problem_of({q, k, v}, m);
    const auto out = backend->run(p).output;
    (out * torch::cos(out)).sum().backward();
    grads.push_back({q.grad(), k.grad(), v.grad(), bb.grad()});
  }
  const char* names[] = {"q", "k", "v", "bias"};
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(grads[1][i].defined()) << names[i];
    EXPECT_LE(max_abs_diff(grads[1][i], grads[0][i]), 1e-10) << names[i];
    EXPECT_GT(grads[0][i].abs().max().item<double>(), 1e-3) << names[i];  // not vacuous
  }
}

// The CPU kernel through the backend, every mask kind, float32 and bfloat16, against float64
// math: within twice the error of `math` in the same dtype, plus two units in the last place.
TEST(FlashBackend, CpuKernelThroughTheBackendWithinTwiceMathsError) {
  if (kernels::flash_attention_cpu_vector_width() == 0) {
    GTEST_SKIP() << "the CPU has no AVX2 + FMA: the CPU kernel is untested";
  }
  torch::manual_seed(14);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const auto& [b, h, l, s, e] : std::vector<std::array<int64_t, 5>>{
             {2, 3, 197, 197, 64}, {2, 2, 30, 300, 36}, {1, 2, 9, 5, 8}}) {
      const auto t = testing::random_qkv(b, h, l, s, e, torch::kDouble);
      for (const auto& [name, mask] : testing::all_mask_cases(b, h, l, s, torch::kDouble)) {
        const auto expected = testing::run_backend(t, mask, "math").output;
        AttentionMask m = mask;
        if (mask.bias().defined()) m.bias(mask.bias().to(dtype));
        const testing::Qkv low{t.q.to(dtype), t.k.to(dtype), t.v.to(dtype)};
        const double math_error =
            max_abs_diff(testing::run_backend(low, m, "math").output, expected);
        const auto got = testing::run_backend(low, m, "flash").output;
        ASSERT_EQ(got.scalar_type(), dtype) << name;
        const double eps = dtype == torch::kFloat ? std::ldexp(1.0, -23) : std::ldexp(1.0, -7);
        const double ulp = 2 * eps * expected.abs().max().item<double>();
        EXPECT_LE(max_abs_diff(got, expected), 2 * math_error + ulp)
            << c10::toString(dtype) << " " << name << " L=" << l << " S=" << s << ": math's error "
            << math_error;
      }
    }
  }
}

TEST(FlashBackend, AutoTakesItOnlyWhereTheKernelRuns) {
  const auto t = testing::random_qkv(1, 2, 4, 4, 8);
  auto p = scaled_problem_of(t, AttentionMask());
  // The CPU, float32 inference: flash where the processor has AVX-512 and AVX512-BF16, else sdpa
  // (also when opted in: ATTNZOO_FLASH_AUTO is CUDA's); sdpa where gradients are recorded. Asked
  // by name, flash runs float32 where the CPU kernel does and says why not for float64.
  const bool avx512 = kernels::flash_attention_cpu_vector_width() == 16 &&
                      kernels::flash_attention_cpu_bfloat16_products();
  EXPECT_EQ(select_attention_backend("auto", p).name(), avx512 ? "flash" : "sdpa");
  {
    const char* was = std::getenv("ATTNZOO_FLASH_AUTO");
    const std::string kept = was ? was : "";
    setenv("ATTNZOO_FLASH_AUTO", "1", 1);
    EXPECT_EQ(select_attention_backend("auto", p).name(), avx512 ? "flash" : "sdpa");
    if (was) {
      setenv("ATTNZOO_FLASH_AUTO", kept.c_str(), 1);
    } else {
      unsetenv("ATTNZOO_FLASH_AUTO");
    }
    auto trained = p;
    trained.query = trained.query.detach().requires_grad_();
    EXPECT_EQ(select_attention_backend("auto", trained).name(), "sdpa");
  }
  // bfloat16 inference: flash where the CPU has AVX512-BF16 products, else sdpa; sdpa again
  // where gradients are recorded (the CPU backward is the reference's) or weights are asked for.
  {
    const testing::Qkv low{t.q.to(torch::kBFloat16), t.k.to(torch::kBFloat16),
                           t.v.to(torch::kBFloat16)};
    auto b = scaled_problem_of(low, AttentionMask());
    const bool products = kernels::flash_attention_cpu_bfloat16_products();
    EXPECT_EQ(select_attention_backend("auto", b).name(), products ? "flash" : "sdpa");
    b.query = b.query.detach().requires_grad_();
    EXPECT_EQ(select_attention_backend("auto", b).name(), "sdpa");
    {
      torch::NoGradGuard inference;
      EXPECT_EQ(select_attention_backend("auto", b).name(), products ? "flash" : "sdpa");
    }
    b.need_weights = true;
    EXPECT_EQ(select_attention_backend("auto", b).name(), "math");
  }
  if (kernels::flash_attention_cpu_vector_width() > 0) {
    EXPECT_EQ(select_attention_backend("flash", p).name(), "flash");
  } else {
    EXPECT_THAT(testing::error_of([&] { select_attention_backend("flash", p); }),
                ::testing::HasSubstr("its CPU kernel needs AVX2 + FMA"));
  }
  const auto t64 = testing::random_qkv(1, 2, 4, 4, 8, torch::kDouble);
  EXPECT_THAT(testing::error_of([&] {
                select_attention_backend("flash", scaled_problem_of(t64, AttentionMask()));
              }),
              ::testing::HasSubstr(kernels::flash_attention_cpu_vector_width() > 0
                                       ? "on the CPU it takes float32 and bfloat16, got Double"
                                       : "its CPU kernel needs AVX2 + FMA"));
  EXPECT_EQ(attention_backend_names().front(), "flash");
  if (!torch::cuda::is_available() || !ATTNZOO_WITH_CUDA) return;
  const testing::Qkv cuda{t.q.cuda().to(torch::kBFloat16), t.k.cuda().to(torch::kBFloat16),
                          t.v.cuda().to(torch::kBFloat16)};
  p = scaled_problem_of(cuda, AttentionMask());
  // auto takes the kernel only when opted in (ATTNZOO_FLASH_AUTO=1), until it is verified.
  const char* before = std::getenv("ATTNZOO_FLASH_AUTO");
  const std::string saved = before ? before : "";
  unsetenv("ATTNZOO_FLASH_AUTO");
  EXPECT_EQ(select_attention_backend("auto", p).name(), "sdpa");
  setenv("ATTNZOO_FLASH_AUTO", "1", 1);
  EXPECT_EQ(select_attention_backend("auto", p).name(), "flash");
  p.dropout_p = 0.1;
  EXPECT_EQ(select_attention_backend("auto", p).name(), "sdpa");
  p.dropout_p = 0.0;
  p.need_weights = true;
  EXPECT_EQ(select_attention_backend("auto", p).name(), "math");
  const testing::Qkv single{t.q.cuda(), t.k.cuda(), t.v.cuda()};
  EXPECT_EQ(select_attention_backend("auto", scaled_problem_of(single, AttentionMask())).name(),
            "sdpa");
  if (before) {
    setenv("ATTNZOO_FLASH_AUTO", saved.c_str(), 1);
  } else {
    unsetenv("ATTNZOO_FLASH_AUTO");
  }
}

// The fused kernel through the layer's backend: every mask kind at a Conformer-like head dim (36,
// padded to 64) and at 64, against float64 math, within twice LibTorch's own error in the same
// dtype (FlashAttention's rule).
TEST(FlashBackend, KernelThroughTheBackendWithinTwiceLibTorchsError_CUDA) {
  SKIP_WITHOUT_CUDA();
  if (!ATTNZOO_WITH_CUDA) GTEST_SKIP() << "the CUDA kernels are not built";
  torch::manual_seed(13);
  for (const auto dtype : {torch::kHalf, torch::kBFloat16}) {
    for (const auto& [b, h, l, s, e] : std::vector<std::array<int64_t, 5>>{
             {3, 4, 197, 197, 64}, {2, 4, 150, 150, 36}, {2, 2, 7, 70, 40}}) {
      const auto t = testing::random_qkv(b, h, l, s, e, torch::kDouble);
      for (const auto& [name, mask] : testing::all_mask_cases(b, h, l, s, torch::kDouble)) {
        const auto expected = testing::run_backend(t, mask, "math").output;
        // The same mask on the GPU, its bias in the inputs' dtype.
        AttentionMask m;
        if (mask.key_lengths().defined()) m.key_lengths(mask.key_lengths().cuda());
        if (mask.key_padding_mask().defined()) m.key_padding_mask(mask.key_padding_mask().cuda());
        if (mask.attn_mask().defined()) m.attn_mask(mask.attn_mask().cuda());
        if (mask.bias().defined()) m.bias(mask.bias().cuda().to(dtype));
        m.causal(mask.causal(), mask.causal_alignment());
        const testing::Qkv half{t.q.cuda().to(dtype), t.k.cuda().to(dtype), t.v.cuda().to(dtype)};
        const double libtorch_error =
            max_abs_diff(testing::run_backend(half, m, "math").output.cpu(), expected);
        const auto out = testing::run_backend(half, m, "flash").output;
        EXPECT_TRUE(torch::isfinite(out).all().item<bool>()) << name;
        EXPECT_LE(max_abs_diff(out.cpu(), expected), 2 * libtorch_error + 1e-4)
            << name << " " << dtype << " E=" << e << " L=" << l;
      }
    }
  }
}

}  // namespace test_attention_flash
}  // namespace attnzoo
