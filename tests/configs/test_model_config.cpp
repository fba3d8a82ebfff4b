// YAML model configs: every field read into the Options, and every kind of mistake reported with
// the file, the key path, the line and the column.
#include <attnzoo/configs/model_config.h>
#include <attnzoo/models/conformer.h>
#include <attnzoo/models/vit.h>

#include "config_test_util.h"

namespace attnzoo {
namespace test_model_config {

using testing::expect_error;
using ::testing::HasSubstr;
using testing::kTinyConfig;
using ::testing::Not;
using testing::parse_error;
using ::testing::StartsWith;
using testing::with;

TEST(ModelConfig, ReadsTheTinyConfig) {
  const auto config = parse_model_config(kTinyConfig, "tiny.yaml");
  EXPECT_EQ(config.name, "tiny_test");
  EXPECT_EQ(config.family, "vit");
  EXPECT_EQ(config.source, "tiny.yaml");
  EXPECT_EQ(config.options<ViTOptions>().img_size(), 32);
  EXPECT_EQ(config.options<ViTOptions>().patch_size(), 8);
  EXPECT_EQ(config.options<ViTOptions>().embed_dim(), 48);
  EXPECT_EQ(config.options<ViTOptions>().depth(), 2);
  EXPECT_EQ(config.options<ViTOptions>().num_heads(), 3);
  EXPECT_EQ(config.options<ViTOptions>().num_classes(), 5);
  EXPECT_EQ(config.options<ViTOptions>().attention_backend(), "math");
  EXPECT_EQ(config.image.channels, 3);
  EXPECT_EQ(config.image.transform.height, 32);
  EXPECT_EQ(config.image.transform.width, 32);
  EXPECT_DOUBLE_EQ(config.image.transform.crop_pct, 0.9);
  EXPECT_EQ(config.image.transform.interpolation, Interpolation::kBicubic);
  EXPECT_EQ(config.image.transform.mean, (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(config.image.transform.std, (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(config.labels.source, LabelsConfig::Source::kImageNet);
  EXPECT_EQ(config.checkpoint_format, "timm");
}

TEST(ModelConfig, ReadsEveryArchitectureAndAttentionKey) {
  const auto config = parse_model_config(R"(name: all_keys
family: vit
architecture:
  img_size: 48
  patch_size: 12
  in_chans: 4
  num_classes: 0
  global_pool: avgmax
  embed_dim: 64
  depth: 3
  num_heads: 8
  mlp_ratio: 2.5
  qkv_bias: false
  qk_norm: true
  proj_bias: false
  init_values: 1.0e-5
  class_token: false
  no_embed_class: true
  reg_tokens: 4
  pre_norm: true
  final_norm: false
  fc_norm: true
  norm_eps: 1.0e-12
  activation: gelu_tanh
  drop_rate: 0.1
  pos_drop_rate: 0.2
  proj_drop_rate: 0.3
  attn_drop_rate: 0.4
  drop_path_rate: 0.5
attention:
  backend: block_local
  chunk_size: 16
  block_size: 8
  window: 2
  global_tokens: 1
preprocess:
  input_size: [4, 36, 24]
  crop_pct: 1.0
  interpolation: bilinear
  mean: [0.1, 0.2, 0.3, 0.4]
  std: [1, 2, 3, 4]
checkpoint:
  format: hf
)",
                                         "all.yaml");
  const auto& o = config.options<ViTOptions>();
  EXPECT_EQ(o.img_size(), 48);
  EXPECT_EQ(o.patch_size(), 12);
  EXPECT_EQ(o.in_chans(), 4);
  EXPECT_EQ(o.num_classes(), 0);
  EXPECT_EQ(o.global_pool(), GlobalPool::kAvgMax);
  EXPECT_EQ(o.embed_dim(), 64);
  EXPECT_EQ(o.depth(), 3);
  EXPECT_EQ(o.num_heads(), 8);
  EXPECT_DOUBLE_EQ(o.mlp_ratio(), 2.5);
  EXPECT_FALSE(o.qkv_bias());
  EXPECT_TRUE(o.qk_norm());
  EXPECT_FALSE(o.proj_bias());
  ASSERT_TRUE(o.init_values().has_value());
  EXPECT_DOUBLE_EQ(*o.init_values(), 1e-5);
  EXPECT_FALSE(o.class_token());
  EXPECT_TRUE(o.no_embed_class());
  EXPECT_EQ(o.reg_tokens(), 4);
  EXPECT_TRUE(o.pre_norm());
  EXPECT_FALSE(o.final_norm());
  ASSERT_TRUE(o.fc_norm().has_value());
  EXPECT_TRUE(*o.fc_norm());
  EXPECT_DOUBLE_EQ(o.norm_eps(), 1e-12);
  EXPECT_EQ(o.activation(), Activation::kGeluTanh);
  EXPECT_DOUBLE_EQ(o.drop_rate(), 0.1);
  EXPECT_DOUBLE_EQ(o.pos_drop_rate(), 0.2);
  EXPECT_DOUBLE_EQ(o.proj_drop_rate(), 0.3);
  EXPECT_DOUBLE_EQ(o.attn_drop_rate(), 0.4);
  EXPECT_DOUBLE_EQ(o.drop_path_rate(), 0.5);
  EXPECT_EQ(o.attention_backend(), "block_local");
  EXPECT_EQ(o.attention_options().chunk_size(), 16);
  EXPECT_EQ(o.attention_options().block_size(), 8);
  EXPECT_EQ(o.attention_options().window(), 2);
  EXPECT_EQ(o.attention_options().global_tokens(), 1);
  EXPECT_EQ(config.image.channels, 4);
  EXPECT_EQ(config.image.transform.height, 36);
  EXPECT_EQ(config.image.transform.width, 24);
  EXPECT_EQ(config.image.transform.interpolation, Interpolation::kBilinear);
  EXPECT_EQ(config.image.transform.std, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(config.labels.source, LabelsConfig::Source::kNone);
  EXPECT_EQ(config.checkpoint_format, "hf");
}

TEST(ModelConfig, AbsentKeysTakeTimmsDefaults) {
  const auto config = parse_model_config(R"(name: defaults
family: vit
architecture: {}
preprocess: {crop_pct: 0.875, interpolation: bicubic, mean: [0, 0, 0], std: [1, 1, 1]}
)",
                                         "defaults.yaml");
  const ViTOptions timm;  // ViTOptions' defaults are timm's VisionTransformer's (ViT-B/16)
  EXPECT_EQ(config.options<ViTOptions>().embed_dim(), timm.embed_dim());
  EXPECT_EQ(config.options<ViTOptions>().depth(), timm.depth());
  EXPECT_EQ(config.options<ViTOptions>().global_pool(), timm.global_pool());
  EXPECT_FALSE(config.options<ViTOptions>().init_values().has_value());
  EXPECT_FALSE(config.options<ViTOptions>().fc_norm().has_value());
  EXPECT_EQ(config.options<ViTOptions>().attention_backend(), "auto");
  // input_size follows the architecture when absent.
  EXPECT_EQ(config.image.channels, 3);
  EXPECT_EQ(config.image.transform.height, 224);
  EXPECT_EQ(config.image.transform.width, 224);
  EXPECT_TRUE(config.checkpoint_format.empty());
}

TEST(ModelConfig, NullKeepsOptionalValuesUnset) {
  const auto config =
      parse_model_config(with(kTinyConfig, "  num_classes: 5\n",
                              "  num_classes: 5\n  init_values: null\n  fc_norm:\n"),
                         "tiny.yaml");
  EXPECT_FALSE(config.options<ViTOptions>().init_values().has_value());
  EXPECT_FALSE(config.options<ViTOptions>().fc_norm().has_value());
}

TEST(ModelConfig, LabelsFileIsResolvedAgainstTheConfigsFolder) {
  testing::TempDir dir;
  dir.write("sub/labels.txt", "cat\ndog\n");
  const auto path = dir.write("sub/model.yaml", with(kTinyConfig, "imagenet", "labels.txt"));
  const auto config = load_model_config(path);
  EXPECT_EQ(config.labels.source, LabelsConfig::Source::kFile);
  EXPECT_EQ(config.labels.file, (dir.path() / "sub" / "labels.txt").string());
  EXPECT_EQ(config.source, path);
}

// --- mistakes, each with its file, key path, line and column ---------------------------------

TEST(ModelConfigErrors, UnknownKey) {
  expect_error(parse_error(with(kTinyConfig, "  depth: 2", "  depht: 2")), "architecture.depht", 7,
               3,
               "unknown key 'depht'; expected one of img_size, img_width, patch_size, "
               "patch_stride, in_chans");
  expect_error(parse_error(std::string(kTinyConfig) + "lables: imagenet\n"), "lables", 21, 1,
               "unknown key 'lables'");
  expect_error(parse_error(with(kTinyConfig, "  backend: math", "  backend: math\n  chunk: 4")),
               "attention.chunk", 12, 3, "expected one of backend, chunk_size, block_size");
  expect_error(parse_error(with(kTinyConfig, "  format: timm", "  format: timm\n  strict: true")),
               "checkpoint.strict", 21, 3, "unknown key 'strict'; expected one of format");
}

TEST(ModelConfigErrors, WrongType) {
  expect_error(parse_error(with(kTinyConfig, "embed_dim: 48", "embed_dim: abc")),
               "architecture.embed_dim", 6, 14, "expected an integer in [1, 16384], got 'abc'");
  expect_error(parse_error(with(kTinyConfig, "embed_dim: 48", "embed_dim: \"48\"")),
               "architecture.embed_dim", 6, 14, "got the string \"48\"");
  expect_error(parse_error(with(kTinyConfig, "depth: 2", "depth: 2.5")), "architecture.depth", 7,
               10, "expected an integer in [1, 1000], got '2.5'");
  expect_error(
      parse_error(with(kTinyConfig, "  num_classes: 5", "  num_classes: 5\n  qkv_bias: yes")),
      "architecture.qkv_bias", 10, 13, "expected true or false, got 'yes'");
  expect_error(
      parse_error(with(kTinyConfig, "  num_classes: 5", "  num_classes: 5\n  mlp_ratio: [4]")),
      "architecture.mlp_ratio", 10, 14, "expected a number in (0, 64], got a sequence");
  expect_error(parse_error(with(kTinyConfig, "crop_pct: 0.9", "crop_pct: .nan")),
               "preprocess.crop_pct", 14, 13, "expected a number in (0, 1]");
  expect_error(parse_error(with(kTinyConfig, "mean: [0.5, 0.5, 0.5]", "mean: [0.5, 0.5]")),
               "preprocess.mean", 16, 9, "expected a sequence of 3 numbers in [0, 1]");
  expect_error(parse_error(with(kTinyConfig, "mean: [0.5, 0.5, 0.5]", "mean: [0.5, x, 0.5]")),
               "preprocess.mean[1]", 16, 15, "got 'x'");
  expect_error(parse_error(with(kTinyConfig, "attention:\n  backend: math", "attention: [math]")),
               "attention", 10, 12, "expected a mapping, got a sequence");
}

TEST(ModelConfigErrors, EmbedDimNotDivisibleByHeads) {
  expect_error(parse_error(with(kTinyConfig, "embed_dim: 48", "embed_dim: 50")),
               "architecture.embed_dim", 6, 14, "embed_dim 50 is not divisible by num_heads 3");
}

TEST(ModelConfigErrors, NonPositiveSizes) {
  expect_error(parse_error(with(kTinyConfig, "depth: 2", "depth: 0")), "architecture.depth", 7, 10,
               "expected an integer in [1, 1000], got '0'");
  expect_error(parse_error(with(kTinyConfig, "patch_size: 8", "patch_size: -8")),
               "architecture.patch_size", 5, 15, "expected an integer in [1, 8192], got '-8'");
  expect_error(parse_error(with(kTinyConfig, "img_size: 32", "img_size: 0")),
               "architecture.img_size", 4, 13, "expected an integer in [1, 8192], got '0'");
  expect_error(parse_error(with(kTinyConfig, "[3, 32, 32]", "[3, 0, 32]")),
               "preprocess.input_size[1]", 13, 19, "integers in [1, 8192], got '0'");
  // Bounded above too: a config is untrusted input.
  expect_error(parse_error(with(kTinyConfig, "depth: 2", "depth: 100000")), "architecture.depth", 7,
               10, "expected an integer in [1, 1000]");
}

TEST(ModelConfigErrors, ImageSizeNotDivisibleByPatchSize) {
  expect_error(parse_error(with(kTinyConfig, "img_size: 32", "img_size: 30")),
               "architecture.img_size", 4, 13, "img_size 30 is not divisible by patch_size 8");
  expect_error(parse_error(with(kTinyConfig, "[3, 32, 32]", "[3, 32, 36]")),
               "preprocess.input_size", 13, 15,
               "input_size 32x36 is not divisible by architecture.patch_size 8");
}

TEST(ModelConfigErrors, UnknownNames) {
  expect_error(parse_error(with(kTinyConfig, "backend: math", "backend: flash9")),
               "attention.backend", 11, 12,
               "unknown attention backend 'flash9'; expected one of auto");
  expect_error(parse_error(with(kTinyConfig, "format: timm", "format: onnx")), "checkpoint.format",
               20, 11, "expected one of timm, torchvision, hf, got 'onnx'");
  expect_error(
      parse_error(with(kTinyConfig, "  num_classes: 5", "  num_classes: 5\n  global_pool: mean")),
      "architecture.global_pool", 10, 16,
      "expected one of token, avg, max, avgmax, cls_dist, none, got 'mean'");
  expect_error(
      parse_error(with(kTinyConfig, "  num_classes: 5", "  num_classes: 5\n  activation: relu")),
      "architecture.activation", 10, 15, "expected one of gelu, gelu_tanh, got 'relu'");
  expect_error(parse_error(with(kTinyConfig, "family: vit", "family: cnn")), "family", 2, 9,
               "expected one of ast, conformer, vit, got 'cnn'");
  expect_error(parse_error(with(kTinyConfig, "interpolation: bicubic", "interpolation: lanczos")),
               "preprocess.interpolation", 15, 18, "expected one of bicubic, bilinear");
  expect_error(
      parse_error(with(kTinyConfig, "format: timm", "format: timm\ninference:\n  quantize: int4")),
      "inference.quantize", 22, 13, "expected one of none, int8, got 'int4'");
  expect_error(
      parse_error(with(kTinyConfig, "format: timm", "format: timm\ninference:\n  dtype: int8")),
      "inference.dtype", 22, 10, "expected one of fp32, bf16, fp16, auto, got 'int8'");
}

TEST(ModelConfig, InferenceQuantize) {
  EXPECT_EQ(parse_model_config(kTinyConfig, "tiny.yaml").inference.quantize, Quantization::kNone);
  EXPECT_EQ(parse_model_config(
                with(kTinyConfig, "format: timm", "format: timm\ninference:\n  quantize: int8"),
                "tiny.yaml")
                .inference.quantize,
            Quantization::kInt8);
  EXPECT_EQ(
      parse_model_config(kTinyConfig, "tiny.yaml", {"inference.quantize=int8"}).inference.quantize,
      Quantization::kInt8);
}

TEST(ModelConfig, InferenceDtype) {
  EXPECT_EQ(parse_model_config(kTinyConfig, "tiny.yaml").inference.dtype, InferenceDtype::kFp32);
  for (const auto dtype : {InferenceDtype::kFp32, InferenceDtype::kBf16, InferenceDtype::kFp16,
                           InferenceDtype::kAuto}) {
    const std::string yaml = std::string("format: timm\ninference:\n  dtype: ") + to_string(dtype);
    EXPECT_EQ(
        parse_model_config(with(kTinyConfig, "format: timm", yaml), "tiny.yaml").inference.dtype,
        dtype);
  }
  EXPECT_EQ(parse_model_config(kTinyConfig, "tiny.yaml", {"inference.dtype=auto"}).inference.dtype,
            InferenceDtype::kAuto);
}

TEST(ModelConfigErrors, InconsistentValues) {
  expect_error(
      parse_error(with(kTinyConfig, "  num_classes: 5", "  num_classes: 5\n  class_token: false")),
      "architecture.class_token", 10, 16, "global_pool 'token' needs class_token: true");
  expect_error(parse_error(with(kTinyConfig, "[3, 32, 32]", "[1, 32, 32]")),
               "preprocess.input_size", 13, 15,
               "input_size has 1 channels, architecture.in_chans is 3");
  expect_error(parse_error(with(kTinyConfig, "labels: imagenet", "labels: no_such_labels.txt")),
               "labels", 18, 9, "is not a file");
}

TEST(ModelConfigErrors, MissingAndDuplicateKeys) {
  // A missing key is reported at the mapping that lacks it.
  expect_error(parse_error(with(kTinyConfig, "name: tiny_test\n", "")), "name", 1, 1,
               "required key is missing");
  expect_error(parse_error(with(kTinyConfig, "  mean: [0.5, 0.5, 0.5]\n", "")), "preprocess.mean",
               13, 3, "required key is missing");
  expect_error(parse_error(with(kTinyConfig, "  depth: 2", "  depth: 2\n  depth: 3")),
               "architecture.depth", 8, 3, "duplicate key 'depth'");
  expect_error(parse_error(with(kTinyConfig, "name: tiny_test", "name: tiny test")), "name", 1, 7,
               "'tiny test' is not a model name");
}

TEST(ModelConfigErrors, MalformedYaml) {
  const auto unclosed = parse_error(with(kTinyConfig, "std: [0.5, 0.5, 0.5]", "std: [0.5, 0.5"));
  EXPECT_EQ(unclosed.key_path(), "");
  EXPECT_GT(unclosed.line(), 0);
  EXPECT_THAT(unclosed.what(),
              StartsWith("bad.yaml:" + std::to_string(unclosed.line()) + ":" +
                         std::to_string(unclosed.column()) + ": malformed YAML: "));
  const auto indent = parse_error(with(kTinyConfig, "  depth: 2", "   depth: 2"));
  EXPECT_EQ(indent.line(), 7);
  EXPECT_THAT(indent.what(), HasSubstr("malformed YAML"));
  const auto empty = parse_error("");
  EXPECT_EQ(empty.line(), 0);
  EXPECT_THAT(empty.what(), StartsWith("bad.yaml: empty document"));
  EXPECT_THAT(parse_error("- a\n- b\n").what(),
              StartsWith("bad.yaml:1:1: expected a mapping at the top level, got a sequence"));
  EXPECT_THAT(parse_error(std::string(kTinyConfig) + "---\nname: second\n").what(),
              StartsWith("bad.yaml:21:1: expected one YAML document"));
  EXPECT_THAT(parse_error(std::string(2 << 20, '#')).what(), HasSubstr("at most 1048576 bytes"));
  // A malformed sequence on which yaml-cpp's parser reports one empty document after another
  // without reading on (its LoadAll kept them all until memory ran out): a second document.
  EXPECT_THAT(parse_error("- a: b\n  c:\n    (x in (\n\"y\",\n    \"z\"\n    )  )  \n    ").what(),
              HasSubstr("expected one YAML document, found a second one"));
  // Deep flow nesting is refused before yaml-cpp tokenizes it, at the line that crosses the limit;
  // brackets in quotes and comments do not count.
  const auto nested = [](int levels) {
    return "name: x\nfamily: vit\narchitecture: {depth: " + std::string(levels, '[') + "1" +
           std::string(levels, ']') + "}\n";
  };
  const auto deep = parse_error(nested(400000));
  EXPECT_THAT(deep.what(), StartsWith("bad.yaml:3: collections nested deeper than 64 levels"));
  EXPECT_EQ(deep.line(), 3);
  EXPECT_THAT(parse_error(nested(63)).what(), Not(HasSubstr("nested deeper")));
  EXPECT_THAT(parse_error("name: '" + std::string(100, '[') + "'\n# " + std::string(100, '{') +
                          "\nfamily: \"" + std::string(100, '[') + "\"\n")
                  .what(),
              Not(HasSubstr("nested deeper")));
}

TEST(ModelConfigErrors, FilesThatCannotBeRead) {
  testing::TempDir dir;
  try {
    load_model_config((dir.path() / "missing.yaml").string());
    ADD_FAILURE() << "no error for a missing file";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing.yaml: no such config file"));
  }
  EXPECT_THROW(load_model_config(dir.path().string()), ConfigError);
}

// --- overrides ---------------------------------------------------------------------------------

TEST(ModelConfigOverrides, SetValuesBeforeValidation) {
  const auto config =
      parse_model_config(with(kTinyConfig, "checkpoint:\n  format: timm\n", ""), "tiny.yaml",
                         {"architecture.depth=4", "architecture.depth=6", "attention.backend=sdpa",
                          "preprocess.mean=[0.1, 0.2, 0.3]", "architecture.init_values=0.5",
                          "checkpoint.format=hf", "architecture.qk_norm=true"});
  EXPECT_EQ(config.options<ViTOptions>().depth(), 6);  // in order: the last one wins
  EXPECT_EQ(config.options<ViTOptions>().attention_backend(), "sdpa");
  EXPECT_EQ(config.image.transform.mean, (std::vector<double>{0.1, 0.2, 0.3}));
  EXPECT_DOUBLE_EQ(config.options<ViTOptions>().init_values().value_or(0.0), 0.5);
  EXPECT_EQ(config.checkpoint_format, "hf");  // a section the file lacks is created
  EXPECT_TRUE(config.options<ViTOptions>().qk_norm());
  EXPECT_EQ(config.overrides.size(), 7u);
  // An override can also replace a whole section.
  const auto section =
      parse_model_config(kTinyConfig, "tiny.yaml", {"attention={backend: chunked, chunk_size: 8}"});
  EXPECT_EQ(section.options<ViTOptions>().attention_backend(), "chunked");
  EXPECT_EQ(section.options<ViTOptions>().attention_options().chunk_size(), 8);
  // Every attention variant is reachable from YAML and --set.
  const auto variants = parse_model_config(
      kTinyConfig, "tiny.yaml",
      {"attention={backend: block_local, block_size: 4, window: 2, global_tokens: 1}",
       "attention.head_gating=true"});
  EXPECT_EQ(variants.options<ViTOptions>().attention_backend(), "block_local");
  EXPECT_EQ(variants.options<ViTOptions>().attention_options().block_size(), 4);
  EXPECT_EQ(variants.options<ViTOptions>().attention_options().window(), 2);
  EXPECT_EQ(variants.options<ViTOptions>().attention_options().global_tokens(), 1);
  EXPECT_TRUE(variants.options<ViTOptions>().head_gating());
  EXPECT_FALSE(section.options<ViTOptions>().head_gating());
  EXPECT_EQ(parse_model_config(kTinyConfig, "tiny.yaml", {"attention.backend=linear"})
                .options<ViTOptions>()
                .attention_backend(),
            "linear");
}

TEST(ModelConfigOverrides, AreValidatedAndNamedInErrors) {
  const auto unknown = parse_error(kTinyConfig, {"architecture.embed_dims=64"});
  EXPECT_EQ(unknown.key_path(), "architecture.embed_dims");
  EXPECT_EQ(unknown.line(), 0);
  EXPECT_THAT(
      unknown.what(),
      StartsWith("bad.yaml: override 'architecture.embed_dims=64': architecture.embed_dims: "
                 "unknown key 'embed_dims'"));
  EXPECT_THAT(parse_error(kTinyConfig, {"architecture.depth=0"}).what(),
              StartsWith("bad.yaml: override 'architecture.depth=0': architecture.depth: expected "
                         "an integer in [1, 1000], got '0'"));
  EXPECT_THAT(parse_error(kTinyConfig, {"architecture.embed_dim=50"}).what(),
              HasSubstr("override 'architecture.embed_dim=50': architecture.embed_dim: embed_dim "
                        "50 is not divisible by num_heads 3"));
  // A relation broken by an override is reported at the override, whichever key it set.
  EXPECT_THAT(parse_error(kTinyConfig, {"architecture.num_heads=5"}).what(),
              HasSubstr("override 'architecture.num_heads=5': architecture.num_heads: embed_dim "
                        "48 is not divisible by num_heads 5"));
  EXPECT_THAT(parse_error(kTinyConfig, {"architecture.patch_size=5"}).what(),
              HasSubstr("override 'architecture.patch_size=5': architecture.patch_size: img_size "
                        "32 is not divisible by patch_size 5"));
  EXPECT_THAT(parse_error(kTinyConfig, {"attention={backend: x}"}).what(),
              HasSubstr("override 'attention={backend: x}': attention.backend: unknown attention"));
  // Values the file set keep their positions when another key is overridden.
  expect_error(parse_error(with(kTinyConfig, "depth: 2", "depth: 0"), {"architecture.num_heads=6"}),
               "architecture.depth", 7, 10, "got '0'");
}

TEST(ModelConfigOverrides, MalformedOverrides) {
  EXPECT_THAT(parse_error(kTinyConfig, {"architecture.depth"}).what(),
              StartsWith("bad.yaml: override 'architecture.depth': expected key.path=value"));
  EXPECT_THAT(parse_error(kTinyConfig, {"=3"}).what(), HasSubstr("expected key.path=value"));
  EXPECT_THAT(parse_error(kTinyConfig, {"architecture..depth=3"}).what(),
              HasSubstr("empty key in 'architecture..depth'"));
  EXPECT_THAT(parse_error(kTinyConfig, {"name.first=x"}).what(),
              HasSubstr("override 'name.first=x': 'name' is 'tiny_test', not a mapping"));
  EXPECT_THAT(parse_error(kTinyConfig, {"architecture.depth=[1, "}).what(),
              HasSubstr("override 'architecture.depth=[1, ': malformed YAML value"));
}

}  // namespace test_model_config
}  // namespace attnzoo
