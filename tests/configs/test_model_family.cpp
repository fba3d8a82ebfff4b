// The family registry (configs/model_family.h): what each family answers for the CLI, api/ and
// train/, checked against the modules themselves; and a layout's numeric convention (Hugging
// Face's LayerNorm eps) taken on load, checked against transformers' own logits.
#include <attnzoo/configs/model_family.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/models/conformer.h>
#include <attnzoo/models/vit.h>
#include "common/test_util.h"

#include "config_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

namespace attnzoo {
namespace test_model_family {
using testing::error_of;
using testing::max_abs_diff;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::kTinyConfig;
using testing::TempDir;
using testing::with;

// A Conformer with subsampling conv2d4 (at least 7 frames), a CTC head and a classifier.
constexpr const char* kTinyConformer = R"(name: tiny_conformer
family: conformer
architecture:
  input_dim: 20
  encoder_dim: 16
  num_layers: 2
  num_heads: 2
  ffn_dim: 32
  depthwise_conv_kernel_size: 3
  vocab_size: 9
  num_classes: 4
attention:
  backend: math
)";

TEST(ModelFamily, RegistryListsEachFamilyAndItsLayouts) {
  EXPECT_THAT(model_family_names(), ElementsAre("ast", "conformer", "vit"));
  EXPECT_THAT(all_checkpoint_formats(), ElementsAre("attnzoo", "espnet", "hf", "nemo", "timm",
                                                    "torchaudio", "torchvision", "wenet"));
  EXPECT_EQ(model_family("vit").input_kind(), InputKind::kImages);
  EXPECT_EQ(model_family("conformer").input_kind(), InputKind::kAudioFeatures);
  EXPECT_THAT(error_of([] { model_family("resnet"); }),
              HasSubstr("unknown model family 'resnet'; expected one of ast, conformer, vit"));
  EXPECT_THAT(error_of([] {
                parse_model_config(with(kTinyConfig, "family: vit", "family: rnn"), "t.yaml");
              }),
              HasSubstr("family: expected one of ast, conformer, vit"));
}

TEST(ModelFamily, ViTAnswersFromItsOptions) {
  const auto config = parse_model_config(kTinyConfig, "t.yaml");
  EXPECT_EQ(config.family, "vit");
  const auto& family = model_family(config.family);
  EXPECT_EQ(family.num_classes(config), 5);
  EXPECT_EQ(family.attention_layers(config), 2);
  EXPECT_EQ(family.attention_backend(config), "math");
  EXPECT_EQ(family.min_frames(config), 1);
  EXPECT_THAT(error_of([&] { config.options<ConformerEncoderOptions>(); }),
              HasSubstr("t.yaml: model 'tiny_test' is family vit, whose architecture is of "
                        "another type"));

  torch::manual_seed(0);
  auto model = build_model(config);
  ASSERT_FALSE(model.as<VisionTransformer>().is_empty());
  EXPECT_TRUE(model.as<ConformerEncoder>().is_empty());
  model.module->eval();
  const auto input = family.random_input(config, 2, 0);
  EXPECT_EQ(input.values.sizes(), (torch::IntArrayRef{2, 3, 32, 32}));
  family.check_input(config, input, "x: ");
  torch::NoGradGuard no_grad;
  const auto expected = model.as<VisionTransformer>()(input.values);
  EXPECT_EQ(max_abs_diff(model.classify(input), expected), 0.0);
  const auto outputs = model.forward(input);
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].first, "logits");
  EXPECT_EQ(max_abs_diff(outputs[0].second, expected), 0.0);

  // A class token read by the head: its row is the one that predicts; 4 x 4 patches of 8.
  const auto layout = family.token_layout(config, input);
  EXPECT_EQ(layout.prefix, 1);
  EXPECT_EQ(layout.rows, 4);
  EXPECT_EQ(layout.cols, 4);
  EXPECT_TRUE(layout.first_token_predicts);

  EXPECT_THAT(error_of([&] {
                family.check_input(config, {torch::zeros({2, 1, 32, 32})}, "x: ");
              }),
              HasSubstr("x: tensor 'pixels' must be [B, 3, H, W] with B >= 1, got [2, 1, 32, 32]"));
  EXPECT_THAT(error_of([&] {
                family.check_input(config, {torch::zeros({1, 3, 36, 32})}, "x: ");
              }),
              HasSubstr("H and W must be positive multiples of the patch size 8"));
  EXPECT_THAT(error_of([&] { family.check_stream(config, input); }),
              HasSubstr("a vit model does not stream"));
}

