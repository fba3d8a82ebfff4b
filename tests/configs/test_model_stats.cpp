// The analytic parameter count must equal the built module's for every option that changes the
// layout; the MAC count follows the documented convention. (Per zoo entry, both are compared with
// timm in test_zoo.cpp.)
#include <attnzoo/configs/model_stats.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace attnzoo {
namespace test_model_stats {

int64_t built_parameter_count(const ViTOptions& options) {
  VisionTransformer model(options);
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  return n;
}

ViTOptions small() {
  return ViTOptions().img_size(32).patch_size(8).embed_dim(48).depth(2).num_heads(3).num_classes(5);
}

TEST(ModelStats, ParameterCountEqualsTheBuiltModelForEveryLayoutOption) {
  const std::vector<std::pair<std::string, ViTOptions>> cases = {
      {"plain", small()},
      {"qk_norm", small().qk_norm(true)},
      {"layer_scale", small().init_values(0.1)},
      {"registers", small().reg_tokens(3)},
      {"no_embed_class", small().reg_tokens(2).no_embed_class(true)},
      {"no class token", small().class_token(false).global_pool(GlobalPool::kAvg)},
      {"pre_norm", small().pre_norm(true)},
      {"no biases", small().qkv_bias(false).proj_bias(false)},
      {"no final norm", small().final_norm(false)},
      {"fc_norm", small().global_pool(GlobalPool::kAvg).fc_norm(true)},
      {"features only", small().num_classes(0)},
      {"mlp_ratio 2.5", small().mlp_ratio(2.5)},
      {"4 channels, patch 4", small().in_chans(4).patch_size(4)},
  };
  for (const auto& [name, options] : cases) {
    EXPECT_EQ(vit_parameter_count(options), built_parameter_count(options)) << name;
  }
}

TEST(ModelStats, VitBase16At224) {
  ModelConfig config;
  config.family = "vit";
  config.architecture = ViTOptions();  // timm's defaults: ViT-B/16 at 224, 1000 classes
  config.image.channels = 3;
  config.image.transform.height = 224;
  config.image.transform.width = 224;
  const auto stats = model_stats(config);
  EXPECT_EQ(stats.parameters, 86567656);  // timm's count for vit_base_patch16_224
  // 196 patches + class token = 197 tokens, D = 768, MLP 3072:
  //   patch embedding 196·768·768 + 12 blocks × (qkv 197·768·2304 + scores and attention·v
  //   2·197²·768 + proj 197·768² + MLP 2·197·768·3072) + head 768·1000
  const int64_t block =
      197LL * 768 * 2304 + 2LL * 197 * 197 * 768 + 197LL * 768 * 768 + 2LL * 197 * 768 * 3072;
  EXPECT_EQ(stats.macs, 196LL * 768 * 768 + 12 * block + 768LL * 1000);
  EXPECT_NEAR(stats.macs / 1e9, 17.56, 0.01);
  EXPECT_NEAR(stats.gflops(), 35.13, 0.01);
}

TEST(ModelStats, MacsFollowTheInputSize) {
  const auto o = small();  // 32 px, patch 8, D 48, 2 blocks, MLP 192, 5 classes
  // 48 x 64 px: 6 x 8 = 48 patches + class token = 49 tokens.
  const int64_t tokens = 49;
  const int64_t block =
      tokens * 48 * 144 + 2 * tokens * tokens * 48 + tokens * 48 * 48 + 2 * tokens * 48 * 192;
  EXPECT_EQ(vit_macs(o, 48, 64), 48 * 48 * 3 * 64 + 2 * block + 48 * 5);
  // Without pooling, the classifier sees every token.
  EXPECT_EQ(vit_macs(ViTOptions(o).global_pool(GlobalPool::kNone), 48, 64) - vit_macs(o, 48, 64),
            (tokens - 1) * 48 * 5);
  EXPECT_EQ(vit_macs(ViTOptions(o).num_classes(0), 48, 64), vit_macs(o, 48, 64) - 48 * 5);
}

}  // namespace test_model_stats
}  // namespace attnzoo
