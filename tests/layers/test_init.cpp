// Initialisation schemes: the statistics each one promises.
#include "attention_test_util.h"

#include <attnzoo/layers/init.h>

#include <cmath>

namespace attnzoo {
namespace test_init {

double std_of(const torch::Tensor& t) { return t.std().item<double>(); }

TEST(Init, TruncNormalRespectsBoundsAndStd) {
  torch::manual_seed(0);
  auto t = torch::empty({200000});
  trunc_normal_(t, 0.0, 1.0, -1.0, 1.0);
  EXPECT_GE(t.min().item<double>(), -1.0);
  EXPECT_LE(t.max().item<double>(), 1.0);
  // The standard normal truncated to [-1, 1] has std sqrt(1 - 2·φ(1)/(2Φ(1) − 1)) ≈ 0.5379.
  EXPECT_NEAR(std_of(t), 0.5379, 0.005);
  trunc_normal_(t, 0.0, 0.02);
  EXPECT_NEAR(std_of(t), 0.02, 0.0005);
  EXPECT_THROW(trunc_normal_(t, 0.0, -1.0), c10::Error);
}

TEST(Init, TruncNormalIsTimmsDefault) {
  torch::manual_seed(1);
  MultiheadAttention layer(MultiheadAttentionOptions(384, 6));
  EXPECT_NEAR(std_of(layer->qkv->weight), 0.02, 0.001);
  EXPECT_NEAR(std_of(layer->proj->weight), 0.02, 0.001);
  EXPECT_EQ(layer->qkv->bias.abs().max().item<double>(), 0.0);
  EXPECT_EQ(layer->proj->bias.abs().max().item<double>(), 0.0);
}

TEST(Init, XavierQkDrawsQAndKUniformlyAndVSmall) {
  torch::manual_seed(2);
  const int64_t d = 512;
  MultiheadAttention layer(MultiheadAttentionOptions(d, 8).init(AttentionInit::kXavierQk));
  const auto w = layer->qkv->weight;
  // Each of q and k is its own [D, D] Xavier-uniform draw: bound sqrt(6 / 2D), std bound/sqrt(3).
  const double bound = std::sqrt(6.0 / (2.0 * d));
  for (int64_t slice = 0; slice < 2; ++slice) {
    const auto part = w.narrow(0, slice * d, d);
    EXPECT_LE(part.abs().max().item<double>(), bound);
    EXPECT_NEAR(std_of(part), bound / std::sqrt(3.0), 0.002);
  }
  EXPECT_NEAR(std_of(w.narrow(0, 2 * d, d)), 0.02, 0.001);
  EXPECT_EQ(layer->proj->bias.abs().max().item<double>(), 0.0);
  EXPECT_EQ(layer->qkv->bias.abs().max().item<double>(), 0.0);
}

TEST(Init, JaxDrawsEachProjectionLikeASeparateLayer) {
  torch::manual_seed(3);
  const int64_t d = 256;
  MultiheadAttention layer(
      MultiheadAttentionOptions(d, 4).cross_attention(true).kv_dim(128).init(AttentionInit::kJax));
  const double q_bound = std::sqrt(6.0 / (d + d));
  const double kv_bound = std::sqrt(6.0 / (128 + d));
  EXPECT_NEAR(layer->q->weight.abs().max().item<double>(), q_bound, q_bound * 0.01);
  for (int64_t slice = 0; slice < 2; ++slice) {
    const auto part = layer->kv->weight.narrow(0, slice * d, d);
    EXPECT_NEAR(part.abs().max().item<double>(), kv_bound, kv_bound * 0.01);
    EXPECT_NEAR(std_of(part), kv_bound / std::sqrt(3.0), 0.003);
  }
  EXPECT_EQ(layer->kv->bias.abs().max().item<double>(), 0.0);
}

}  // namespace test_init
}  // namespace attnzoo
