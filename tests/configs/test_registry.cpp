// The registry: names found in a configs folder, duplicate names, the environment override, and
// the doors in (create_model, create_model_from_yaml, load_weights).
#include <attnzoo/configs/registry.h>

#include <attnzoo/configs/zoo_path.h>

#include <attnzoo/models/checkpoint.h>
#include <attnzoo/models/vit.h>
#include "config_test_util.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>

namespace attnzoo {
namespace test_registry {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::kTinyConfig;
using testing::ScopedEnv;
using testing::TempDir;
using testing::with;

std::string tiny(const std::string& name) {
  return with(kTinyConfig, "name: tiny_test", "name: " + name);
}

TEST(ModelRegistry, TheZooHoldsTheIssuesModels) {
  const auto names = ModelRegistry(ATTNZOO_CONFIGS_SOURCE_DIR).names();
  for (const char* name : {"vit_tiny_patch16_224",
                           "vit_small_patch16_224",
                           "vit_base_patch16_224",
                           "vit_large_patch16_224",
                           "vit_base_patch16_384",
                           "vit_base_patch32_224",
                           "vit_huge_patch14_224",
                           "deit_tiny_patch16_224",
                           "deit_small_patch16_224",
                           "deit_base_patch16_224",
                           "conformer_s",
                           "conformer_m",
                           "conformer_l",
                           "conformer_torchaudio_base",
                           "wenet_conformer_librispeech",
                           "wenet_u2pp_conformer_librispeech",
                           "espnet_conformer_librispeech",
                           "fastconformer_large",
                           "parakeet-tdt-0.6b-v2",
                           "parakeet-tdt-0.6b-v3",
                           "parakeet-ctc-0.6b",
                           "parakeet-ctc-1.1b",
                           "parakeet-tdt_ctc-110m",
                           "fastconformer-hybrid-large-streaming"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

TEST(ModelRegistry, FindsYamlFilesRecursivelyByTheirName) {
  TempDir dir;
  const auto a = dir.write("a.yaml", tiny("model_a"));
  const auto b = dir.write("family/deeper/b.yml", tiny("model_b"));
  dir.write("notes.txt", "not a config");
  const ModelRegistry registry(dir.path().string());
  EXPECT_THAT(registry.names(), ElementsAre("model_a", "model_b"));
  EXPECT_EQ(registry.file("model_b"), b);
  EXPECT_TRUE(registry.contains("model_a"));
  EXPECT_FALSE(registry.contains("model_c"));
  EXPECT_EQ(registry.config("model_a").source, a);
}

TEST(ModelRegistry, FollowsLinksToFoldersEachRealFolderOnce) {
  // A build tree's zoo is a folder of links; a link back up must not loop or register twice.
  TempDir source, zoo;
  source.write("vit/linked.yaml", tiny("model_linked"));
  std::filesystem::create_directory_symlink(source.path() / "vit", zoo.path() / "vit");
  std::filesystem::create_directory_symlink(zoo.path(), zoo.path() / "vit_again");
  std::filesystem::create_directory_symlink(source.path() / "vit", zoo.path() / "alias");
  std::filesystem::create_directory_symlink(zoo.path() / "missing", zoo.path() / "dangling");
  const ModelRegistry registry(zoo.path().string());
  EXPECT_THAT(registry.names(), ElementsAre("model_linked"));
}

TEST(ModelRegistry, ANameRegisteredTwiceIsAnErrorNamingBothFiles) {
  TempDir dir;
  const auto first = dir.write("a/one.yaml", tiny("same_name"));
  const auto second = dir.write("b/two.yaml", tiny("same_name"));
  try {
    ModelRegistry registry(dir.path().string());
    ADD_FAILURE() << "no error for a duplicate name";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("model 'same_name' is registered twice: by " + first +
                                    " and by " + second));
  }
}

TEST(ModelRegistry, BadFilesAndNames) {
  TempDir dir;
  const auto nameless = dir.write("nameless.yaml", "family: vit\n");
  try {
    ModelRegistry registry(dir.path().string());
    ADD_FAILURE() << "no error for a file without a name";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr(nameless + ":1:1: name: required key is missing"));
  }
  EXPECT_THROW(ModelRegistry((dir.path() / "missing").string()), ConfigError);

  TempDir good;
  good.write("a.yaml", tiny("model_a"));
  try {
    ModelRegistry(good.path().string()).file("model_z");
    ADD_FAILURE() << "no error for an unknown name";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown model 'model_z'; the zoo (" + good.path().string() +
                                    ") has: model_a"));
  }
}

TEST(ModelRegistry, AnEarlierFolderShadowsALaterOne) {
  TempDir user, zoo;
  const auto mine = user.write("mine.yaml", tiny("shared_name"));
  user.write("extra.yaml", tiny("only_mine"));
  const auto theirs = zoo.write("a/theirs.yaml", tiny("shared_name"));
  zoo.write("b.yaml", tiny("only_theirs"));
  const ModelRegistry registry({user.path().string(), zoo.path().string()});
  EXPECT_THAT(registry.names(), ElementsAre("only_mine", "only_theirs", "shared_name"));
  EXPECT_EQ(registry.file("shared_name"), mine);
  EXPECT_THAT(registry.shadowed(), ElementsAre(std::make_pair(std::string("shared_name"), theirs)));
  EXPECT_THAT(registry.folders(), ElementsAre(user.path().string(), zoo.path().string()));
  // The other order: the other file wins.
  EXPECT_EQ(ModelRegistry({zoo.path().string(), user.path().string()}).file("shared_name"), theirs);
}

TEST(ModelRegistry, TheZooPathVariableComesBeforeTheZooAndExtendsIt) {
  TempDir dir;
  dir.write("x.yaml", tiny("from_env"));
  // Shadows a model of the zoo: its depth 1 says which file was read.
  dir.write("y.yaml", with(tiny("vit_tiny_patch16_224"), "  depth: 2", "  depth: 1"));
  ScopedEnv env(kZooPathVariable, dir.path().string());
  const auto names = model_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "from_env"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "conformer_s"), names.end());
  EXPECT_EQ(model_config("from_env").name, "from_env");
  EXPECT_EQ(resolve_model_config("from_env").name, "from_env");
  EXPECT_EQ(model_config("vit_tiny_patch16_224").options<ViTOptions>().depth(), 1);
  EXPECT_EQ(default_registry().folders().front(), dir.path().string());
}

