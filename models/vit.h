// Vision Transformer (Dosovitskiy et al. 2020, "An Image is Worth 16x16 Words"), with the options
// of timm's VisionTransformer that checkpoints rely on, and timm's parameter names: a timm
// state_dict loads by name; torchvision and Hugging Face layouts are mapped in
// models/vit_checkpoint.h.
//
//   x = patch_embed(img) (+ class / distillation / register tokens) + pos_embed   [B, N, D]
//   x = x + drop_path(ls1(attn(norm1(x))))                          per block (pre-norm)
//   x = x + drop_path(ls2(mlp(norm2(x))))
//   logits = head(fc_norm(pool(norm(x))))
#pragma once

#include <attnzoo/layers/attention.h>
#include <attnzoo/layers/transformer_parts.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/normalization.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace attnzoo {

// What the head sees of the tokens (timm's global_pool):
enum class GlobalPool {
  kToken,    // "token": the class token; with a distillation token, the mean of the class head's
             // and the distillation head's logits (DeiT distilled)
  kAvg,      // "avg": the mean of the patch tokens
  kMax,      // "max": their maximum
  kAvgMax,   // "avgmax": the mean of both
  kClsDist,  // "cls_dist": the mean of the class and distillation tokens (AST)
  kNone,     // "none": every token, [B, N, D]
};
const char* to_string(GlobalPool pool);

struct ViTOptions {
  TORCH_ARG(int64_t, img_size) = 224;  // the height, and the width unless img_width is set
  TORCH_ARG(int64_t, img_width) = 0;   // 0: img_size (square)
  TORCH_ARG(int64_t, patch_size) = 16;
  // The patch grid's step; 0: patch_size (non-overlapping). Smaller overlaps the patches (AST).
  TORCH_ARG(int64_t, patch_stride) = 0;
  TORCH_ARG(int64_t, in_chans) = 3;
  TORCH_ARG(int64_t, num_classes) = 1000;  // 0: no classifier, forward returns pooled features
  TORCH_ARG(GlobalPool, global_pool) = GlobalPool::kToken;
  TORCH_ARG(int64_t, embed_dim) = 768;
  TORCH_ARG(int64_t, depth) = 12;
  TORCH_ARG(int64_t, num_heads) = 12;
  TORCH_ARG(double, mlp_ratio) = 4.0;
  TORCH_ARG(bool, qkv_bias) = true;
  TORCH_ARG(bool, qk_norm) = false;
  TORCH_ARG(bool, proj_bias) = true;
  // LayerScale init value; nullopt = no LayerScale.
  TORCH_ARG(std::optional<double>, init_values) = std::nullopt;
  TORCH_ARG(bool, class_token) = true;
  // A distillation token after the class token (DeiT's distilled models, AST).
  TORCH_ARG(bool, dist_token) = false;
  // With dist_token and global_pool token: the distillation token's own head (head_dist),
  // averaged with the class head (timm's distilled DeiT, Hugging Face's
  // DeiTForImageClassificationWithTeacher); false: the class head alone (Hugging Face's
  // DeiTForImageClassification).
  TORCH_ARG(bool, dist_head) = true;
  // Position embeddings only for the patches, added before the prefix tokens are prepended.
  TORCH_ARG(bool, no_embed_class) = false;
  TORCH_ARG(int64_t, reg_tokens) = 0;
  // LayerNorm after the embedding (CLIP); the patch projection then has no bias.
  TORCH_ARG(bool, pre_norm) = false;
  TORCH_ARG(bool, final_norm) = true;
  // Normalise after pooling rather than before; nullopt = timm's default (on for avg/max pooling).
  TORCH_ARG(std::optional<bool>, fc_norm) = std::nullopt;
  // A LayerNorm of the pooled features before the head, besides the final norm (AST's head).
  TORCH_ARG(bool, head_norm) = false;
  // LayerNorm epsilon: timm 1e-6, Hugging Face 1e-12, CLIP 1e-5.
  TORCH_ARG(double, norm_eps) = 1e-6;
  // The MLPs' activation: exact GELU (timm) or its tanh approximation.
  TORCH_ARG(Activation, activation) = Activation::kGelu;
  TORCH_ARG(double, drop_rate) = 0.0;       // before the classifier
  TORCH_ARG(double, pos_drop_rate) = 0.0;   // after adding the position embedding
  TORCH_ARG(double, proj_drop_rate) = 0.0;  // after the attention and MLP projections
  TORCH_ARG(double, attn_drop_rate) = 0.0;
  TORCH_ARG(double, drop_path_rate) = 0.0;  // stochastic depth, linear from 0 to this over depth
  // Dynamic head gating in every block's attention (MultiheadAttentionOptions::head_gating).
  TORCH_ARG(bool, head_gating) = false;
  // The attention backend ("auto", "math", "sdpa", ...) and its settings.
  TORCH_ARG(std::string, attention_backend) = "auto";
  TORCH_ARG(AttentionBackendOptions, attention_options) = {};
};

