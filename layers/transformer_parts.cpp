#include <attnzoo/kernels/ops.h>
#include <attnzoo/layers/fused_epilogues.h>
#include <attnzoo/layers/transformer_parts.h>

#include <torch/nn/functional/activation.h>

namespace attnzoo {

torch::nn::LayerNorm layer_norm(int64_t dim, double eps) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(eps));
}

MlpImpl::MlpImpl(MlpOptions options_) : options(std::move(options_)) { reset(); }

void MlpImpl::reset() {
  const auto& o = options;
  TORCH_CHECK_VALUE(o.in_features() > 0 && o.hidden_features() > 0 && o.out_features() >= 0,
                    "Mlp: feature sizes must be positive, got in ", o.in_features(), ", hidden ",
                    o.hidden_features(), ", out ", o.out_features());
  const int64_t out = o.out_features() > 0 ? o.out_features() : o.in_features();
  fc1 = register_module(
      "fc1", torch::nn::Linear(
                 torch::nn::LinearOptions(o.in_features(), o.hidden_features()).bias(o.bias())));
  fc2 = register_module(
      "fc2", torch::nn::Linear(torch::nn::LinearOptions(o.hidden_features(), out).bias(o.bias())));
  drop = register_module("drop", torch::nn::Dropout(o.drop()));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  const auto activation = options.activation();
  if (!is_training()) {
    if (auto y = PackedLinear::int8_pair(fc1_packed_, fc1, fc2_packed_, fc2, x, activation)) {
      return *y;
    }
  }
  const bool gelu = activation == Activation::kGelu || activation == Activation::kGeluTanh;
  const auto h = fused_epilogues() && gelu && options.bias()
                     ? kernels::bias_gelu(torch::linear(x, fc1->weight), fc1->bias,
                                          activation == Activation::kGelu ? "none" : "tanh")
                     : fc1_packed_(fc1, x, activation);
  return drop(fc2_packed_(fc2, drop(h)));
}

int64_t MlpImpl::set_int8(bool on) {
  fc1_packed_.set_int8(on);
  fc2_packed_.set_int8(on);
  return 2;
}

void LayerScaleImpl::reset() {
  gamma = register_parameter("gamma", torch::full({dim_}, init_values_));
}

PatchEmbedImpl::PatchEmbedImpl(PatchEmbedOptions options_) : options(std::move(options_)) {
  reset();
}

void PatchEmbedImpl::reset() {
  const auto& o = options;
  TORCH_CHECK_VALUE(o.in_chans() > 0 && o.embed_dim() > 0 && o.patch_size() > 0,
                    "PatchEmbed: sizes must be positive, got in_chans ", o.in_chans(),
                    ", embed_dim ", o.embed_dim(), ", patch_size ", o.patch_size());
  TORCH_CHECK_VALUE(o.stride() >= 0, "PatchEmbed: stride must be >= 0, got ", o.stride());
  proj = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(
                                                       o.in_chans(), o.embed_dim(), o.patch_size())
                                                       .stride(stride())
                                                       .bias(o.bias())));
}

torch::Tensor PatchEmbedImpl::forward(const torch::Tensor& images) {
  const int64_t p = options.patch_size();
  TORCH_CHECK_VALUE(images.dim() == 4 && images.size(1) == options.in_chans(),
                    "PatchEmbed: images must be [B, C = ", options.in_chans(), ", H, W], got ",
                    images.sizes());
  if (stride() == p) {
    TORCH_CHECK_VALUE(images.size(2) % p == 0 && images.size(3) % p == 0, "PatchEmbed: image size ",
                      images.size(2), "x", images.size(3), " is not a multiple of the patch size ",
                      p);
  }
  TORCH_CHECK_VALUE(images.size(2) >= p && images.size(3) >= p, "PatchEmbed: image size ",
                    images.size(2), "x", images.size(3), " is smaller than the patch size ", p);
  return proj(images).permute({0, 2, 3, 1});
}

torch::Tensor drop_path(const torch::Tensor& x, double p, bool training) {
  if (!training || p <= 0.0) return x;
  TORCH_CHECK_VALUE(p < 1.0, "drop_path: probability must be < 1, got ", p);
  std::vector<int64_t> shape(x.dim(), 1);
  shape[0] = x.size(0);
  const auto keep = torch::empty(shape, x.options()).bernoulli_(1.0 - p);
  return x * keep / (1.0 - p);
}

}  // namespace attnzoo
