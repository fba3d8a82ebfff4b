// The family ast: the Audio Spectrogram Transformer (Gong et al. 2021, "AST: Audio Spectrogram
// Transformer"; Hugging Face's ASTForAudioClassification). A ViT (models/vit.h) over the log-mel
// spectrogram as a one-channel image, frequency down and time across, with overlapping patches,
// class and distillation tokens averaged for the head, and a LayerNorm in the head:
//
//   features [B, T, F] -> [B, 1, F, T] -> VisionTransformer(in_chans 1, img_size F x T,
//   patch_stride, dist_token, global_pool cls_dist, head_norm) -> logits [B, classes]
//
// Its input is a fixed number of frames (`features.frames`, the position embedding's length);
// the features section normalises them (AST's AudioSet statistics).
#include <attnzoo/configs/config_sections.h>
#include <attnzoo/configs/families.h>
#include <attnzoo/configs/vit_family.h>
#include <attnzoo/layers/attention_mask.h>
#include <attnzoo/models/vit.h>
#include <attnzoo/models/vit_checkpoint.h>

#include <torch/torch.h>

#include <optional>
#include <stdexcept>
#include <tuple>

namespace attnzoo {
namespace {

using namespace detail;

// `architecture:` of family ast: the spectrogram's size and the transformer's, by ViT's names
// where they are the same thing. Absent keys take ASTConfig's defaults (the AudioSet models:
// 128 mel bins x 1024 frames, 16 x 16 patches every 10, ViT-B: 768 wide, 12 layers, 12 heads).
ViTOptions read_ast_architecture(MapReader arch) {
  ViTOptions o;
  o.img_size(arch.integer("num_mel_bins", 128, 1, kMaxFeatures));
  o.img_width(arch.integer("max_length", 1024, 1, kMaxFrames));
  o.patch_size(arch.integer("patch_size", 16, 1, kMaxImageSize));
  o.patch_stride(arch.integer("patch_stride", 10, 1, kMaxImageSize));
  o.embed_dim(arch.integer("embed_dim", 768, 1, kMaxEmbedDim));
  o.depth(arch.integer("depth", 12, 1, kMaxDepth));
  o.num_heads(arch.integer("num_heads", 12, 1, kMaxHeads));
  o.mlp_ratio(arch.number("mlp_ratio", 4.0, 0.0, kMaxMlpRatio, /*min_exclusive=*/true));
  o.qkv_bias(arch.boolean("qkv_bias", true));
  o.num_classes(arch.integer("num_classes", 527, 0, kMaxClasses));
  o.norm_eps(arch.number("norm_eps", 1e-12, 0.0, 1.0, true));
  o.activation(arch.enumeration("activation", Activation::kGelu,
                                {Activation::kGelu, Activation::kGeluTanh}));
  o.drop_rate(arch.number("drop_rate", 0.0, 0.0, kBelowOne));
  o.attn_drop_rate(arch.number("attn_drop_rate", 0.0, 0.0, kBelowOne));
  o.proj_drop_rate(arch.number("proj_drop_rate", 0.0, 0.0, kBelowOne));
  o.drop_path_rate(arch.number("drop_path_rate", 0.0, 0.0, kBelowOne));
  arch.finish();
  o.in_chans(1)
      .class_token(true)
      .dist_token(true)
      .global_pool(GlobalPool::kClsDist)
      .head_norm(true);

  // Relations between values, checked once every value is known to be well-formed, reported at
  // MapReader::relation_key.
  if (o.embed_dim() % o.num_heads() != 0) {
    arch.fail(arch.relation_key("embed_dim", "num_heads"),
              "embed_dim " + std::to_string(o.embed_dim()) + " is not divisible by num_heads " +
                  std::to_string(o.num_heads()) + " (each head takes embed_dim / num_heads)");
  }
  if (o.img_size() < o.patch_size() || o.img_width() < o.patch_size()) {
    arch.fail(arch.relation_key("patch_size", "num_mel_bins"),
              "num_mel_bins " + std::to_string(o.img_size()) + " and max_length " +
                  std::to_string(o.img_width()) + " must be at least patch_size " +
                  std::to_string(o.patch_size()));
  }
  if (static_cast<int64_t>(static_cast<double>(o.embed_dim()) * o.mlp_ratio()) < 1) {
    arch.fail("mlp_ratio", "embed_dim · mlp_ratio must give an MLP of at least one unit");
  }
  return o;
}

// features [B, T, F] -> the spectrogram image [B, 1, F, T].
torch::Tensor spectrogram(const torch::Tensor& features) {
  return features.unsqueeze(1).transpose(2, 3);
}

class ASTFamily final : public ViTFamily {
 public:
  const std::string& name() const override { return name_; }
  InputKind input_kind() const override { return InputKind::kAudioFeatures; }
  std::vector<std::string> checkpoint_formats() const override { return {"hf", "timm"}; }

