// MultiheadAttention at inference on the CPU splits its fused QKV projection into heads and
// merges the heads back without copying: q, k and v are strided views of the projection's
// output, which LibTorch's CPU flash attention reads as they are, and its output, laid out as
// [B, L, H, E] and returned as the [B, H, L, E] transpose, merges into [B, L, H·E] as a view.
// Counted through the dispatcher: no copy_ or clone in the layer's forward, and the output still
// equals the math backend's.
#include <attnzoo/layers/attention.h>

#include <torch/torch.h>

#include "common/op_counter.h"
#include "common/test_util.h"

#include <gtest/gtest.h>

#include <string>

namespace attnzoo {
namespace test_attention_copies {

TEST(AttentionCopies, SelfAttentionAtCpuInferenceSplitsAndMergesHeadsWithoutACopy) {
  struct Case {
    int64_t batch, length, dim, heads;
  };
  // ViT-B/16 at 224 (head_dim 64), a batch of ViT-S, and Conformer-S's head_dim 36.
  const Case cases[] = {{1, 197, 768, 12}, {3, 197, 384, 6}, {2, 50, 144, 4}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::to_string(c.batch) + " x " + std::to_string(c.length) + " x " +
                 std::to_string(c.dim) + ", " + std::to_string(c.heads) + " heads");
    torch::manual_seed(0);
    MultiheadAttention attn(MultiheadAttentionOptions(c.dim, c.heads));
    attn->eval();
    torch::NoGradGuard no_grad;
    const auto x = torch::randn({c.batch, c.length, c.dim});
    // The first call packs the linear layers' weights, once (PackedLinear); what is counted is a
    // forward's own copies.
    attn(x);
    torch::Tensor y;
    {
      testing::OpCounter counter({"aten::copy_", "aten::clone"});
      y = attn(x);
      EXPECT_EQ(counter.calls("aten::copy_"), 0);
      EXPECT_EQ(counter.calls("aten::clone"), 0);
    }
    attn->set_backend("math");
    EXPECT_LE(testing::max_abs_diff(y, attn(x)), 1e-5);
  }
}

}  // namespace test_attention_copies
}  // namespace attnzoo
