// Model folders read as models (configs/model_source.h): what each source's config gives when
// its keys are left at their defaults (as save_pretrained leaves them out), and every value
// attnzoo cannot honour refused with the file, the key and the value. Folders are written here;
// the weights file only has to exist for a folder to be read (the parity tests with the
// libraries' own folders and numbers are tests/cli/model_sources_test.py).
#include <attnzoo/configs/model_source.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/models/vit.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "config_test_util.h"

#include <filesystem>
#include <fstream>
#include <string>

namespace attnzoo {
namespace test_model_source {

using ::testing::AllOf;
using testing::error_of;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

class ModelFolder {
 public:
  explicit ModelFolder(const std::string& name) : dir_(dir_root_.path() / name) {
    fs::create_directories(dir_);
    write("model.safetensors", "");
  }
  void write(const std::string& file, const std::string& text) const {
    std::ofstream(dir_ / file) << text;
  }
  std::string path() const { return dir_.string(); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

 private:
  testing::TempDir dir_root_;
  fs::path dir_;
};

constexpr const char* kViTProcessor = R"({"image_processor_type": "ViTImageProcessor"})";

std::string config_error(const ModelFolder& folder) {
  return error_of<ConfigError>([&] { resolve_model_config(folder.path()); });
}

TEST(HfSource, KeysLeftOutTakeTheConfigClassDefaults) {
  ModelFolder folder("vit-base");
  folder.write("config.json",
               R"({"model_type": "vit", "architectures": ["ViTForImageClassification"]})");
  folder.write("preprocessor_config.json", kViTProcessor);
  const auto config = resolve_model_config(folder.path());
  const auto& o = config.options<ViTOptions>();
  EXPECT_EQ(config.name, "vit-base");
  EXPECT_EQ(o.embed_dim(), 768);
  EXPECT_EQ(o.depth(), 12);
  EXPECT_EQ(o.num_heads(), 12);
  EXPECT_EQ(o.mlp_ratio(), 4.0);
  EXPECT_EQ(o.norm_eps(), 1e-12);  // ViTConfig's, not timm's 1e-6
  EXPECT_EQ(o.img_size(), 224);
  EXPECT_EQ(o.num_classes(), 2);  // PretrainedConfig's two labels
  EXPECT_EQ(config.labels.names, (std::vector<std::string>{"LABEL_0", "LABEL_1"}));
  EXPECT_EQ(config.image.transform.crop_mode, CropMode::kSquash);
  EXPECT_EQ(config.image.transform.crop_pct, 1.0);
  EXPECT_EQ(config.image.transform.interpolation, Interpolation::kBilinear);
  EXPECT_EQ(config.image.transform.mean, (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(config.checkpoint_format, "hf");
  EXPECT_EQ(config.checkpoint_file, fs::absolute(folder.file("model.safetensors")).string());
  // Overrides apply as to any config; a timm-style folder name is not asked of the registry.
  EXPECT_EQ(
      resolve_model_config(folder.path(), {"architecture.depth=3"}).options<ViTOptions>().depth(),
      3);
}

TEST(HfSource, DeitClassifiersAndTheProcessorsCrop) {
  ModelFolder folder("deit");
  folder.write("config.json",
               R"({"model_type": "deit", "hidden_size": 192, "num_attention_heads": 3,
      "intermediate_size": 768, "architectures": ["DeiTForImageClassification"],
      "id2label": {"0": "a", "1": "b", "2": "c"}})");
  folder.write("preprocessor_config.json", R"({"image_processor_type": "DeiTImageProcessor",
      "size": {"height": 256, "width": 256}, "crop_size": {"height": 224, "width": 224}})");
  auto config = resolve_model_config(folder.path());
  auto o = config.options<ViTOptions>();
  EXPECT_TRUE(o.dist_token());
  EXPECT_FALSE(o.dist_head());  // the class head alone
  EXPECT_EQ(o.num_classes(), 3);
  EXPECT_EQ(config.image.transform.crop_pct, 0.875);
  EXPECT_EQ(config.image.transform.interpolation,
            Interpolation::kBicubic);  // DeiTImageProcessor's default resample
  EXPECT_EQ(config.image.transform.mean, (std::vector<double>{0.485, 0.456, 0.406}));
  folder.write("config.json", R"({"model_type": "deit",
      "architectures": ["DeiTForImageClassificationWithTeacher"]})");
  EXPECT_TRUE(resolve_model_config(folder.path()).options<ViTOptions>().dist_head());
}

TEST(HfSource, AnyIntermediateSizeIsTheMlpsWidth) {
  ModelFolder folder("vit");
  folder.write("preprocessor_config.json", kViTProcessor);
  // 30 / 22 times 22 is below 30 in doubles: the ratio must still give 30.
  folder.write("config.json", R"({"model_type": "vit", "hidden_size": 22, "num_attention_heads": 2,
      "intermediate_size": 30, "num_hidden_layers": 1})");
  const auto model = build_model(resolve_model_config(folder.path()));
  EXPECT_EQ(model.module->named_parameters()["blocks.0.mlp.fc1.weight"].size(0), 30);
}

TEST(HfSource, RescaleAndNormalizeBecomeMeanAndStd) {
  ModelFolder folder("vit");
  folder.write("config.json", R"({"model_type": "vit"})");
  // (p / 127.5 - 1): pixels in [-1, 1] without normalizing.
  folder.write("preprocessor_config.json", R"({"image_processor_type": "ViTImageProcessor",
      "rescale_factor": 0.00784313725490196, "do_normalize": false})");
  const auto config = resolve_model_config(folder.path());
  for (size_t c = 0; c < 3; ++c) {
    EXPECT_DOUBLE_EQ(config.image.transform.mean[c], 0.0);
    EXPECT_NEAR(config.image.transform.std[c], 0.5, 1e-12);
  }
}

