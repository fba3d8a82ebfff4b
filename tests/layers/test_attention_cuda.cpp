// The attention layer on CUDA: half precision through every backend, against float64 on the CPU.
// Skipped (visibly) without a GPU.
#include "attention_test_util.h"

namespace attnzoo {
namespace test_attention_cuda {

using testing::max_abs_diff;

#define SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine"

TEST(AttentionCuda, HalfTypesWithinTwiceLibTorchsError_CUDA) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(3);
  for (const auto dtype : {torch::kHalf, torch::kBFloat16}) {
    for (const int64_t e : {36, 64}) {
      const auto t = testing::random_qkv(4, 3, 197, 197, e, torch::kDouble);
      const auto lengths = torch::tensor({197L, 100L, 1L, 0L});
      const auto bias = torch::randn({1, 3, 197, 197}, torch::kDouble);
      const auto mask = AttentionMask().key_lengths(lengths).bias(bias);
      const auto reference = testing::run_backend(t, mask, "math").output;
      const auto cuda_mask =
          AttentionMask().key_lengths(lengths.cuda()).bias(bias.cuda().to(dtype));
      const testing::Qkv half{t.q.cuda().to(dtype), t.k.cuda().to(dtype), t.v.cuda().to(dtype)};
      // LibTorch's own path at the same precision sets the bar (FlashAttention's rule).
      const double libtorch_error =
          max_abs_diff(testing::run_backend(half, cuda_mask, "math").output.cpu(), reference);
      for (const char* backend : {"sdpa", "auto"}) {
        const auto out = testing::run_backend(half, cuda_mask, backend).output;
        EXPECT_EQ(out.scalar_type(), dtype);
        EXPECT_TRUE(torch::isfinite(out).all().item<bool>()) << backend;
        EXPECT_LE(max_abs_diff(out.cpu(), reference), 2 * libtorch_error + 1e-3)
            << backend << " " << dtype << " E=" << e;
      }
    }
  }
}

TEST(AttentionCuda, LayerRunsInHalfPrecisionWithGradients_CUDA) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(4);
  MultiheadAttention layer(MultiheadAttentionOptions(256, 4).backend("auto"));
  MultiheadAttention reference(MultiheadAttentionOptions(256, 4).backend("math"));
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : layer->named_parameters()) {
      reference->named_parameters()[item.key()].copy_(item.value());
    }
  }
  layer->to(torch::kCUDA, torch::kBFloat16);
  reference->to(torch::kDouble);
  const auto x = torch::randn({3, 50, 256}, torch::kDouble);
  const auto mask = AttentionMask().key_lengths(torch::tensor({50L, 20L, 0L}));
  const auto expected = reference(x, mask);
  auto x_cuda = x.to(torch::kCUDA, torch::kBFloat16).requires_grad_();
  const auto out = layer(x_cuda, AttentionMask().key_lengths(torch::tensor({50L, 20L, 0L}).cuda()));
  EXPECT_LE(max_abs_diff(out.cpu(), expected), 5e-2);
  out.sum().backward();
  EXPECT_TRUE(torch::isfinite(x_cuda.grad()).all().item<bool>());
}

}  // namespace test_attention_cuda
}  // namespace attnzoo
