// Every registered ViT against timm's model of the same name (tests/configs/
// make_timm_reference.py, run as a CTest fixture): parameter count, parameter names and shapes,
// FLOPs, the options that leave no trace in the shapes, and the preprocessing of its default
// pretrained weights; and every model builds and runs at batch 2.
#include <attnzoo/configs/model_stats.h>
#include <attnzoo/configs/registry.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <fstream>
#include <map>

namespace attnzoo {
namespace test_zoo {

const nlohmann::json& timm_zoo() {
  static const nlohmann::json zoo = [] {
    std::ifstream in(std::string(ATTNZOO_CONFIGS_REFERENCE_DIR) + "/timm_zoo.json");
    return in ? nlohmann::json::parse(in) : nlohmann::json::object();
  }();
  return zoo;
}

// The zoo of the source tree (not the search path: these tests are about the shipped files).
ModelRegistry source_zoo() { return ModelRegistry(ATTNZOO_CONFIGS_SOURCE_DIR); }

// The ViTs of the zoo (the Conformers are compared with their libraries in
// test_conformer_zoo.cpp).
std::vector<std::string> zoo_names() {
  try {
    const auto zoo = source_zoo();
    std::vector<std::string> names;
    for (const auto& name : zoo.names()) {
      if (zoo.config(name).family == "vit") names.push_back(name);
    }
    return names;
  } catch (const std::exception&) {
    return {};  // reported by ZooRegistry.LoadsAndIsNotEmpty
  }
}

TEST(ZooRegistry, LoadsAndIsNotEmpty) {
  EXPECT_GE(source_zoo().names().size(), 10u);
  EXPECT_FALSE(timm_zoo().empty()) << "no timm reference in " << ATTNZOO_CONFIGS_REFERENCE_DIR;
}

class Zoo : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    config_ = source_zoo().config(GetParam());
    ASSERT_TRUE(timm_zoo().contains(GetParam())) << "timm reference lacks " << GetParam();
    timm_ = timm_zoo().at(GetParam());
  }
  ModelConfig config_;
  nlohmann::json timm_;
};

TEST_P(Zoo, ParameterCountIsTimms) {
  EXPECT_EQ(model_stats(config_).parameters, timm_.at("parameters").get<int64_t>());
}

// torch.utils.flop_counter counts what our convention counts (convolutions, matmuls, attention)
// and reports 2 × MACs.
TEST_P(Zoo, FlopsAreTorchsFlopCounterOnTimm) {
  EXPECT_EQ(2 * model_stats(config_).macs, timm_.at("flops").get<int64_t>());
}

TEST_P(Zoo, ArchitectureIsTimms) {
  const auto& o = config_.options<ViTOptions>();
  const auto& t = timm_.at("architecture");
  EXPECT_EQ(t.at("img_size").get<std::vector<int64_t>>(),
            (std::vector<int64_t>{o.img_size(), o.img_size()}));
  EXPECT_EQ(t.at("patch_size").get<std::vector<int64_t>>(),
            (std::vector<int64_t>{o.patch_size(), o.patch_size()}));
  EXPECT_EQ(t.at("in_chans").get<int64_t>(), o.in_chans());
  EXPECT_EQ(t.at("embed_dim").get<int64_t>(), o.embed_dim());
  EXPECT_EQ(t.at("depth").get<int64_t>(), o.depth());
  EXPECT_EQ(t.at("num_heads").get<int64_t>(), o.num_heads());
  EXPECT_EQ(t.at("mlp_hidden").get<int64_t>(), static_cast<int64_t>(o.embed_dim() * o.mlp_ratio()));
  EXPECT_EQ(t.at("num_classes").get<int64_t>(), o.num_classes());
  EXPECT_EQ(t.at("global_pool").get<std::string>(), to_string(o.global_pool()));
  EXPECT_EQ(t.at("class_token").get<bool>(), o.class_token());
  EXPECT_EQ(t.at("reg_tokens").get<int64_t>(), o.reg_tokens());
  EXPECT_EQ(t.at("no_embed_class").get<bool>(), o.no_embed_class());
  EXPECT_EQ(t.at("qkv_bias").get<bool>(), o.qkv_bias());
  EXPECT_EQ(t.at("qk_norm").get<bool>(), o.qk_norm());
  EXPECT_EQ(t.at("layer_scale").get<bool>(), o.init_values().has_value());
  EXPECT_EQ(t.at("pre_norm").get<bool>(), o.pre_norm());
  const auto pool = o.global_pool();
  const bool fc_norm = o.fc_norm().value_or(pool == GlobalPool::kAvg || pool == GlobalPool::kMax ||
                                            pool == GlobalPool::kAvgMax);
  EXPECT_EQ(t.at("fc_norm").get<bool>(), o.final_norm() && fc_norm);
  EXPECT_EQ(t.at("final_norm").get<bool>(), o.final_norm());
  EXPECT_DOUBLE_EQ(t.at("norm_eps").get<double>(), o.norm_eps());
  EXPECT_EQ(t.at("activation").get<std::string>(), to_string(o.activation()));
}

