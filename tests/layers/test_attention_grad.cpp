// Gradients: the math path against float64 central differences; sdpa against math; finite
// gradients through fully masked rows.
#include "attention_test_util.h"

namespace attnzoo {
namespace test_attention_grad {

using testing::max_abs_diff;

class Gradients : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(7); }
};

TEST_F(Gradients, MathPathMatchesFiniteDifferencesForSelfAttention) {
  MultiheadAttention layer(MultiheadAttentionOptions(12, 3).backend("math"));
  layer->to(torch::kDouble);
  auto x = torch::randn({2, 5, 12}, torch::kDouble).requires_grad_();
  auto bias = torch::randn({1, 3, 5, 5}, torch::kDouble).requires_grad_();
  const auto weights = torch::randn({2, 5, 12}, torch::kDouble);
  const auto mask = AttentionMask()
                        .key_lengths(torch::tensor({5L, 3L}))
                        .attn_mask(torch::rand({5, 5}) < 0.2)
                        .bias(bias);
  const auto loss = [&] { return (layer(x, mask) * weights).sum(); };
  testing::expect_gradient_near_central_differences(loss, x, "x");
  testing::expect_gradient_near_central_differences(loss, bias, "bias");
  testing::expect_gradient_near_central_differences(loss, layer->qkv->weight, "qkv.weight", 60);
  testing::expect_gradient_near_central_differences(loss, layer->qkv->bias, "qkv.bias");
  testing::expect_gradient_near_central_differences(loss, layer->proj->weight, "proj.weight", 30);
}

TEST_F(Gradients, MathPathMatchesFiniteDifferencesForCrossAttention) {
  MultiheadAttention layer(
      MultiheadAttentionOptions(8, 2).cross_attention(true).kv_dim(6).qk_norm(true).backend(
          "math"));
  layer->to(torch::kDouble);
  auto query = torch::randn({2, 3, 8}, torch::kDouble).requires_grad_();
  auto memory = torch::randn({2, 4, 6}, torch::kDouble).requires_grad_();
  const auto weights = torch::randn({2, 3, 8}, torch::kDouble);
  const auto mask = AttentionMask().causal(true, CausalAlignment::kBottomRight);
  const auto loss = [&] { return (layer->forward_cross(query, memory, mask) * weights).sum(); };
  testing::expect_gradient_near_central_differences(loss, query, "query");
  testing::expect_gradient_near_central_differences(loss, memory, "memory");
  testing::expect_gradient_near_central_differences(loss, layer->kv->weight, "kv.weight");
}

// Gradients of q, k, v and bias from one backend, for the same upstream gradient.
std::vector<torch::Tensor> backend_grads(const testing::Qkv& t, const torch::Tensor& bias,
                                         AttentionMask mask, const std::string& backend,
                                         const torch::Tensor& upstream) {
  auto q = t.q.detach().clone().requires_grad_();
  auto k = t.k.detach().clone().requires_grad_();
  auto v = t.v.detach().clone().requires_grad_();
  auto b = bias.detach().clone().requires_grad_();
  const auto out = testing::run_backend({q, k, v}, mask.bias(b), backend).output;
  (out * upstream).sum().backward();
  return {q.grad(), k.grad(), v.grad(), b.grad()};
}

TEST_F(Gradients, SdpaGradientsEqualMathGradients) {
  const auto t = testing::random_qkv(3, 2, 7, 9, 36);
  const auto bias = torch::randn({3, 2, 7, 9});
  const auto upstream = torch::randn({3, 2, 7, 36});
  auto attn = torch::rand({7, 9}) < 0.3;
  attn[4].fill_(true);  // a fully masked row
  const std::vector<std::pair<std::string, AttentionMask>> cases = {
      {"bias only", AttentionMask()},
      {"lengths", AttentionMask().key_lengths(torch::tensor({9L, 2L, 0L}))},
      {"attn_mask with an empty row", AttentionMask().attn_mask(attn)},
      {"causal", AttentionMask().causal()},
  };
  const char* names[] = {"q", "k", "v", "bias"};
  for (const auto& [label, mask] : cases) {
    SCOPED_TRACE(label);
    const auto math = backend_grads(t, bias, mask, "math", upstream);
    const auto sdpa = backend_grads(t, bias, mask, "sdpa", upstream);
    for (size_t i = 0; i < math.size(); ++i) {
      ASSERT_TRUE(sdpa[i].defined()) << names[i];
      EXPECT_TRUE(torch::isfinite(math[i]).all().item<bool>()) << names[i];
      EXPECT_TRUE(torch::isfinite(sdpa[i]).all().item<bool>()) << names[i];
      EXPECT_LE(max_abs_diff(math[i], sdpa[i]), 1e-5) << names[i];
    }
  }
}

TEST_F(Gradients, FullyMaskedRowsHaveFiniteZeroGradients) {
  const auto t = testing::random_qkv(2, 2, 4, 5, 8);
  const auto upstream = torch::randn({2, 2, 4, 8});
  const auto mask = AttentionMask().key_lengths(torch::tensor({5L, 0L}));
  for (const char* backend : {"math", "sdpa"}) {
    SCOPED_TRACE(backend);
    const auto grads = backend_grads(t, torch::zeros({2, 2, 4, 5}), mask, backend, upstream);
    for (const auto& g : grads) {
      EXPECT_TRUE(torch::isfinite(g).all().item<bool>());
      EXPECT_EQ(g[1].abs().max().item<double>(), 0.0);  // batch 1 sees nothing
    }
  }
}

}  // namespace test_attention_grad
}  // namespace attnzoo