TEST(ModelRegistry, ResolveTakesFilesOrNames) {
  TempDir dir;
  const auto path = dir.write("m.yaml", tiny("file_model"));
  EXPECT_EQ(resolve_model_config(path).name, "file_model");
  EXPECT_EQ(resolve_model_config(path, {"architecture.depth=1"}).options<ViTOptions>().depth(), 1);
  EXPECT_EQ(resolve_model_config("vit_tiny_patch16_224").options<ViTOptions>().embed_dim(), 192);
  EXPECT_THROW(resolve_model_config((dir.path() / "none.yaml").string()), ConfigError);
}

TEST(CreateModel, BuildsTheConfigsFamilyWithOverrides) {
  auto model = create_model("vit_tiny_patch16_224", {"architecture.depth=1"});
  ASSERT_NE(model.module->as<VisionTransformerImpl>(), nullptr);
  EXPECT_EQ(model.config.name, "vit_tiny_patch16_224");
  EXPECT_EQ(model.config.overrides, std::vector<std::string>{"architecture.depth=1"});
  EXPECT_EQ(model.module->as<VisionTransformerImpl>()->blocks->size(), 1u);
  EXPECT_EQ(model.module->as<VisionTransformerImpl>()->options.embed_dim(), 192);
  EXPECT_EQ(model.module->as<VisionTransformerImpl>()->head->weight.sizes(),
            (std::vector<int64_t>{1000, 192}));

  const auto from_yaml =
      create_model_from_yaml(std::string(ATTNZOO_CONFIGS_TEST_DATA_DIR) + "/vit_micro_test.yaml",
                             {"architecture.depth=3"});
  EXPECT_EQ(from_yaml.module->as<VisionTransformerImpl>()->blocks->size(), 3u);
  EXPECT_EQ(from_yaml.module->as<VisionTransformerImpl>()->options.reg_tokens(), 2);
  EXPECT_EQ(from_yaml.module->as<VisionTransformerImpl>()->options.attention_backend(), "math");
}

TEST(CreateModel, LoadWeightsRoundTripsAndIsStrict) {
  TempDir dir;
  const auto yaml = dir.write("tiny.yaml", kTinyConfig);
  torch::manual_seed(1);
  auto source = create_model_from_yaml(yaml);
  const auto weights = (dir.path() / "tiny.safetensors").string();
  io::save_safetensors(weights, state_dict(*source.module));

  torch::manual_seed(2);
  auto target = create_model_from_yaml(yaml);
  EXPECT_EQ(load_weights(target, weights).layout, "timm");  // the config's checkpoint.format
  for (const auto& item : source.module->named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), target.module->named_parameters()[item.key()]))
        << item.key();
  }
  // The layout can be forced, and must be one the family knows.
  EXPECT_EQ(load_weights(target, weights, "timm").layout, "timm");
  EXPECT_THROW(load_weights(target, weights, "onnx"), c10::Error);
  // Another architecture: every mis-shaped tensor reported.
  auto wider = create_model_from_yaml(yaml, {"architecture.num_classes=6"});
  try {
    load_weights(wider, weights);
    ADD_FAILURE() << "no error for a mis-shaped head";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), HasSubstr("head.weight"));
    EXPECT_THAT(e.what(), HasSubstr("head.bias"));
  }
}

}  // namespace test_registry
}  // namespace attnzoo
