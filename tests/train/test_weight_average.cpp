// The weight average against its closed form, computed here in float64: after n updates towards
// weights w_1 … w_n from e_0 = w_0,
//   e_n = (∏_{k=1..n} d_k)·w_0 + Σ_{k=1..n} (1 − d_k)·(∏_{j=k+1..n} d_j)·w_k,
// with d_k = min(decay, k / (warmup + k − 1)) (timm's warmup, the k-th update) or the plain decay;
// integer buffers are copied once and left alone; the state survives a save and a restore.
#include <attnzoo/train/weight_average.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace attnzoo {
namespace test_weight_average {

using ::testing::HasSubstr;

struct TinyImpl : torch::nn::Module {
  TinyImpl() {
    linear = register_module("linear", torch::nn::Linear(3, 2));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({2})));
    counter = register_buffer("counter", torch::tensor({7}, torch::kLong));
    scale = register_buffer("scale", torch::ones({2}));
  }
  torch::nn::Linear linear{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::Tensor counter, scale;
};
TORCH_MODULE(Tiny);

// The floating tensors of a module, by name, in float64.
std::map<std::string, torch::Tensor> floating64(const torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : state_dict(m)) {
    if (item.value().is_floating_point()) out[item.key()] = item.value().to(torch::kDouble).clone();
  }
  return out;
}

// Sets every floating parameter and buffer of the model to new random values.
void move_weights(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (auto& item : state_dict(m)) {
    if (item.value().is_floating_point()) item.value().copy_(torch::randn_like(item.value()));
  }
}

double decay_of(double decay, int64_t warmup, int64_t k) {  // the k-th update, k from 1
  if (warmup <= 0) return decay;
  return std::min(decay, static_cast<double>(k) / static_cast<double>(warmup + k - 1));
}

void expect_closed_form(double decay, int64_t warmup, int64_t n) {
  torch::manual_seed(3);
  Tiny model, copy;
  copy->eval();
  WeightAverage average(*model, *copy, {decay, warmup});
  std::vector<std::map<std::string, torch::Tensor>> w = {floating64(*model)};
  for (int64_t k = 1; k <= n; ++k) {
    move_weights(*model);
    w.push_back(floating64(*model));
    EXPECT_DOUBLE_EQ(average.next_decay(), decay_of(decay, warmup, k)) << k;
    average.update();
  }
  EXPECT_EQ(average.updates(), n);
  const auto got = floating64(*copy);
  ASSERT_EQ(got.size(), 5u);  // linear weight and bias, norm weight and bias, scale
  for (const auto& [name, e] : got) {
    double all = 1.0;
    for (int64_t k = 1; k <= n; ++k) all *= decay_of(decay, warmup, k);
    auto expected = all * w[0].at(name);
    for (int64_t k = 1; k <= n; ++k) {
      double after = 1.0;
      for (int64_t j = k + 1; j <= n; ++j) after *= decay_of(decay, warmup, j);
      expected = expected + (1.0 - decay_of(decay, warmup, k)) * after * w[k].at(name);
    }
    EXPECT_LE((e - expected).abs().max().item<double>(), 1e-6) << name;
  }
}

TEST(WeightAverage, EqualsTheClosedFormAfterNUpdates) {
  expect_closed_form(0.9, 0, 7);
  expect_closed_form(0.5, 4, 6);
  expect_closed_form(0.99, 10, 12);
}

TEST(WeightAverage, StartsAsACopyAndLeavesIntegerBuffersAlone) {
  torch::manual_seed(0);
  Tiny model, copy;
  WeightAverage average(*model, *copy, {0.9, 0});
  EXPECT_EQ(average.updates(), 0);
  const auto m = floating64(*model), c = floating64(*copy);
  for (const auto& [name, t] : m) EXPECT_TRUE(torch::equal(t, c.at(name))) << name;
  model->counter.fill_(9);
  move_weights(*model);
  average.update();
  EXPECT_EQ(copy->counter.item<int64_t>(), 7);
}

TEST(WeightAverage, DecayWarmsUp) {
  torch::manual_seed(0);
  Tiny model, copy;
  WeightAverage average(*model, *copy, {0.5, 4});
  std::vector<double> decays;
  for (int i = 0; i < 5; ++i) {
    decays.push_back(average.next_decay());
    average.update();
  }
  // min(0.5, (1 + n) / (4 + n)) for n = 0 … 4.
  EXPECT_THAT(decays, ::testing::ElementsAre(0.25, 0.4, 0.5, 0.5, 0.5));
}

// Saved after 3 updates and restored into another average: 3 more updates give what 6 give.
TEST(WeightAverage, StateSurvivesASaveAndARestore) {
  torch::manual_seed(1);
  Tiny model, copy, other_copy;
  WeightAverage average(*model, *copy, {0.6, 3});
  for (int i = 0; i < 3; ++i) {
    move_weights(*model);
    average.update();
  }
  io::TensorDict saved;
  for (const auto& item : average.state_dict()) saved.insert(item.key(), item.value().clone());
  EXPECT_EQ(saved.size(), 6u);  // with the integer buffer
  WeightAverage restored(*model, *other_copy, {0.6, 3});
  restored.load_state_dict(saved, average.updates());
  EXPECT_EQ(restored.updates(), 3);
  for (int i = 0; i < 3; ++i) {
    move_weights(*model);
    average.update();
    restored.update();
  }
  const auto a = floating64(*copy), b = floating64(*other_copy);
  for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << name;

  io::TensorDict wrong;
  wrong.insert("linear.weight", torch::zeros({5, 5}));
  try {
    LoadOptions load;
    load.source = "run/checkpoint.safetensors (ema.*)";
    restored.load_state_dict(wrong, 1, load);
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), HasSubstr("run/checkpoint.safetensors (ema.*)"));
  }
  EXPECT_EQ(restored.updates(), 6);  // unchanged
  EXPECT_THROW(restored.load_state_dict(saved, -1), c10::ValueError);
}

TEST(WeightAverage, RefusesBadOptionsAndModules) {
  Tiny model, copy;
  EXPECT_THROW(WeightAverage(*model, *copy, {1.0, 0}), c10::ValueError);
  EXPECT_THROW(WeightAverage(*model, *copy, {-0.1, 0}), c10::ValueError);
  EXPECT_THROW(WeightAverage(*model, *copy, {0.9, -1}), c10::ValueError);
  torch::nn::Linear other(3, 2);
  EXPECT_THROW(WeightAverage(*model, *other, {0.9, 0}), c10::ValueError);
  torch::nn::Linear a(3, 2), b(3, 4);
  EXPECT_THROW(WeightAverage(*a, *b, {0.9, 0}), c10::ValueError);
}

}  // namespace test_weight_average
}  // namespace attnzoo
