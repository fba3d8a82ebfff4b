// Dynamic head gating (per-sample softmax gates over the heads), inside the fused layer: against
// a head-by-head float64 reference.
#include "attention_test_util.h"

namespace attnzoo {
namespace test_attention_gating {

using testing::max_abs_diff;

// The notes' structure, done right: every head attends on its own, is scaled by H·softmax gate and
// projected by its slice of the output projection; the gate input is the mean over valid frames.
torch::Tensor head_by_head(MultiheadAttentionImpl& layer, const torch::Tensor& x,
                           const torch::Tensor& lengths) {
  const int64_t batch = x.size(0), length = x.size(1), d = x.size(2);
  const int64_t heads = layer.options.num_heads(), e = layer.head_dim();
  const auto w = layer.qkv->weight, b = layer.qkv->bias;
  auto out = torch::zeros({batch, length, d}, x.options());
  for (int64_t bi = 0; bi < batch; ++bi) {
    const int64_t valid = lengths[bi].item<int64_t>();
    const auto xb = x[bi];                                          // [L, D]
    const auto pooled = xb.narrow(0, 0, valid).mean(0);             // [D]
    const auto gates = torch::softmax(layer.head_gate(pooled), 0);  // [H]
    auto yb = layer.proj->bias.expand({length, d}).clone();
    for (int64_t h = 0; h < heads; ++h) {
      const auto rows = [&](int64_t which) { return w.narrow(0, which * heads * e + h * e, e); };
      const auto bias = [&](int64_t which) { return b.narrow(0, which * heads * e + h * e, e); };
      const auto q = torch::addmm(bias(0), xb, rows(0).t());  // [L, E]
      const auto k = torch::addmm(bias(1), xb, rows(1).t()).narrow(0, 0, valid);
      const auto v = torch::addmm(bias(2), xb, rows(2).t()).narrow(0, 0, valid);
      const auto probs = torch::softmax(q.mm(k.t()) / std::sqrt(static_cast<double>(e)), -1);
      const auto head_out = probs.mm(v) * (static_cast<double>(heads) * gates[h]);
      yb = yb + head_out.mm(layer.proj->weight.narrow(1, h * e, e).t());
    }
    out[bi] = yb;
  }
  return out;
}

TEST(HeadGating, MatchesTheHeadByHeadReference) {
  torch::manual_seed(11);
  MultiheadAttention layer(MultiheadAttentionOptions(24, 4).head_gating(true).backend("math"));
  layer->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    layer->head_gate->weight.normal_(0.0, 0.5);  // non-uniform gates
    layer->head_gate->bias.normal_();
    layer->qkv->bias.normal_();
  }
  const auto x = torch::randn({3, 6, 24}, torch::kDouble);
  const auto lengths = torch::tensor({6L, 2L, 5L});
  const auto expected = head_by_head(*layer, x, lengths);
  for (const char* backend : {"math", "sdpa", "auto"}) {
    layer->set_backend(backend);
    const auto out = layer(x, AttentionMask().key_lengths(lengths));
    for (int64_t bi = 0; bi < 3; ++bi) {
      // Padded query rows still attend (to the valid keys): compare the valid rows only.
      const int64_t valid = lengths[bi].item<int64_t>();
      EXPECT_LE(max_abs_diff(out[bi].narrow(0, 0, valid), expected[bi].narrow(0, 0, valid)), 1e-10)
          << backend << " batch " << bi;
    }
  }
  const auto with_weights =
      layer->forward_with_weights(x, {}, AttentionMask().key_lengths(lengths));
  ASSERT_TRUE(with_weights.head_gates.defined());
  EXPECT_EQ(with_weights.head_gates.sizes(), (std::vector<int64_t>{3, 4}));
  const auto sums = with_weights.head_gates.sum(-1);
  EXPECT_LE(max_abs_diff(sums, torch::ones_like(sums)), 1e-12);
  EXPECT_GT(
      with_weights.head_gates.max().item<double>() - with_weights.head_gates.min().item<double>(),
      1e-3);
}

TEST(HeadGating, StartsUniformSoTheLayerEqualsTheUngatedOne) {
  torch::manual_seed(12);
  MultiheadAttention gated(MultiheadAttentionOptions(32, 4).head_gating(true));
  MultiheadAttention plain(MultiheadAttentionOptions(32, 4));
  {
    torch::NoGradGuard no_grad;
    plain->qkv->weight.copy_(gated->qkv->weight);
    plain->proj->weight.copy_(gated->proj->weight);
  }
  const auto x = torch::randn({2, 9, 32});
  EXPECT_LE(max_abs_diff(gated(x), plain(x)), 1e-6);
  EXPECT_EQ(gated->named_parameters().size(), plain->named_parameters().size() + 2);
}

TEST(HeadGating, PaddingDoesNotChangeTheGatesOrTheValidFrames) {
  torch::manual_seed(13);
  MultiheadAttention layer(MultiheadAttentionOptions(16, 2).head_gating(true));
  {
    torch::NoGradGuard no_grad;
    layer->head_gate->weight.normal_();
  }
  const auto x = torch::randn({1, 5, 16});
  const auto padded = torch::cat({x, 100 * torch::randn({1, 4, 16})}, 1);
  const auto alone = layer->forward_with_weights(x);
  const auto batched =
      layer->forward_with_weights(padded, {}, AttentionMask().key_lengths(torch::tensor({5L})));
  EXPECT_LE(max_abs_diff(alone.head_gates, batched.head_gates), 1e-6);
  EXPECT_LE(max_abs_diff(alone.output, batched.output.narrow(1, 0, 5)), 1e-5);
}

TEST(HeadGating, GatesReceiveGradients) {
  torch::manual_seed(14);
  MultiheadAttention layer(MultiheadAttentionOptions(16, 4).head_gating(true));
  const auto x = torch::randn({2, 7, 16});
  (layer(x) * torch::randn({2, 7, 16})).sum().backward();
  ASSERT_TRUE(layer->head_gate->weight.grad().defined());
  EXPECT_GT(layer->head_gate->weight.grad().abs().max().item<double>(), 0.0);
}

}  // namespace test_attention_gating
}  // namespace attnzoo
