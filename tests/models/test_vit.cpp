// ViT against timm: weights from timm's state_dict, loaded by name, and the same outputs.
#include <attnzoo/models/checkpoint.h>
#include <attnzoo/models/vit.h>
#include <attnzoo/models/vit_checkpoint.h>
#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace attnzoo {
namespace test_vit {
using testing::max_abs_diff;

using ::testing::AllOf;
using ::testing::HasSubstr;

struct Reference {
  io::Safetensors weights;
  io::Safetensors io;
};

Reference reference(const std::string& name) {
  const std::string dir = ATTNZOO_MODELS_REFERENCE_DIR;
  return {io::load_safetensors(dir + "/" + name + ".weights.safetensors"),
          io::load_safetensors(dir + "/" + name + ".io.safetensors")};
}

// The model of the reference "vit_options" (make_vit_reference.py): registers, no class
// embedding, average pooling, QK norm and layer scale.
ViTOptions vit_options_model() {
  return ViTOptions()
      .img_size(64)
      .embed_dim(96)
      .depth(3)
      .num_heads(4)
      .num_classes(10)
      .reg_tokens(2)
      .no_embed_class(true)
      .global_pool(GlobalPool::kAvg)
      .qk_norm(true)
      .init_values(0.1);
}

void check_against_timm(const std::string& name, const ViTOptions& options) {
  SCOPED_TRACE(name);
  const auto ref = reference(name);
  VisionTransformer model(options);
  model->eval();
  load_state_dict(*model, ref.weights.tensors, {{}, {}, name});
  torch::NoGradGuard no_grad;
  const auto& pixels = ref.io.tensors["pixels"];
  const auto features = model->forward_features(pixels);
  EXPECT_EQ(features.sizes(), ref.io.tensors["features"].sizes());
  EXPECT_LE(max_abs_diff(features, ref.io.tensors["features"]), 1e-4);
  const auto logits = model->forward_head(features);
  EXPECT_EQ(logits.sizes(), ref.io.tensors["logits"].sizes());
  EXPECT_LE(max_abs_diff(logits, ref.io.tensors["logits"]), 1e-4);
  EXPECT_LE(max_abs_diff(model(pixels), logits), 0.0);
}

TEST(ViT, MatchesTimmVitTiny) {
  check_against_timm("vit_tiny", ViTOptions().embed_dim(192).depth(12).num_heads(3));
}

// bfloat16 inference against timm's float32 logits: within 3% of the logits' scale (measured:
// 1.1%; one bfloat16 rounding is 0.4% and twelve blocks compound it), and the same top class.
TEST(ViT, Bfloat16MatchesTimmWithinItsRounding) {
  const auto ref = reference("vit_tiny");
  VisionTransformer model(ViTOptions().embed_dim(192).depth(12).num_heads(3));
  model->eval();
  load_state_dict(*model, ref.weights.tensors, {{}, {}, "vit_tiny"});
  model->to(torch::kBFloat16);
  torch::NoGradGuard no_grad;
  const auto logits = model(ref.io.tensors["pixels"].to(torch::kBFloat16)).to(torch::kFloat);
  const auto& expected = ref.io.tensors["logits"];
  const double scale = expected.abs().max().item<double>();
  const double error = max_abs_diff(logits, expected);
  EXPECT_LE(error, 0.03 * scale);
  EXPECT_GT(error, 0.0);  // bfloat16 ran: not float32 again
  EXPECT_TRUE(torch::equal(logits.argmax(-1), expected.argmax(-1)));
}

TEST(ViT, MatchesTimmWithRegistersNoEmbedClassAvgPoolQkNormLayerScale) {
  check_against_timm("vit_options", vit_options_model());
}

TEST(ViT, MatchesTimmAtAnotherInputSize) {
  // Configured for 64×64 (4×4 patches), run at 96×80 (6×5): resampled position embeddings.
  check_against_timm("vit_resized",
                     ViTOptions().img_size(64).embed_dim(64).depth(2).num_heads(2).num_classes(7));
}

TEST(ViT, MatchesTimmPatch14MaxPoolNoClassTokenTanhGelu) {
  check_against_timm("vit_variant", ViTOptions()
                                        .img_size(56)
                                        .patch_size(14)
                                        .embed_dim(48)
                                        .depth(2)
                                        .num_heads(3)
                                        .num_classes(5)
                                        .class_token(false)
                                        .global_pool(GlobalPool::kMax)
                                        .qkv_bias(false)
                                        .activation(Activation::kGeluTanh));
}

// A checkpoint of another layout: detected, mapped onto timm's names, loaded strictly.
void check_other_layout(const std::string& name, ViTCheckpointFormat format,
                        const ViTOptions& options) {
  SCOPED_TRACE(name);
  const auto ref = reference(name);
  EXPECT_EQ(detect_vit_format(ref.weights.tensors), format);
  const auto mapped = to_timm_layout(ref.weights.tensors, format);
  VisionTransformer model(options);
  model->eval();
  load_state_dict(*model, mapped.tensors, {{}, {}, name});
  torch::NoGradGuard no_grad;
  const auto logits = model(ref.io.tensors["pixels"]);
  EXPECT_EQ(logits.sizes(), ref.io.tensors["logits"].sizes());
  EXPECT_LE(max_abs_diff(logits, ref.io.tensors["logits"]), 1e-4);
}

TEST(ViT, MatchesTimmDeiTDistilled) {
  // A distillation token after the class token; the two heads' logits averaged.
  check_against_timm("deit_distilled", ViTOptions()
                                           .img_size(32)
                                           .patch_size(8)
                                           .embed_dim(48)
                                           .depth(2)
                                           .num_heads(3)
                                           .num_classes(5)
                                           .dist_token(true));
}

TEST(ViT, MatchesTorchvisionVitB16) {
  check_other_layout("torchvision_vit_b_16", ViTCheckpointFormat::kTorchvision, ViTOptions());
}

TEST(ViT, MatchesHuggingFaceViTForImageClassification) {
  // Hugging Face's ViT: LayerNorm eps 1e-12, exact GELU, classifier on the class token.
  check_other_layout("hf_vit", ViTCheckpointFormat::kHuggingFace,
                     ViTOptions()
                         .img_size(32)
                         .patch_size(8)
                         .embed_dim(48)
                         .depth(2)
                         .num_heads(4)
                         .mlp_ratio(2.0)
                         .num_classes(6)
                         .norm_eps(1e-12));
}

TEST(ViT, LoadsHubFilesInTheTransformers4Layout) {
  const auto ref = reference("hf_vit");
  const auto v4 = io::load_safetensors(std::string(ATTNZOO_MODELS_REFERENCE_DIR) +
                                       "/hf_vit_v4.weights.safetensors");
  ASSERT_TRUE(v4.tensors.contains("vit.encoder.layer.0.attention.attention.query.weight"));
  EXPECT_EQ(detect_vit_format(v4.tensors), ViTCheckpointFormat::kHuggingFace);
  const auto from_v4 = to_timm_layout(v4.tensors, ViTCheckpointFormat::kHuggingFace);
  const auto from_v5 = to_timm_layout(ref.weights.tensors, ViTCheckpointFormat::kHuggingFace);
  ASSERT_EQ(from_v4.tensors.keys().size(), from_v5.tensors.keys().size());
  for (const auto& item : from_v5.tensors) {
    ASSERT_TRUE(from_v4.tensors.contains(item.key())) << item.key();
    EXPECT_TRUE(torch::equal(from_v4.tensors[item.key()], item.value())) << item.key();
  }
}

// A checkpoint trained at 64×64 loaded into a model configured for 96×96.
void check_resolution_change(const std::string& name, ViTCheckpointFormat format,
                             const ViTOptions& options) {
  SCOPED_TRACE(name);
  const auto ref = reference(name);
  VisionTransformer model(options);
  model->eval();
  const auto report = load_vit_checkpoint(*model, ref.weights.tensors, std::nullopt, name);
  EXPECT_EQ(report.format, format);
  EXPECT_TRUE(report.pos_embed_resampled);
  torch::NoGradGuard no_grad;
  EXPECT_LE(max_abs_diff(model(ref.io.tensors["pixels"]), ref.io.tensors["logits"]), 1e-4);
}

TEST(ViT, CheckpointsOfAnotherResolutionAreResampledAsTheirLibraryDoes) {
  check_resolution_change(
      "timm_64_to_96", ViTCheckpointFormat::kTimm,
      ViTOptions().img_size(96).embed_dim(64).depth(2).num_heads(2).num_classes(7));
  check_resolution_change(
      "torchvision_64_to_96", ViTCheckpointFormat::kTorchvision,
      ViTOptions().img_size(96).embed_dim(32).depth(2).num_heads(2).mlp_ratio(2.0).num_classes(5));
}

TEST(ViT, HeadGatingReachesEveryBlock) {
  VisionTransformer model(
      ViTOptions().img_size(32).embed_dim(32).depth(2).num_heads(4).head_gating(true));
  const auto params = model->named_parameters();
  EXPECT_TRUE(params.contains("blocks.1.attn.head_gate.weight"));
  VisionTransformer plain(ViTOptions().img_size(32).embed_dim(32).depth(2).num_heads(4));
  load_state_dict(*plain, state_dict(*model),
                  {{},
                   {"blocks.0.attn.head_gate.weight", "blocks.0.attn.head_gate.bias",
                    "blocks.1.attn.head_gate.weight", "blocks.1.attn.head_gate.bias"},
                   "gated"});
  model->eval();
  plain->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 3, 32, 32});
  EXPECT_LE(max_abs_diff(model(x), plain(x)), 1e-5);  // zero-initialised gates are uniform
}