TEST(HfSource, WhatAttnzooCannotHonourIsRefusedByFileKeyAndValue) {
  ModelFolder folder("vit");
  folder.write("preprocessor_config.json", kViTProcessor);
  const auto config_json = folder.file("config.json");
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model_type": "bert"})",
       "config.json: model_type: is not a model type attnzoo reads (vit, deit, "
       "audio-spectrogram-transformer) (got 'bert')"},
      {R"({"model_type": "vit", "hidden_act": "quick_gelu"})",
       "config.json: hidden_act: is not an activation attnzoo implements"},
      {R"({"model_type": "vit", "architectures": ["ViTForMaskedImageModeling"]})",
       "config.json: architectures: is not a model attnzoo runs for this model_type "
       "(ViTForImageClassification, ViTModel) (got [\"ViTForMaskedImageModeling\"])"},
      {R"({"model_type": "vit", "patch_size": [16, 8]})",
       "config.json: patch_size: attnzoo's patches are square"},
      {R"({"model_type": "vit", "id2label": {"0": "a", "2": "c"}})",
       "config.json: id2label: must name each class 0 to 1 once"},
      {R"({"model_type": "vit", "layer_norm_eps": "small"})",
       "config.json: layer_norm_eps: expected a number (got 'small')"},
  };
  for (const auto& [json, message] : cases) {
    SCOPED_TRACE(json);
    folder.write("config.json", json);
    EXPECT_THAT(config_error(folder), AllOf(HasSubstr(config_json), HasSubstr(message)));
  }
}

