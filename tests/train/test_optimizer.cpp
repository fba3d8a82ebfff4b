// AdamW with parameter groups and per-slice learning rates against LibTorch's own
// torch::optim::AdamW: on ordinary groups the same trajectory; on a fused q/k/v weight with
// per-slice settings, the trajectory that separate q, k and v weights with their own AdamW groups
// follow. The schedule, the default no-decay set, the state round trip and the errors.
#include <attnzoo/train/optimizer.h>
#include "common/test_util.h"

#include <attnzoo/layers/attention.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

namespace attnzoo {
namespace test_optimizer {
using testing::error_of;

using ::testing::HasSubstr;

torch::OrderedDict<std::string, torch::Tensor> named(
    std::initializer_list<std::pair<std::string, torch::Tensor>> items) {
  torch::OrderedDict<std::string, torch::Tensor> out;
  for (const auto& [k, v] : items) out.insert(k, v);
  return out;
}

TEST(AdamW, OrdinaryGroupsFollowLibTorchsAdamW) {
  torch::manual_seed(0);
  auto w = torch::randn({6, 4}, torch::kDouble).requires_grad_();
  auto b = torch::randn({6}, torch::kDouble).requires_grad_();
  auto w_ref = w.detach().clone().requires_grad_();
  auto b_ref = b.detach().clone().requires_grad_();
  AdamWOptions o;
  o.lr = 3e-2;
  o.weight_decay = 0.05;
  o.rules = {{"b", 1e-2, 0.2, {}}};  // its own lr and (explicit) decay
  o.no_decay_on_norms_biases_tokens = false;
  AdamW ours(named({{"w", w}, {"b", b}}), o);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{w_ref},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(3e-2).weight_decay(0.05)));
  groups.emplace_back(std::vector<torch::Tensor>{b_ref},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(1e-2).weight_decay(0.2)));
  torch::optim::AdamW reference(std::move(groups));
  for (int step = 0; step < 6; ++step) {
    const auto gw = torch::randn({6, 4}, torch::kDouble), gb = torch::randn({6}, torch::kDouble);
    w.mutable_grad() = gw.clone();
    b.mutable_grad() = gb.clone();
    w_ref.mutable_grad() = gw.clone();
    b_ref.mutable_grad() = gb.clone();
    ours.step();
    reference.step();
  }
  EXPECT_LE((w - w_ref).abs().max().item<double>(), 1e-12);
  EXPECT_LE((b - b_ref).abs().max().item<double>(), 1e-12);
  EXPECT_EQ(ours.steps(), 6);
}