TEST(ModelFamily, ConformerAnswersFromItsOptions) {
  const auto config = parse_model_config(kTinyConformer, "c.yaml");
  const auto& family = model_family(config.family);
  EXPECT_EQ(family.num_classes(config), 4);
  EXPECT_EQ(family.attention_layers(config), 2);
  EXPECT_EQ(family.min_frames(config), 7);

  torch::manual_seed(0);
  auto model = build_model(config);
  auto encoder = model.as<ConformerEncoder>();
  ASSERT_FALSE(encoder.is_empty());
  model.module->eval();
  const auto input = family.random_input(config, 2, 30);
  EXPECT_EQ(input.values.sizes(), (torch::IntArrayRef{2, 30, 20}));
  const ModelInput padded(input.values, torch::tensor({30, 21}));
  family.check_input(config, padded, "x: ");
  torch::NoGradGuard no_grad;
  const auto [encoded, lengths] = encoder(padded.values, padded.lengths);
  const auto outputs = model.forward(padded);
  ASSERT_EQ(outputs.size(), 4u);
  EXPECT_EQ(outputs[0].first, "encoded");
  EXPECT_EQ(max_abs_diff(outputs[0].second, encoded), 0.0);
  EXPECT_EQ(outputs[1].first, "lengths");
  EXPECT_TRUE(outputs[1].second.equal(lengths));
  EXPECT_EQ(outputs[2].first, "logits");
  EXPECT_EQ(max_abs_diff(outputs[2].second, encoder->ctc_log_probs(encoded)), 0.0);
  EXPECT_EQ(outputs[3].first, "class_logits");
  const auto classes = encoder->classify(encoded, lengths);
  EXPECT_EQ(max_abs_diff(outputs[3].second, classes), 0.0);
  EXPECT_EQ(max_abs_diff(model.classify(padded), classes), 0.0);

  // Frames along time: (30 - 3) / 2 + 1 = 14, then (14 - 3) / 2 + 1 = 6 encoder frames.
  const auto layout = family.token_layout(config, input);
  EXPECT_EQ(layout.prefix, 0);
  EXPECT_EQ(layout.rows, 1);
  EXPECT_EQ(layout.cols, encoded.size(1));
  EXPECT_FALSE(layout.first_token_predicts);

  EXPECT_THAT(error_of([&] {
                family.check_input(config, {torch::zeros({1, 6, 20})}, "x: ");
              }),
              HasSubstr("x: tensor 'features' [1, 6, 20]: too short, 6 frames; subsampling "
                        "conv2d4 needs at least 7"));
  EXPECT_THAT(
      error_of([&] {
        family.check_input(config, {torch::zeros({2, 30, 20}), torch::tensor({30, 31})}, "x: ");
      }),
      HasSubstr("x: tensor 'lengths' values must lie in [0, T = 30], got 30 ... 31"));
  EXPECT_THAT(error_of([&] { family.check_stream(config, input); }),
              HasSubstr("the config has no streaming.chunk_size"));
}

// transformers' ViTForImageClassification (tests/models/make_vit_reference.py: 32 x 32 images,
// patches of 8, width 48, 2 layers, 4 heads, 6 labels; LayerNorm eps 1e-12) loaded through a
// config that states timm's eps 1e-6 for timm's layout, as the zoo's files do.
constexpr const char* kTimmStyleConfig = R"(name: hf_vit_test
family: vit
architecture:
  img_size: 32
  patch_size: 8
  embed_dim: 48
  depth: 2
  num_heads: 4
  mlp_ratio: 2.0
  num_classes: 6
  norm_eps: 1.0e-6