  void read(MapReader& root, ModelConfig& config) const override {
    auto o = read_ast_architecture(root.map("architecture", true));
    const auto attention = read_attention(root.map("attention", false));
    o.attention_backend(attention.backend)
        .attention_options(attention.options)
        .head_gating(attention.head_gating);
    config.features = read_audio_features(root, o.img_size(), "architecture.num_mel_bins");
    if (config.features && config.features->fixed_frames != o.img_width()) {
      root.map("features", true)
          .fail("frames", "frames " + std::to_string(config.features->fixed_frames) +
                              " must equal architecture.max_length " +
                              std::to_string(o.img_width()) + " (the position embedding's length)");
    }
    if (root.has("checkpoint")) {
      read_checkpoint(root.map("checkpoint", true), checkpoint_formats(), config);
    }
    config.architecture = std::move(o);
  }

  LoadedWeights load_weights(torch::nn::Module& module, ModelConfig& config,
                             const io::TensorDict& tensors, const std::string& format,
                             const std::string& source) const override {
    const auto layout = format.empty() ? detect_vit_format(tensors) : parse_vit_format(format);
    TORCH_CHECK_VALUE(layout != ViTCheckpointFormat::kTorchvision, source,
                      ": a torchvision ViT's layout, not an AST's (hf or timm)");
    return ViTFamily::load_weights(module, config, tensors, vit_format_name(layout), source);
  }

  ModelStats stats(const ModelConfig& config) const override {
    const auto& o = config.options<ViTOptions>();
    ModelStats stats;
    stats.parameters = vit_parameter_count(o);
    stats.macs = vit_macs(o, o.img_size(), o.img_width());
    stats.basis =
        std::to_string(o.img_width()) + " frames x " + std::to_string(o.img_size()) + " mel bins";
    return stats;
  }

  // Features [B, T, F]: F = num_mel_bins and T = max_length (the position embedding has no
  // other length); lengths are not used (the frames are whole, padded by the features section).
  void check_input(const ModelConfig& config, const ModelInput& input,
                   const std::string& what) const override {
    const auto& o = config.options<ViTOptions>();
    const auto& features = input.values;
    const std::string fwhat = what + "tensor 'features' ";
    require_floating(features, fwhat);
    if (features.dim() != 3 || features.size(0) < 1 || features.size(1) != o.img_width() ||
        features.size(2) != o.img_size()) {
      throw InputError(fwhat + "must be [B, " + std::to_string(o.img_width()) + ", " +
                       std::to_string(o.img_size()) + "] with B >= 1, got " +
                       shape_string(features.sizes()));
    }
  }

  void check_stream(const ModelConfig&, const ModelInput&) const override {
    throw InputError("an ast model does not stream (it takes whole clips)");
  }

  ModelInput random_input(const ModelConfig& config, int64_t batch, int64_t) const override {
    const auto& o = config.options<ViTOptions>();
    return {torch::randn({batch, o.img_width(), o.img_size()}), {}};
  }

  torch::Tensor classify(torch::nn::Module& module, const ModelConfig&,
                         const ModelInput& input) const override {
    return vit_module(module, name()).forward(spectrogram(input.values));
  }

  NamedTensors forward(torch::nn::Module& module, const ModelConfig& config,
                       const ModelInput& input, bool) const override {
    auto& vit = vit_module(module, name());
    const auto tokens = vit.forward_features(spectrogram(input.values));
    NamedTensors out = {{"encoded", tokens}};
    if (num_classes(config) > 0) out.emplace_back("class_logits", vit.forward_head(tokens));
    return out;
  }

  // AST's eps is its own (1e-12, as Hugging Face's), whatever the layout of its weights.
  std::optional<double> layout_norm_eps(ViTCheckpointFormat) const override { return {}; }

  TokenLayout token_layout(const ModelConfig& config, const ModelInput&) const override {
    const auto& o = config.options<ViTOptions>();
    TokenLayout layout;
    layout.prefix = vit_prefix_tokens(o);
    std::tie(layout.rows, layout.cols) = vit_grid(o, o.img_size(), o.img_width());
    return layout;
  }

 private:
  std::string name_ = "ast";
};

}  // namespace

std::unique_ptr<ModelFamily> make_ast_family() { return std::make_unique<ASTFamily>(); }

}  // namespace attnzoo