// A per-projection recipe on a fused qkv: q and k 1e-4, v 2e-4, the output projection 5e-5,
// weight decay 0.01, equals three separate weights in three LibTorch AdamW groups.
TEST(AdamW, PerSliceRatesOnAFusedQkvEqualSeparateWeights) {
  torch::manual_seed(1);
  MultiheadAttention attn(MultiheadAttentionOptions(8, 2));
  attn->to(torch::kDouble);
  AdamWOptions o;
  o.lr = 1e-3;
  o.weight_decay = 0.01;
  o.rules = {
      {R"(qkv\.(weight|bias))", std::nullopt, std::nullopt, {{1e-4, {}}, {1e-4, {}}, {2e-4, {}}}},
      {R"(proj\..*)", 5e-5, std::nullopt, {}}};
  // Separate copies of q, k, v rows (weights and biases), before any step.
  const auto qkv_w = attn->qkv->weight, qkv_b = attn->qkv->bias;
  std::vector<torch::Tensor> parts;
  for (int i = 0; i < 3; ++i) {
    parts.push_back(qkv_w.detach().narrow(0, 8 * i, 8).clone().requires_grad_());
    parts.push_back(qkv_b.detach().narrow(0, 8 * i, 8).clone().requires_grad_());
  }
  AdamW ours(attn->named_parameters(), o);
  EXPECT_EQ(ours.learning_rate("qkv.weight").sizes(), (torch::IntArrayRef{24, 1}));
  EXPECT_DOUBLE_EQ(ours.learning_rate("qkv.weight")[16].item<double>(), 2e-4);
  EXPECT_DOUBLE_EQ(ours.learning_rate("proj.weight").item<double>(), 5e-5);
  EXPECT_DOUBLE_EQ(ours.weight_decay("qkv.bias")[0].item<double>(), 0.0);  // 1-D: no decay
  EXPECT_DOUBLE_EQ(ours.weight_decay("qkv.weight")[0].item<double>(), 0.01);
  EXPECT_THAT(ours.describe(), HasSubstr("qkv.weight [24, 8]: lr 0.0001 wd 0.01 | lr 0.0001 wd "
                                         "0.01 | lr 0.0002 wd 0.01"));
  std::vector<torch::optim::OptimizerParamGroup> groups;
  const double lrs[3] = {1e-4, 1e-4, 2e-4};
  for (int i = 0; i < 3; ++i) {
    groups.emplace_back(std::vector<torch::Tensor>{parts[2 * i]},
                        std::make_unique<torch::optim::AdamWOptions>(
                            torch::optim::AdamWOptions(lrs[i]).weight_decay(0.01)));
    groups.emplace_back(std::vector<torch::Tensor>{parts[2 * i + 1]},
                        std::make_unique<torch::optim::AdamWOptions>(
                            torch::optim::AdamWOptions(lrs[i]).weight_decay(0.0)));
  }
  torch::optim::AdamW reference(std::move(groups));
  for (int step = 0; step < 5; ++step) {
    const auto gw = torch::randn({24, 8}, torch::kDouble), gb = torch::randn({24}, torch::kDouble);
    qkv_w.mutable_grad() = gw.clone();
    qkv_b.mutable_grad() = gb.clone();
    for (int i = 0; i < 3; ++i) {
      parts[2 * i].mutable_grad() = gw.narrow(0, 8 * i, 8).clone();
      parts[2 * i + 1].mutable_grad() = gb.narrow(0, 8 * i, 8).clone();
    }
    ours.step();
    reference.step();
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_LE((qkv_w.narrow(0, 8 * i, 8) - parts[2 * i]).abs().max().item<double>(), 1e-12) << i;
    EXPECT_LE((qkv_b.narrow(0, 8 * i, 8) - parts[2 * i + 1]).abs().max().item<double>(), 1e-12);
  }
  // The slices moved by different amounts: v (2e-4) further than q (1e-4). Gradient scaling could
  // not do that under Adam; per-slice learning rates do.
  const auto moved = (qkv_w.detach() - torch::cat({parts[0], parts[2], parts[4]}).detach());
  EXPECT_LE(moved.abs().max().item<double>(), 1e-12);
}