TEST(HfSource, ProcessorSettingsAttnzooCannotHonourAreRefused) {
  ModelFolder folder("vit");
  folder.write("config.json", R"({"model_type": "vit"})");
  const auto processor = folder.file("preprocessor_config.json");
  const std::pair<const char*, const char*> cases[] = {
      {R"({"image_processor_type": "ViTImageProcessor", "resample": 0})",
       "resample: is not a filter attnzoo's frontend has (2 bilinear, 3 bicubic) (got 0)"},
      {R"({"image_processor_type": "ViTImageProcessor", "do_resize": false})",
       "do_resize: attnzoo's frontend resizes every image"},
      {R"({"image_processor_type": "ViTImageProcessor", "size": {"shortest_edge": 224}})",
       "size: expected {height, width}"},
      {R"({"image_processor_type": "CLIPImageProcessor"})",
       "image_processor_type: is not an image processor attnzoo reproduces"},
      {R"({"image_processor_type": "DeiTImageProcessor", "size": {"height": 256, "width": 300},
           "crop_size": {"height": 224, "width": 224}})",
       "crop_size: crops height and width by different fractions of size"},
  };
  for (const auto& [json, message] : cases) {
    SCOPED_TRACE(json);
    folder.write("preprocessor_config.json", json);
    EXPECT_THAT(config_error(folder), AllOf(HasSubstr(processor), HasSubstr(message)));
  }
  fs::remove(processor);
  EXPECT_THAT(config_error(folder), HasSubstr(processor + ": no such file"));
  folder.write("preprocessor_config.json", kViTProcessor);
  fs::remove(folder.file("model.safetensors"));
  EXPECT_THAT(config_error(folder),
              HasSubstr("no weights (looked for model.safetensors, model.safetensors.index.json, "
                        "pytorch_model.bin, pytorch_model.bin.index.json)"));
}

TEST(HfSource, AstTakesItsFeatureExtractorsSettings) {
  ModelFolder folder("ast");
  folder.write("config.json", R"({"model_type": "audio-spectrogram-transformer",
      "architectures": ["ASTForAudioClassification"], "num_mel_bins": 64, "max_length": 100})");
  folder.write("preprocessor_config.json", R"({"feature_extractor_type": "ASTFeatureExtractor",
      "num_mel_bins": 64, "max_length": 100, "mean": -4.0, "std": 4.5})");
  const auto config = resolve_model_config(folder.path());
  EXPECT_EQ(config.family, "ast");
  ASSERT_TRUE(config.features.has_value());
  EXPECT_EQ(config.features->num_mel_bins, 64);
  EXPECT_EQ(config.features->fixed_frames, 100);
  EXPECT_EQ(config.features->normalize_mean, -4.0);
  EXPECT_EQ(config.features->normalize_std, 9.0);  // twice the extractor's std
  EXPECT_EQ(config.features->window, FrameWindow::kHanning);
  folder.write("preprocessor_config.json", R"({"feature_extractor_type": "ASTFeatureExtractor",
      "num_mel_bins": 128, "max_length": 100})");
  EXPECT_THAT(config_error(folder),
              HasSubstr("num_mel_bins: differs from config.json's num_mel_bins 64 (got 128)"));
  folder.write("config.json", R"({"model_type": "audio-spectrogram-transformer",
      "frequency_stride": 10, "time_stride": 12})");
  EXPECT_THAT(config_error(folder), HasSubstr("time_stride: differs from frequency_stride"));
}

constexpr const char* kTimmConfig = R"({"architecture": "vit_small_patch16_224",
  "num_classes": 3, "global_pool": "token", "model_args": {"depth": 2, "img_size": [224, 224]},
  "pretrained_cfg": {"input_size": [3, 224, 224], "interpolation": "bicubic", "crop_pct": 0.95,
    "crop_mode": "center", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
  "label_names": ["cat", "dog", "fish"]})";

TEST(TimmSource, TheZoosArchitectureWithTheFoldersOverrides) {
  ModelFolder folder("vit_small_patch16_224.augreg");
  folder.write("config.json", kTimmConfig);
  const auto config = resolve_model_config(folder.path());
  const auto& o = config.options<ViTOptions>();
  EXPECT_EQ(config.name, "vit_small_patch16_224.augreg");
  EXPECT_EQ(o.embed_dim(), 384);  // the zoo's vit_small_patch16_224
  EXPECT_EQ(o.depth(), 2);        // model_args
  EXPECT_EQ(o.num_classes(), 3);
  EXPECT_EQ(o.norm_eps(), 1e-6);
  EXPECT_EQ(config.image.transform.crop_pct, 0.95);
  EXPECT_EQ(config.labels.names, (std::vector<std::string>{"cat", "dog", "fish"}));
  EXPECT_EQ(config.checkpoint_format, "timm");
}

