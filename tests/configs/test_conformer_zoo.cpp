// Every Conformer of the zoo builds, counts its parameters as model_stats says, and encodes a
// batch of two utterances (a transducer's joint too); the configs that stand for torchaudio's and
// ESPnet's models have those libraries' parameter counts, shapes and FLOPs
// (make_conformer_zoo_reference.py, a fixture), and the Parakeet architectures NeMo's counts.
#include <attnzoo/configs/model_stats.h>
#include <attnzoo/configs/registry.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>

namespace attnzoo {
namespace test_conformer_zoo {

const nlohmann::json& reference_zoo() {
  static const nlohmann::json zoo = [] {
    std::ifstream in(std::string(ATTNZOO_CONFIGS_REFERENCE_DIR) + "/conformer_zoo.json");
    return in ? nlohmann::json::parse(in) : nlohmann::json::object();
  }();
  return zoo;
}

ModelRegistry source_zoo() { return ModelRegistry(ATTNZOO_CONFIGS_SOURCE_DIR); }

std::vector<std::string> conformer_names() {
  try {
    const auto zoo = source_zoo();
    std::vector<std::string> names;
    for (const auto& name : zoo.names()) {
      if (zoo.config(name).family == "conformer") names.push_back(name);
    }
    return names;
  } catch (const std::exception&) {
    return {};  // reported by ConformerZooRegistry.HoldsTheIssuesConformers
  }
}

TEST(ConformerZooRegistry, HoldsTheIssuesConformers) {
  EXPECT_GE(conformer_names().size(), 6u);
  EXPECT_TRUE(reference_zoo().contains("conformer_torchaudio_base"));
  EXPECT_TRUE(reference_zoo().contains("espnet_conformer_librispeech"));
}

// The NeMo architectures (Parakeet, the streaming hybrid) have the parameter counts NeMo 3.0.0's
// own classes give them (tools/scripts/nemo_architecture_sizes.py, its output shipped as data).
TEST(ConformerZooRegistry, NemoArchitecturesHaveNemosParameterCounts) {
  std::ifstream in(std::string(ATTNZOO_TESTS_SOURCE_DIR) +
                   "/configs/data/nemo_parakeet_sizes.json");
  ASSERT_TRUE(in);
  const auto nemo = nlohmann::json::parse(in);
  const auto zoo = source_zoo();
  ASSERT_EQ(nemo["models"].size(), 6u);
  for (const auto& [name, expected] : nemo["models"].items()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(model_stats(zoo.config(name)).parameters, expected["parameters"].get<int64_t>());
  }
}

class ConformerZoo : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { config_ = source_zoo().config(GetParam()); }
  ModelConfig config_;
};

TEST_P(ConformerZoo, BuildsWithTheCountedParametersAndEncodesABatch) {
  torch::manual_seed(0);
  auto model = build_model(config_);
  int64_t count = 0;
  for (const auto& p : model.module->parameters()) count += p.numel();
  EXPECT_EQ(count, model_stats(config_).parameters);

  model.module->eval();
  torch::InferenceMode inference;
  const auto& o = config_.options<ConformerEncoderOptions>();
  // Two utterances of 2 s and 1.3 s at 100 frames per second.
  const auto features = torch::randn({2, 200, o.input_dim()});
  const auto lengths = torch::tensor({200, 130});
  const auto& streaming = config_.streaming;
  const auto [encoded, out_lengths] = model.module->as<ConformerEncoderImpl>()->forward(
      features, lengths, streaming.chunk_size, streaming.num_left_chunks);
  const int64_t t = out_lengths[0].item<int64_t>();
  EXPECT_EQ(encoded.sizes(), (torch::IntArrayRef{2, t, o.blocks().input_dim()}));
  EXPECT_LT(out_lengths[1].item<int64_t>(), t);
  EXPECT_TRUE(torch::isfinite(encoded).all().item<bool>());
  EXPECT_GT((encoded[0] - encoded[1]).abs().max().item<double>(), 1e-6);
  if (o.vocab_size() > 0 && o.ctc_head()) {
    const auto log_probs = model.module->as<ConformerEncoderImpl>()->ctc_log_probs(encoded);
    EXPECT_EQ(log_probs.size(2), o.vocab_size());
    EXPECT_LE((log_probs.exp().sum(-1) - 1.0).abs().max().item<double>(), 1e-4);
  }
  auto& head = model.module->as<ConformerEncoderImpl>()->transducer;
  if (!head.is_empty()) {
    auto* transducer = head.get();
    // The joint of every frame with the start of a sequence: distributions over the tokens.
    const auto [g, state] =
        transducer->predict(torch::full({1}, transducer->blank_id(), torch::kLong), {});
    const auto logits = transducer->joint(transducer->project_encoder(encoded[0]),
                                          transducer->project_prediction(g));
    EXPECT_EQ(logits.sizes(),
              (torch::IntArrayRef{
                  t, o.vocab_size() + static_cast<int64_t>(o.transducer()->durations().size())}));
    EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
  }
}

TEST_P(ConformerZoo, CostIsPerSecondOfAudio) {
  const auto stats = model_stats(config_);
  EXPECT_EQ(stats.macs, conformer_macs(config_.options<ConformerEncoderOptions>(), 1000) / 10);
  EXPECT_EQ(stats.basis,
            !config_.features ? "100 input frames (of 1000)" : "1 s audio (10 s utterance)");
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (auto& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Registered, ConformerZoo, ::testing::ValuesIn(conformer_names()),
                         test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ConformerZoo);

// The sorted parameter shapes of a built model.
std::vector<std::vector<int64_t>> sorted_shapes(const ZooModel& model) {
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& p : model.module->parameters()) shapes.push_back(p.sizes().vec());
  std::sort(shapes.begin(), shapes.end());
  return shapes;
}

TEST(ConformerZooReference, TorchaudioBaseIsTorchaudiosConformer) {
  const auto& ref = reference_zoo().at("conformer_torchaudio_base");
  const auto config = source_zoo().config("conformer_torchaudio_base");
  const auto stats = model_stats(config);
  EXPECT_EQ(stats.parameters, ref.at("parameters").get<int64_t>());
  torch::manual_seed(0);
  EXPECT_EQ(sorted_shapes(build_model(config)),
            ref.at("shapes").get<std::vector<std::vector<int64_t>>>());
  // No subsampling and no positions: our convention counts what torch's flop counter counts.
  const int64_t frames = ref.at("frames").get<int64_t>();
  EXPECT_EQ(2 * conformer_macs(config.options<ConformerEncoderOptions>(), frames),
            ref.at("flops").get<int64_t>());
}

TEST(ConformerZooReference, EspnetLibrispeechIsEspnetsEncoderWithCtc) {
  const auto& ref = reference_zoo().at("espnet_conformer_librispeech");
  const auto config = source_zoo().config("espnet_conformer_librispeech");
  // The counts agree; the shapes do not, by design: ESPnet's linear_q, linear_k, linear_v are
  // one fused qkv here (test_conformer_espnet.cpp loads ESPnet's weights into this layout).
  EXPECT_EQ(model_stats(config).parameters, ref.at("parameters").get<int64_t>());
  // ESPnet adds u to q before q·kᵀ (one product); we count u·k apart: T'·D per block more.
  const int64_t frames = ref.at("frames").get<int64_t>();
  const int64_t t = (((frames - 1) / 2) - 1) / 2;
  const auto& b = config.options<ConformerEncoderOptions>().blocks();
  EXPECT_EQ(2 * conformer_macs(config.options<ConformerEncoderOptions>(), frames) -
                2 * b.num_layers() * t * b.input_dim(),
            ref.at("flops").get<int64_t>());
}

}  // namespace test_conformer_zoo
}  // namespace attnzoo