TEST_P(Zoo, PreprocessingIsTimms) {
  const auto& t = timm_.at("data_config");
  const auto& p = config_.image.transform;
  EXPECT_EQ(t.at("input_size").get<std::vector<int64_t>>(),
            (std::vector<int64_t>{config_.image.channels, p.height, p.width}));
  EXPECT_DOUBLE_EQ(t.at("crop_pct").get<double>(), p.crop_pct);
  EXPECT_EQ(t.at("interpolation").get<std::string>(), to_string(p.interpolation));
  const auto mean = t.at("mean").get<std::vector<double>>();
  const auto stdev = t.at("std").get<std::vector<double>>();
  ASSERT_EQ(mean.size(), p.mean.size());
  ASSERT_EQ(stdev.size(), p.std.size());
  for (size_t i = 0; i < mean.size(); ++i) {
    EXPECT_DOUBLE_EQ(mean[i], p.mean[i]) << "mean[" << i << "]";
    EXPECT_DOUBLE_EQ(stdev[i], p.std[i]) << "std[" << i << "]";
  }
}

TEST_P(Zoo, BuildsWithTimmsParametersAndRunsAtBatch2) {
  torch::manual_seed(0);
  auto model = build_model(config_);
  // Names and shapes: what makes a timm checkpoint of this name load.
  std::map<std::string, std::vector<int64_t>> ours, theirs;
  int64_t count = 0;
  for (const auto& item : model.module->named_parameters()) {
    ours[item.key()] = item.value().sizes().vec();
    count += item.value().numel();
  }
  for (const auto& [name, shape] : timm_.at("shapes").items()) {
    theirs[name] = shape.get<std::vector<int64_t>>();
  }
  std::string differences;
  for (const auto& [name, shape] : theirs) {
    const auto it = ours.find(name);
    if (it == ours.end()) {
      differences += " missing " + name + ";";
    } else if (it->second != shape) {
      differences += " " + name + " has another shape;";
    }
  }
  for (const auto& item : ours) {
    if (!theirs.count(item.first)) differences += " extra " + item.first + ";";
  }
  EXPECT_TRUE(differences.empty()) << differences;
  EXPECT_EQ(count, model_stats(config_).parameters);

  model.module->eval();
  torch::InferenceMode inference;
  const auto& image = config_.image;
  const auto images =
      torch::randn({2, image.channels, image.transform.height, image.transform.width});
  const auto out = model.module->as<VisionTransformerImpl>()->forward(images);
  const int64_t width = config_.options<ViTOptions>().num_classes() > 0
                            ? config_.options<ViTOptions>().num_classes()
                            : config_.options<ViTOptions>().embed_dim();
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, width}));
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
  // Two different images give two different outputs: the input reaches the output.
  EXPECT_GT((out[0] - out[1]).abs().max().item<double>(), 1e-6);
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (auto& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Registered, Zoo, ::testing::ValuesIn(zoo_names()), test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Zoo);

}  // namespace test_zoo
}  // namespace attnzoo