TEST(TimmSource, WhatAttnzooCannotHonourIsRefusedByFileKeyAndValue) {
  ModelFolder folder("timm");
  const auto config_json = folder.file("config.json");
  const std::pair<std::pair<const char*, const char*>, const char*> cases[] = {
      {{R"("architecture": "vit_small_patch16_224")", R"("architecture": "convnext_tiny")"},
       "architecture: is not a model of attnzoo's zoo"},
      {{R"("depth": 2)", R"("depth": 2, "class_token_pos": 3)"},
       "model_args.class_token_pos: is not an option attnzoo's ViT implements (got 3)"},
      {{R"("crop_mode": "center")", R"("crop_mode": "border")"},
       "pretrained_cfg.crop_mode: is not a crop attnzoo's frontend has (center, squash) (got "
       "'border')"},
      {{R"("global_pool": "token")", R"("global_pool": "map")"},
       "global_pool: is not a pooling attnzoo's ViT implements"},
      {{R"(["cat", "dog", "fish"])", R"(["cat", "dog"])"},
       "label_names: expected 3 non-empty names"},
      {{R"("depth": 2)", R"("depth": 2, "act_layer": "relu")"},
       "model_args.act_layer: is not an activation"},
  };
  for (const auto& [change, message] : cases) {
    SCOPED_TRACE(message);
    folder.write("config.json", testing::with(kTimmConfig, change.first, change.second));
    EXPECT_THAT(config_error(folder), AllOf(HasSubstr(config_json), HasSubstr(message)));
  }
}

TEST(ModelSource, FoldersOfNoSourceAreRefusedWithWhatIsLookedFor) {
  ModelFolder folder("plain");
  folder.write("config.json", R"({"hidden_size": 3})");
  EXPECT_THAT(config_error(folder),
              AllOf(HasSubstr(folder.path() + ": not a model folder attnzoo reads"),
                    HasSubstr("model_type vit, deit or audio-spectrogram-transformer"),
                    HasSubstr("a WeNet experiment folder (train.yaml)"),
                    HasSubstr("a NeMo .nemo file (a tar with model_config.yaml)")));
  EXPECT_FALSE(is_model_source(folder.path()));
  EXPECT_EQ(model_source_names(),
            (std::vector<std::string>{"hf", "timm", "wenet", "espnet", "nemo"}));
}

TEST(ModelSource, TheDescriptionIsTheDocumentThatRuns) {
  ModelFolder folder("vit");
  folder.write("config.json", R"({"model_type": "vit", "layer_norm_eps": 1e-12,
      "intermediate_size": 2304, "hidden_size": 768})");
  folder.write("preprocessor_config.json", kViTProcessor);
  const auto yaml = describe_model_source(folder.path());
  EXPECT_THAT(yaml, HasSubstr("norm_eps: 1.0e-12\n"));  // a float YAML 1.1 readers read too
  EXPECT_THAT(yaml, HasSubstr("mlp_ratio: 3.0\n"));
  EXPECT_THAT(yaml, HasSubstr("file: " + fs::absolute(folder.file("model.safetensors")).string()));
  // Saved elsewhere, it is the same model.
  testing::TempDir zoo;
  std::ofstream(zoo.path() / "kept.yaml") << yaml;
  const auto kept = load_model_config((zoo.path() / "kept.yaml").string());
  const auto direct = resolve_model_config(folder.path());
  EXPECT_EQ(kept.options<ViTOptions>().mlp_ratio(), direct.options<ViTOptions>().mlp_ratio());
  EXPECT_EQ(kept.options<ViTOptions>().norm_eps(), direct.options<ViTOptions>().norm_eps());
  EXPECT_EQ(kept.checkpoint_file, direct.checkpoint_file);
  EXPECT_EQ(kept.labels.names, direct.labels.names);
}

}  // namespace test_model_source
}  // namespace attnzoo