TEST(AdamW, NoDecayOnNormsBiasesAndTokensByDefault) {
  auto matrix = torch::randn({4, 4}).requires_grad_();
  auto norm = torch::ones({4}).requires_grad_();
  auto token = torch::zeros({1, 1, 4}).requires_grad_();
  auto pos = torch::zeros({1, 5, 4}).requires_grad_();
  auto frozen = torch::zeros({4, 4});
  AdamW adamw(named({{"blocks.0.fc1.weight", matrix},
                     {"norm.weight", norm},
                     {"cls_token", token},
                     {"pos_embed", pos},
                     {"frozen", frozen}}),
              AdamWOptions{});
  EXPECT_DOUBLE_EQ(adamw.weight_decay("blocks.0.fc1.weight").item<double>(), 0.01);
  EXPECT_DOUBLE_EQ(adamw.weight_decay("norm.weight").item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(adamw.weight_decay("cls_token").item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(adamw.weight_decay("pos_embed").item<double>(), 0.0);
  EXPECT_THAT(error_of<c10::Error>([&] { adamw.learning_rate("frozen"); }),
              HasSubstr("no trainable parameter 'frozen'"));
}

TEST(AdamW, StateRoundTripContinuesTheSameTrajectory) {
  torch::manual_seed(2);
  const auto init = torch::randn({5, 3}, torch::kDouble);
  std::vector<torch::Tensor> grads;
  for (int i = 0; i < 8; ++i) grads.push_back(torch::randn({5, 3}, torch::kDouble));
  auto straight = init.clone().requires_grad_();
  AdamW a(named({{"p", straight}}), AdamWOptions{});
  for (int i = 0; i < 8; ++i) {
    straight.mutable_grad() = grads[static_cast<size_t>(i)].clone();
    a.step();
  }
  auto resumed = init.clone().requires_grad_();
  io::TensorDict saved;
  {
    AdamW b(named({{"p", resumed}}), AdamWOptions{});
    for (int i = 0; i < 4; ++i) {
      resumed.mutable_grad() = grads[static_cast<size_t>(i)].clone();
      b.step();
    }
    saved = b.state_dict();
  }
  AdamW c(named({{"p", resumed}}), AdamWOptions{});
  c.load_state_dict(saved);
  EXPECT_EQ(c.steps(), 4);
  for (int i = 4; i < 8; ++i) {
    resumed.mutable_grad() = grads[static_cast<size_t>(i)].clone();
    c.step();
  }
  EXPECT_TRUE(torch::equal(straight, resumed));
  io::TensorDict partial;
  partial.insert("step", torch::tensor(1));
  EXPECT_THAT(error_of<c10::Error>([&] { c.load_state_dict(partial); }),
              HasSubstr("has 0 moment tensors, the model's trainable parameters need 2"));
}

TEST(AdamW, RulesThatCannotApplyAreErrors) {
  auto w = torch::randn({4, 4}).requires_grad_();
  AdamWOptions typo;
  typo.rules = {{R"(.*\.qvk\.weight)", 1e-4, std::nullopt, {}}};
  EXPECT_THAT(error_of<c10::Error>([&] {
                AdamW(named({{"attn.qkv.weight", w}}), typo);
              }),
              HasSubstr("rule '.*\\.qvk\\.weight' matches no trainable parameter"));
  AdamWOptions bad_regex;
  bad_regex.rules = {{"(", 1e-4, std::nullopt, {}}};
  EXPECT_THAT(error_of<c10::Error>([&] {
                AdamW(named({{"w", w}}), bad_regex);
              }),
              HasSubstr("invalid parameter pattern '('"));
  AdamWOptions thirds;
  thirds.rules = {{"w", std::nullopt, std::nullopt, {{}, {}, {}}}};
  EXPECT_THAT(error_of<c10::Error>([&] {
                AdamW(named({{"w", w}}), thirds);
              }),
              HasSubstr("splits w into 3 slices, but its first dimension is 4"));
  AdamWOptions negative;
  negative.lr = -1.0;
  EXPECT_THAT(error_of<c10::Error>([&] {
                AdamW(named({{"w", w}}), negative);
              }),
              HasSubstr("need lr >= 0"));
}

TEST(WarmupCosineSchedule, RisesLinearlyThenFollowsAHalfCosine) {
  const WarmupCosineSchedule s{4, 14, 0.1};
  EXPECT_DOUBLE_EQ(s.factor(0), 0.25);
  EXPECT_DOUBLE_EQ(s.factor(3), 1.0);
  EXPECT_DOUBLE_EQ(s.factor(4), 1.0);
  EXPECT_NEAR(s.factor(9), 0.1 + 0.9 * 0.5, 1e-12);  // half way through the cosine
  EXPECT_DOUBLE_EQ(s.factor(14), 0.1);
  EXPECT_DOUBLE_EQ(s.factor(100), 0.1);
  const WarmupCosineSchedule none{0, 10, 0.0};
  EXPECT_DOUBLE_EQ(none.factor(0), 1.0);
}

}  // namespace test_optimizer
}  // namespace attnzoo