TEST(ViT, TimmCheckpointsAreDetectedAsTimm) {
  EXPECT_EQ(detect_vit_format(reference("vit_tiny").weights.tensors), ViTCheckpointFormat::kTimm);
  EXPECT_EQ(parse_vit_format("hf"), ViTCheckpointFormat::kHuggingFace);
  EXPECT_THROW(parse_vit_format("keras"), c10::Error);
}

TEST(ViT, EveryAttentionBackendGivesTheSameLogits) {
  const auto ref = reference("vit_options");
  const auto& pixels = ref.io.tensors["pixels"];
  for (const char* backend : {"math", "sdpa", "chunked"}) {
    VisionTransformer model(vit_options_model().attention_backend(backend).attention_options(
        AttentionBackendOptions().chunk_size(5)));
    model->eval();
    load_state_dict(*model, ref.weights.tensors);
    torch::NoGradGuard no_grad;
    EXPECT_LE(max_abs_diff(model(pixels), ref.io.tensors["logits"]), 1e-4) << backend;
  }
}

TEST(ViT, IntermediatesAndAttentionMaps) {
  VisionTransformer model(ViTOptions().img_size(32).embed_dim(32).depth(3).num_heads(2));
  model->eval();
  ViTIntermediates inter;
  const auto out = model->forward_features(torch::randn({2, 3, 32, 32}), &inter, true);
  ASSERT_EQ(inter.blocks.size(), 3u);
  ASSERT_EQ(inter.attention.size(), 3u);
  EXPECT_EQ(inter.attention[0].sizes(), (std::vector<int64_t>{2, 2, 5, 5}));
  const auto sums = inter.attention[2].sum(-1);
  EXPECT_LE(max_abs_diff(sums, torch::ones_like(sums)), 1e-5);
  // The last block's output, normalised, is the features.
  EXPECT_LE(max_abs_diff(model->norm(inter.blocks.back()), out), 1e-6);
}