// One pre-norm transformer block.
class ViTBlockImpl : public torch::nn::Cloneable<ViTBlockImpl> {
 public:
  ViTBlockImpl(const ViTOptions& options, double drop_path_rate);
  void reset() override;
  // x: [B, N, D] -> [B, N, D]; attention probabilities [B, H, N, N] into *weights when given.
  torch::Tensor forward(const torch::Tensor& x, torch::Tensor* weights = nullptr);
  // The same block at inference with both residual adds fused into the LayerNorm that follows
  // them (kernels/ops.h: add_layer_norm), given the residual stream x and h = norm1(x);
  // next_norm is the LayerNorm applied to this block's output (the next block's norm1 or the
  // model's final norm), or null for none.
  // x, h: [B, N, D] -> (output [B, N, D], next_norm(output) [B, N, D] or undefined)
  std::tuple<torch::Tensor, torch::Tensor> forward_fused(const torch::Tensor& x,
                                                         const torch::Tensor& h,
                                                         const torch::nn::LayerNormImpl* next_norm);

  torch::nn::LayerNorm norm1{nullptr};
  MultiheadAttention attn{nullptr};
  LayerScale ls1{nullptr};
  torch::nn::LayerNorm norm2{nullptr};
  Mlp mlp{nullptr};
  LayerScale ls2{nullptr};

 private:
  ViTOptions options_;
  double drop_path_rate_;
};
TORCH_MODULE(ViTBlock);

// What forward_features can also return for visualisation and diagnostics.
struct ViTIntermediates {
  std::vector<torch::Tensor> blocks;     // output of each block, [B, N, D]
  std::vector<torch::Tensor> attention;  // probabilities of each block, [B, H, N, N]
};

class VisionTransformerImpl : public torch::nn::Cloneable<VisionTransformerImpl> {
 public:
  explicit VisionTransformerImpl(ViTOptions options);
  void reset() override;
  // Re-draws the weights as timm's default init does (trunc-normal 0.02, zero biases, unit norms).
  void reset_parameters();

  // images: [B, C, H, W] -> logits [B, num_classes] (or pooled features [B, D] if num_classes 0,
  // or all tokens [B, N, D] with GlobalPool::kNone).
  torch::Tensor forward(const torch::Tensor& images);
  // images: [B, C, H, W] -> tokens [B, N, D] after the final norm. Any H, W divisible by the
  // patch size: the position embedding is resampled (bicubic, antialiased, as timm) when the grid
  // differs from the configured one.
  torch::Tensor forward_features(const torch::Tensor& images,
                                 ViTIntermediates* intermediates = nullptr,
                                 bool attention_weights = false);
  // tokens: [B, N, D] -> logits, or the pooled, normalised features when pre_logits.
  torch::Tensor forward_head(const torch::Tensor& tokens, bool pre_logits = false);

  int64_t num_prefix_tokens() const;
  // The configured patch grid: (rows, cols) of an img_size x img_width input.
  std::pair<int64_t, int64_t> grid() const;
  // pos_embed resampled to a grid of (rows, cols) patches: [1, T, D].
  torch::Tensor resampled_pos_embed(int64_t rows, int64_t cols) const;

  ViTOptions options;
  PatchEmbed patch_embed{nullptr};
  torch::Tensor cls_token;   // [1, 1, D]
  torch::Tensor dist_token;  // [1, 1, D]
  torch::Tensor reg_token;   // [1, R, D]
  torch::Tensor pos_embed;   // [1, T, D]
  torch::nn::LayerNorm norm_pre{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::LayerNorm fc_norm{nullptr};
  torch::nn::LayerNorm head_norm{nullptr};
  torch::nn::Linear head{nullptr};
  torch::nn::Linear head_dist{nullptr};  // DeiT distilled: the distillation token's head
};
TORCH_MODULE(VisionTransformer);

// Sizes that follow from the options, shared by the model and its analytic cost.
int64_t vit_prefix_tokens(const ViTOptions& options);  // class, distillation, register tokens
int64_t vit_img_width(const ViTOptions& options);      // img_width, else img_size
int64_t vit_patch_stride(const ViTOptions& options);   // patch_stride, else patch_size
// The patch grid (rows, cols) of a height x width input: ((H - P) / S + 1, (W - P) / S + 1).
std::pair<int64_t, int64_t> vit_grid(const ViTOptions& options, int64_t height, int64_t width);

// How a position embedding grid is resized: timm's rule (bicubic, antialiased, align_corners
// false: resample_abs_pos_embed) or torchvision's (bicubic, align_corners true, no antialiasing:
// interpolate_embeddings).
enum class PosEmbedResampling { kTimm, kTorchvision };

// Resamples an absolute position embedding [1, prefix + rows·cols, D] from an old grid to a new
// one, keeping the first `num_prefix` rows (class/register tokens) as they are; in float32.
torch::Tensor resample_pos_embed(const torch::Tensor& pos_embed, int64_t num_prefix,
                                 int64_t old_rows, int64_t old_cols, int64_t new_rows,
                                 int64_t new_cols,
                                 PosEmbedResampling rule = PosEmbedResampling::kTimm);

}  // namespace attnzoo
