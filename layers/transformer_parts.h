// Small parts of transformer blocks, named as timm names them so that checkpoints load by name:
// the MLP (fc1 → GELU → fc2), LayerScale (`gamma`), stochastic depth (DropPath).
#pragma once

#include <attnzoo/layers/activation.h>
#include <attnzoo/layers/packed_linear.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <string>

namespace attnzoo {

// torch.nn.LayerNorm(dim, eps=eps): over the last dim, with an affine weight and bias.
torch::nn::LayerNorm layer_norm(int64_t dim, double eps);

struct MlpOptions {
  MlpOptions(int64_t in_features, int64_t hidden_features)
      : in_features_(in_features), hidden_features_(hidden_features) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, hidden_features);
  TORCH_ARG(int64_t, out_features) = 0;  // 0 = in_features
  TORCH_ARG(bool, bias) = true;
  // Between fc1 and fc2: exact GELU (timm), or its tanh approximation (some JAX ports), ...
  TORCH_ARG(Activation, activation) = Activation::kGelu;
  TORCH_ARG(double, drop) = 0.0;
};

class MlpImpl : public torch::nn::Cloneable<MlpImpl> {
 public:
  explicit MlpImpl(MlpOptions options);
  void reset() override;
  // x: [..., in] -> [..., out]
  torch::Tensor forward(const torch::Tensor& x);
  // fc1 and fc2 in int8 at inference (PackedLinear::set_int8); returns 2.
  int64_t set_int8(bool on);

  MlpOptions options;
  torch::nn::Linear fc1{nullptr};
  torch::nn::Linear fc2{nullptr};
  torch::nn::Dropout drop{nullptr};

 private:
  PackedLinear fc1_packed_, fc2_packed_;  // the inference fast path (layers/packed_linear.h)
};
TORCH_MODULE(Mlp);

// Per-channel learned scale (Touvron et al. 2021, CaiT), initialised to init_values.
class LayerScaleImpl : public torch::nn::Cloneable<LayerScaleImpl> {
 public:
  LayerScaleImpl(int64_t dim, double init_values) : dim_(dim), init_values_(init_values) {
    reset();
  }
  void reset() override;
  // x: [..., dim] -> [..., dim]
  torch::Tensor forward(const torch::Tensor& x) { return x * gamma; }

  torch::Tensor gamma;

 private:
  int64_t dim_;
  double init_values_;
};
TORCH_MODULE(LayerScale);

// Patch embedding: a convolution with kernel = patch size, i.e. a linear map of each patch. The
// stride is the patch size (non-overlapping patches, ViT) unless given: a smaller one overlaps
// them (the Audio Spectrogram Transformer's 16 x 16 patches every 10).
struct PatchEmbedOptions {
  PatchEmbedOptions(int64_t in_chans, int64_t embed_dim, int64_t patch_size)
      : in_chans_(in_chans), embed_dim_(embed_dim), patch_size_(patch_size) {}
  TORCH_ARG(int64_t, in_chans);
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(int64_t, patch_size);
  TORCH_ARG(int64_t, stride) = 0;  // 0: patch_size
  TORCH_ARG(bool, bias) = true;
};

class PatchEmbedImpl : public torch::nn::Cloneable<PatchEmbedImpl> {
 public:
  explicit PatchEmbedImpl(PatchEmbedOptions options);
  void reset() override;
  // images: [B, C, H, W] -> patch grid [B, (H - P)/S + 1, (W - P)/S + 1, D]; without a stride of
  // its own (S = P) H and W must be multiples of P, with one at least P.
  torch::Tensor forward(const torch::Tensor& images);
  int64_t stride() const { return options.stride() > 0 ? options.stride() : options.patch_size(); }

  PatchEmbedOptions options;
  torch::nn::Conv2d proj{nullptr};
};
TORCH_MODULE(PatchEmbed);

// Stochastic depth (Huang et al. 2016): in training, zeroes a whole residual branch per sample
// with probability p and scales the survivors by 1/(1 − p); the identity in evaluation.
// x: [B, ...] -> [B, ...]
torch::Tensor drop_path(const torch::Tensor& x, double p, bool training);

}  // namespace attnzoo