TEST(ViT, LoaderReportsEveryProblemAtOnce) {
  VisionTransformer model(ViTOptions().img_size(32).embed_dim(32).depth(2).num_heads(2));
  auto tensors = state_dict(*model);
  io::TensorDict broken;
  for (const auto& item : tensors) {
    if (item.key() == "blocks.1.mlp.fc2.bias") continue;  // missing
    if (item.key() == "pos_embed") {
      broken.insert(item.key(), torch::zeros({1, 17, 31}));  // wrong shape
      continue;
    }
    broken.insert(item.key(), item.value());
  }
  broken.insert("blocks.2.norm1.weight", torch::ones({32}));  // unexpected
  const auto before = model->pos_embed.clone();
  try {
    load_state_dict(*model, broken, {{}, {}, "broken.safetensors"});
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("broken.safetensors"), HasSubstr("missing (1)"),
                                HasSubstr("blocks.1.mlp.fc2.bias"), HasSubstr("wrong shape (1)"),
                                HasSubstr("pos_embed (checkpoint [1, 17, 31], model [1, 5, 32])"),
                                HasSubstr("unexpected (1)"), HasSubstr("blocks.2.norm1.weight")));
  }
  EXPECT_TRUE(torch::equal(model->pos_embed, before));  // nothing loaded on error
  // An optional tensor may be absent.
  io::TensorDict without_head;
  for (const auto& item : tensors) {
    if (item.key().rfind("head.", 0) != 0) without_head.insert(item.key(), item.value());
  }
  EXPECT_NO_THROW(load_state_dict(*model, without_head, {{"head.weight", "head.bias"}, {}, "x"}));
  // A hostile file's thousands of names: the first 30 of a kind, then how many more.
  io::TensorDict flood = tensors;
  for (int i = 0; i < 5000; ++i) flood.insert("extra." + std::to_string(i), torch::zeros({1}));
  try {
    load_state_dict(*model, flood, {{}, {}, "flood.safetensors"});
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, AllOf(HasSubstr("flood.safetensors"), HasSubstr("unexpected (5000)"),
                               HasSubstr("... and 4970 more")));
    EXPECT_LT(message.size(), 2000u);
  }
}

TEST(ViT, BadConfigurationsAndInputs) {
  EXPECT_THROW(VisionTransformer(ViTOptions().img_size(100)), c10::Error);  // 100 % 16 != 0
  EXPECT_THROW(VisionTransformer(ViTOptions().embed_dim(100).num_heads(3)), c10::Error);
  EXPECT_THROW(VisionTransformer(ViTOptions().global_pool(GlobalPool::kClsDist)), c10::Error);
  EXPECT_THROW(VisionTransformer(ViTOptions().class_token(false)), c10::Error);  // token pool
  VisionTransformer model(ViTOptions().img_size(32).embed_dim(32).depth(1).num_heads(2));
  try {
    model(torch::randn({1, 3, 33, 32}));
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(),
                HasSubstr("33x32 is not a multiple of the patch size 16"));
  }
}

}  // namespace test_vit
}  // namespace attnzoo