preprocess:
  input_size: [3, 32, 32]
  crop_pct: 0.9
  interpolation: bicubic
  mean: [0.5, 0.5, 0.5]
  std: [0.5, 0.5, 0.5]
checkpoint:
  format: timm
)";

struct HfReference {
  std::string weights;
  torch::Tensor pixels, logits;
};

HfReference hf_reference() {
  const std::string dir = ATTNZOO_MODELS_REFERENCE_DIR;
  const auto io = io::load_safetensors(dir + "/hf_vit.io.safetensors");
  return {dir + "/hf_vit.weights.safetensors", io.tensors["pixels"], io.tensors["logits"]};
}

torch::Tensor logits_of(ZooModel& model, const torch::Tensor& pixels) {
  model.module->eval();
  torch::NoGradGuard no_grad;
  return model.classify({pixels});
}

TEST(ModelFamily, HuggingFaceLayoutBringsItsLayerNormEps) {
  const auto ref = hf_reference();
  TempDir dir;
  const auto yaml = dir.write("hf_vit_test.yaml", kTimmStyleConfig);

  // Another layout than the config's: its eps replaces the one stated for timm, and says so.
  auto model = create_model_from_yaml(yaml);
  const auto loaded = load_weights(model, ref.weights, "hf");
  EXPECT_EQ(loaded.layout, "hf");
  ASSERT_EQ(loaded.notes.size(), 1u);
  EXPECT_EQ(loaded.notes[0],
            "LayerNorm eps 1e-12, the hf layout's, instead of the config's 1e-06 (--set "
            "architecture.norm_eps=1e-06 keeps it)");
  EXPECT_EQ(model.config.options<ViTOptions>().norm_eps(), 1e-12);
  const double adopted = max_abs_diff(logits_of(model, ref.pixels), ref.logits);
  EXPECT_LE(adopted, 1e-5);

  // An override is the user's word: kept, nothing noted.
  auto kept = create_model_from_yaml(yaml, {"architecture.norm_eps=1e-6"});
  const auto as_set = load_weights(kept, ref.weights, "hf");
  EXPECT_TRUE(as_set.notes.empty());
  EXPECT_EQ(kept.config.options<ViTOptions>().norm_eps(), 1e-6);
  EXPECT_GT(max_abs_diff(logits_of(kept, ref.pixels), ref.logits), adopted);

  // A document of the hf layout that states an eps keeps it; one that states none takes hf's.
  auto own = create_model_from_yaml(
      dir.write("own.yaml", with(kTimmStyleConfig, "format: timm", "format: hf")));
  EXPECT_TRUE(load_weights(own, ref.weights).notes.empty());
  EXPECT_EQ(own.config.options<ViTOptions>().norm_eps(), 1e-6);
  auto unstated = create_model_from_yaml(
      dir.write("unstated.yaml", with(with(kTimmStyleConfig, "  norm_eps: 1.0e-6\n", ""),
                                      "checkpoint:\n  format: timm\n", "")));
  EXPECT_EQ(load_weights(unstated, ref.weights).notes.size(), 1u);
  EXPECT_LE(max_abs_diff(logits_of(unstated, ref.pixels), ref.logits), 1e-5);

  // timm's own layout changes nothing.
  auto timm = create_model_from_yaml(yaml);
  torch::manual_seed(0);
  TempDir out;
  io::TensorDict tensors;
  for (const auto& item : timm.module->named_parameters()) tensors.insert(item.key(), item.value());
  io::save_safetensors((out.path() / "timm.safetensors").string(), tensors, {});
  EXPECT_TRUE(load_weights(timm, (out.path() / "timm.safetensors").string()).notes.empty());
}

}  // namespace test_model_family
}  // namespace attnzoo
