// Every registered model family (configs/model_family.h) through one suite, as the attention
// backends have theirs: a small model of the family builds with exactly the parameters
// model_stats counts, takes its own random_input, gives the outputs its forward names with the
// batch's size and the heads' widths, survives a checkpoint round trip bit for bit, and streams,
// where its config claims to, to what its offline forward computes under the same chunk mask.
// A new family is tested by naming its small configs in small_configs(); a family without any
// fails here.
#include <attnzoo/configs/model_stats.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/models/checkpoint.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/test_util.h"

#include <map>
#include <string>
#include <vector>

namespace attnzoo {
namespace test_family_conformance {

using testing::max_abs_diff;

// The small configs of each family (tests/configs/data, tests/api/data).
const std::map<std::string, std::vector<std::string>>& small_configs() {
  static const std::map<std::string, std::vector<std::string>> configs = {
      {"vit", {"configs/data/vit_micro_test.yaml", "api/data/vit_micro_classifier.yaml"}},
      {"conformer",
       {"configs/data/conformer_micro_torchaudio.yaml", "configs/data/conformer_micro_espnet.yaml",
        "configs/data/conformer_micro_stream.yaml", "api/data/conformer_micro_classifier.yaml"}},
      {"ast", {"api/data/ast_micro.yaml"}},
  };
  return configs;
}

std::string tests_dir() { return ATTNZOO_TESTS_SOURCE_DIR; }

struct Case {
  std::string family, file;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& family : model_family_names()) {
    const auto it = small_configs().find(family);
    if (it == small_configs().end()) {
      out.push_back({family, ""});  // fails in SetUp: the family has no small config
      continue;
    }
    for (const auto& file : it->second) out.push_back({family, file});
  }
  return out;
}

class FamilyConformance : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(GetParam().file.empty())
        << "family " << GetParam().family << " has no small config in small_configs()";
    config_ = model_config_from_yaml(tests_dir() + "/" + GetParam().file);
    ASSERT_EQ(config_.family, GetParam().family);
    torch::manual_seed(7);
  }
  ModelConfig config_;
};

TEST_P(FamilyConformance, BuildsWithTheParametersModelStatsCounts) {
  const auto model = build_model(config_);
  int64_t count = 0;
  for (const auto& p : model.module->parameters()) count += p.numel();
  EXPECT_EQ(count, model_stats(config_).parameters);
  EXPECT_GT(model_stats(config_).macs, 0);
}

TEST_P(FamilyConformance, ForwardNamesItsOutputsWithTheBatchAndTheHeads) {
  auto model = build_model(config_);
  model.module->eval();
  const auto& family = model.family();
  const auto input = family.random_input(config_, 2, 64);
  family.check_input(config_, input, "random_input: ");
  torch::NoGradGuard no_grad;
  const auto outputs = model.forward(input);
  ASSERT_FALSE(outputs.empty());
  for (const auto& [name, tensor] : outputs) {
    SCOPED_TRACE(name);
    EXPECT_EQ(tensor.size(0), 2);
    if (tensor.is_floating_point()) {
      EXPECT_TRUE(torch::isfinite(tensor).all().item<bool>());
    }
  }
  const auto find = [&](const std::string& name) {
    for (const auto& [n, t] : outputs) {
      if (n == name) return t;
    }
    return torch::Tensor();
  };
  if (family.num_classes(config_) > 0) {
    const auto logits = model.classify(input);
    EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, family.num_classes(config_)}));
    // Two different inputs, two different answers: the input reaches the head.
    EXPECT_GT((logits[0] - logits[1]).abs().max().item<double>(), 1e-6);
  }
  if (family.ctc_vocab(config_) > 0) {
    const auto logits = find("logits");
    ASSERT_TRUE(logits.defined());
    EXPECT_EQ(logits.size(-1), family.ctc_vocab(config_));
  }
  EXPECT_GE(family.attention_layers(config_), 1);
}

TEST_P(FamilyConformance, AStateDictRoundTripGivesTheSameModel) {
  auto model = build_model(config_);
  model.module->eval();
  const auto dir = testing::fresh_dir("family_round_trip");
  const auto file = dir + "/weights.safetensors";
  io::save_safetensors(file, state_dict(*model.module));
  torch::manual_seed(8);  // other fresh weights
  auto loaded = build_model(config_);
  loaded.module->eval();
  load_state_dict(*loaded.module, io::load_safetensors(file).tensors);
  const auto input = model.family().random_input(config_, 2, 48);
  torch::NoGradGuard no_grad;
  const auto a = model.forward(input), b = loaded.forward(input);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].first);
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second));
  }
}

TEST_P(FamilyConformance, StreamsToItsOfflineForwardWhereItClaimsTo) {
  auto model = build_model(config_);
  model.module->eval();
  const auto& family = model.family();
  const auto input = family.random_input(config_, 1, 96);
  try {
    family.check_stream(config_, input);
  } catch (const InputError& e) {
    GTEST_SKIP() << config_.name << " does not stream: " << e.what();
  }
  torch::NoGradGuard no_grad;
  const auto offline = model.forward(input, /*stream=*/false);
  const auto streamed = model.forward(input, /*stream=*/true);
  ASSERT_EQ(offline.size(), streamed.size());
  for (size_t i = 0; i < offline.size(); ++i) {
    SCOPED_TRACE(offline[i].first);
    ASSERT_EQ(offline[i].second.sizes(), streamed[i].second.sizes());
    EXPECT_LT(max_abs_diff(offline[i].second, streamed[i].second), 1e-4);
  }
}

std::string test_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name =
      info.param.family + "_" +
      (info.param.file.empty() ? std::string("none")
                               : info.param.file.substr(info.param.file.rfind('/') + 1));
  for (auto& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Registered, FamilyConformance, ::testing::ValuesIn(cases()), test_name);

}  // namespace test_family_conformance
}  // namespace attnzoo
