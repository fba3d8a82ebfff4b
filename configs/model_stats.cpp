#include "configs/model_stats.h"

namespace attnzoo {
namespace {

int64_t mlp_hidden(const ViTOptions& o) {
  return static_cast<int64_t>(static_cast<double>(o.embed_dim()) * o.mlp_ratio());
}

int64_t prefix_tokens(const ViTOptions& o) { return (o.class_token() ? 1 : 0) + o.reg_tokens(); }

}  // namespace

int64_t vit_parameter_count(const ViTOptions& o) {
  const int64_t d = o.embed_dim(), hidden = mlp_hidden(o), head_dim = d / o.num_heads();
  const int64_t layer_norm = 2 * d;
  const int64_t grid = o.img_size() / o.patch_size();
  int64_t n = 0;
  // Patch embedding: a Conv2d with kernel = stride = patch; no bias under pre_norm (CLIP).
  n += d * o.in_chans() * o.patch_size() * o.patch_size() + (o.pre_norm() ? 0 : d);
  n += prefix_tokens(o) * d;  // class and register tokens
  n += (grid * grid + (o.no_embed_class() ? 0 : prefix_tokens(o))) * d;  // pos_embed
  if (o.pre_norm()) n += layer_norm;
  int64_t block = 2 * layer_norm;
  block += 3 * d * d + (o.qkv_bias() ? 3 * d : 0);
  if (o.qk_norm()) block += 2 * 2 * head_dim;  // q_norm and k_norm over each head's features
  block += d * d + (o.proj_bias() ? d : 0);
  block += d * hidden + hidden + hidden * d + d;  // fc1, fc2 (with biases)
  if (o.init_values()) block += 2 * d;            // LayerScale ls1, ls2
  n += o.depth() * block;
  // The final norm sits before pooling (norm) or after it (fc_norm): the same size either way.
  if (o.final_norm()) n += layer_norm;
  if (o.num_classes() > 0) n += d * o.num_classes() + o.num_classes();
  return n;
}

int64_t vit_macs(const ViTOptions& o, int64_t height, int64_t width) {
  const int64_t d = o.embed_dim(), hidden = mlp_hidden(o);
  const int64_t patches = (height / o.patch_size()) * (width / o.patch_size());
  const int64_t tokens = patches + prefix_tokens(o);
  int64_t macs = patches * d * o.in_chans() * o.patch_size() * o.patch_size();
  int64_t block = tokens * d * 3 * d;  // qkv
  block += 2 * tokens * tokens * d;    // q·kᵀ and attention·v, over all heads
  block += tokens * d * d;             // proj
  block += 2 * tokens * d * hidden;    // fc1, fc2
  macs += o.depth() * block;
  if (o.num_classes() > 0) {
    // One pooled vector, or every token without pooling.
    const int64_t rows = o.global_pool() == "none" ? tokens : 1;
    macs += rows * d * o.num_classes();
  }
  return macs;
}

ModelStats model_stats(const ModelConfig& config) {
  ModelStats stats;
  switch (config.family) {
    case ModelFamily::kViT:
      stats.parameters = vit_parameter_count(config.vit);
      stats.macs = vit_macs(config.vit, config.image.input_size[1], config.image.input_size[2]);
      break;
  }
  return stats;
}

}  // namespace attnzoo
