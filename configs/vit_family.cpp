// The family vit: timm's VisionTransformer (models/vit.h) on images, with the checkpoint layouts
// of timm, torchvision and Hugging Face.
#include <attnzoo/configs/config_sections.h>
#include <attnzoo/configs/families.h>
#include <attnzoo/configs/vit_family.h>
#include <attnzoo/layers/attention_mask.h>
#include <attnzoo/models/checkpoint.h>
#include <attnzoo/models/vit.h>
#include <attnzoo/models/vit_checkpoint.h>

#include <torch/torch.h>

#include <stdexcept>

namespace attnzoo {
namespace {

using namespace detail;

// `architecture:` of family vit: ViTOptions by their names. Absent keys keep ViTOptions' defaults,
// which are timm's VisionTransformer defaults (ViT-B/16 at 224).
ViTOptions read_vit_architecture(MapReader arch) {
  ViTOptions o;
  o.img_size(arch.integer("img_size", o.img_size(), 1, kMaxImageSize));
  o.img_width(arch.integer("img_width", o.img_width(), 0, kMaxImageSize));
  o.patch_size(arch.integer("patch_size", o.patch_size(), 1, kMaxImageSize));
  o.patch_stride(arch.integer("patch_stride", o.patch_stride(), 0, kMaxImageSize));
  o.in_chans(arch.integer("in_chans", o.in_chans(), 1, kMaxChannels));
  o.num_classes(arch.integer("num_classes", o.num_classes(), 0, kMaxClasses));
  o.global_pool(arch.enumeration("global_pool", o.global_pool(),
                                 {GlobalPool::kToken, GlobalPool::kAvg, GlobalPool::kMax,
                                  GlobalPool::kAvgMax, GlobalPool::kClsDist, GlobalPool::kNone}));
  o.embed_dim(arch.integer("embed_dim", o.embed_dim(), 1, kMaxEmbedDim));
  o.depth(arch.integer("depth", o.depth(), 1, kMaxDepth));
  o.num_heads(arch.integer("num_heads", o.num_heads(), 1, kMaxHeads));
  o.mlp_ratio(arch.number("mlp_ratio", o.mlp_ratio(), 0.0, kMaxMlpRatio, /*min_exclusive=*/true));
  o.qkv_bias(arch.boolean("qkv_bias", o.qkv_bias()));
  o.qk_norm(arch.boolean("qk_norm", o.qk_norm()));
  o.proj_bias(arch.boolean("proj_bias", o.proj_bias()));
  o.init_values(arch.nullable_number("init_values", o.init_values(), 0.0, 100.0, true));
  o.class_token(arch.boolean("class_token", o.class_token()));
  o.dist_token(arch.boolean("dist_token", o.dist_token()));
  o.dist_head(arch.boolean("dist_head", o.dist_head()));
  o.no_embed_class(arch.boolean("no_embed_class", o.no_embed_class()));
  o.reg_tokens(arch.integer("reg_tokens", o.reg_tokens(), 0, kMaxTokens));
  o.pre_norm(arch.boolean("pre_norm", o.pre_norm()));
  o.final_norm(arch.boolean("final_norm", o.final_norm()));
  o.fc_norm(arch.nullable_boolean("fc_norm", o.fc_norm()));
  o.head_norm(arch.boolean("head_norm", o.head_norm()));
  o.norm_eps(arch.number("norm_eps", o.norm_eps(), 0.0, 1.0, true));
  o.activation(
      arch.enumeration("activation", o.activation(), {Activation::kGelu, Activation::kGeluTanh}));
  o.drop_rate(arch.number("drop_rate", o.drop_rate(), 0.0, kBelowOne));
  o.pos_drop_rate(arch.number("pos_drop_rate", o.pos_drop_rate(), 0.0, kBelowOne));
  o.proj_drop_rate(arch.number("proj_drop_rate", o.proj_drop_rate(), 0.0, kBelowOne));
  o.attn_drop_rate(arch.number("attn_drop_rate", o.attn_drop_rate(), 0.0, kBelowOne));
  o.drop_path_rate(arch.number("drop_path_rate", o.drop_path_rate(), 0.0, kBelowOne));
  arch.finish();

  // Relations between values, checked once every value is known to be well-formed, reported at
  // MapReader::relation_key.
  if (o.embed_dim() % o.num_heads() != 0) {
    arch.fail(arch.relation_key("embed_dim", "num_heads"),
              "embed_dim " + std::to_string(o.embed_dim()) + " is not divisible by num_heads " +
                  std::to_string(o.num_heads()) + " (each head takes embed_dim / num_heads)");
  }
  const int64_t width = vit_img_width(o);
  const bool tiled = vit_patch_stride(o) == o.patch_size();
  if (tiled && (o.img_size() % o.patch_size() != 0 || width % o.patch_size() != 0)) {
    arch.fail(arch.relation_key("img_size", "patch_size"),
              "img_size " + std::to_string(o.img_size()) +
                  (width != o.img_size() ? "x" + std::to_string(width) : "") +
                  " is not divisible by patch_size " + std::to_string(o.patch_size()));
  }
  if (o.img_size() < o.patch_size() || width < o.patch_size()) {
    arch.fail(arch.relation_key("img_size", "patch_size"),
              "img_size " + std::to_string(o.img_size()) + "x" + std::to_string(width) +
                  " is smaller than patch_size " + std::to_string(o.patch_size()));
  }
  if (o.dist_token() && !o.class_token()) {
    arch.fail(arch.relation_key("dist_token", "class_token"),
              "dist_token needs class_token: true (the distillation token follows it)");
  }
  if (o.global_pool() == GlobalPool::kClsDist && !o.dist_token()) {
    arch.fail(arch.relation_key("global_pool", "dist_token"),
              "global_pool 'cls_dist' needs dist_token: true");
  }
  if (o.global_pool() == GlobalPool::kToken && !o.class_token()) {
    arch.fail(arch.relation_key("global_pool", "class_token"),
              "global_pool 'token' needs class_token: true; use avg, max, avgmax or none");
  }
  if (static_cast<int64_t>(static_cast<double>(o.embed_dim()) * o.mlp_ratio()) < 1) {
    arch.fail("mlp_ratio", "embed_dim · mlp_ratio must give an MLP of at least one unit");
  }
  return o;
}

}  // namespace

VisionTransformerImpl& vit_module(torch::nn::Module& module, const std::string& family) {
  auto* vit = module.as<VisionTransformerImpl>();
  TORCH_CHECK(vit, "family ", family, ": the module is not a VisionTransformer");
  return *vit;
}

const std::string& ViTFamily::name() const { return name_; }

InputKind ViTFamily::input_kind() const { return InputKind::kImages; }

std::vector<std::string> ViTFamily::checkpoint_formats() const {
  return {"timm", "torchvision", "hf"};
}

void ViTFamily::read(MapReader& root, ModelConfig& config) const {
  auto o = read_vit_architecture(root.map("architecture", true));
  const auto attention = read_attention(root.map("attention", false));
  o.attention_backend(attention.backend)
      .attention_options(attention.options)
      .head_gating(attention.head_gating);
  config.image = read_image_preprocess(root.map("preprocess", true), o.in_chans(), o.img_size(),
                                       vit_img_width(o), o.patch_size(),
                                       vit_patch_stride(o) == o.patch_size());
  if (root.has("checkpoint")) {
    read_checkpoint(root.map("checkpoint", true), checkpoint_formats(), config);
  }
  config.architecture = std::move(o);
}

std::shared_ptr<torch::nn::Module> ViTFamily::build(const ModelConfig& config) const {
  return VisionTransformer(config.options<ViTOptions>()).ptr();
}

LoadedWeights ViTFamily::load_weights(torch::nn::Module& module, ModelConfig& config,
                                      const io::TensorDict& tensors, const std::string& format,
                                      const std::string& source) const {
  const auto layout = format.empty() ? detect_vit_format(tensors) : parse_vit_format(format);
  const auto mapped = [&] {
    try {
      return to_timm_layout(tensors, layout);
    } catch (const CheckpointError& e) {
      throw CheckpointError(source + ": " + e.what());
    }
  }();
  LoadOptions options;
  options.ignore = mapped.ignored;
  options.source = source;
  load_state_dict(module, mapped.tensors, options);
  LoadedWeights loaded{vit_format_name(layout), {}};
  // Hugging Face's ViTs normalise with eps 1e-12; timm's and torchvision's with 1e-6.
  const double eps = layout == ViTCheckpointFormat::kHuggingFace ? 1e-12 : 1e-6;
  auto& o = config.options<ViTOptions>();
  if (o.norm_eps() != eps && adopts_layout_value(config, "architecture.norm_eps", loaded.layout)) {
    loaded.notes.push_back(layout_value_note("architecture.norm_eps", o.norm_eps(), eps,
                                             loaded.layout, "LayerNorm eps"));
    o.norm_eps(eps);
    for (const auto& m : module.modules()) {
      if (auto* norm = m->as<torch::nn::LayerNormImpl>()) norm->options.eps(eps);
    }
  }
  return loaded;
}

ModelStats ViTFamily::stats(const ModelConfig& config) const {
  const auto& image = config.image;
  ModelStats stats;
  stats.parameters = vit_parameter_count(config.options<ViTOptions>());
  stats.macs =
      vit_macs(config.options<ViTOptions>(), image.transform.height, image.transform.width);
  stats.basis = std::to_string(image.channels) + "x" + std::to_string(image.transform.height) +
                "x" + std::to_string(image.transform.width) + " image";
  return stats;
}

int64_t ViTFamily::num_classes(const ModelConfig& config) const {
  return config.options<ViTOptions>().num_classes();
}

int64_t ViTFamily::attention_layers(const ModelConfig& config) const {
  return config.options<ViTOptions>().depth();
}

std::string ViTFamily::attention_backend(const ModelConfig& config) const {
  return config.options<ViTOptions>().attention_backend();
}

// [B, C, H, W] with C = in_chans and H, W multiples of the patch size (at least the patch size
// when patches overlap); other sizes than the config's are fine: the position embedding is
// resampled.
void ViTFamily::check_input(const ModelConfig& config, const ModelInput& input,
                            const std::string& what) const {
  const auto& pixels = input.values;
  const std::string pwhat = what + "tensor 'pixels' ";
  const auto& o = config.options<ViTOptions>();
  require_floating(pixels, pwhat);
  const int64_t channels = o.in_chans(), patch = o.patch_size();
  if (pixels.dim() != 4 || pixels.size(0) < 1 || pixels.size(1) != channels) {
    throw InputError(pwhat + "must be [B, " + std::to_string(channels) +
                     ", H, W] with B >= 1, got " + shape_string(pixels.sizes()));
  }
  const bool tiled = vit_patch_stride(o) == patch;
  if (pixels.size(2) < patch || pixels.size(3) < patch ||
      (tiled && (pixels.size(2) % patch != 0 || pixels.size(3) % patch != 0))) {
    throw InputError(pwhat + shape_string(pixels.sizes()) +
                     (tiled ? ": H and W must be positive multiples of the patch size "
                            : ": H and W must be at least the patch size ") +
                     std::to_string(patch));
  }
}

ModelInput ViTFamily::random_input(const ModelConfig& config, int64_t batch, int64_t) const {
  const auto& image = config.image;
  return {torch::randn({batch, image.channels, image.transform.height, image.transform.width}), {}};
}

torch::Tensor ViTFamily::classify(torch::nn::Module& module, const ModelConfig&,
                                  const ModelInput& input) const {
  return vit_module(module, name()).forward(input.values);
}

NamedTensors ViTFamily::forward(torch::nn::Module& module, const ModelConfig& config,
                                const ModelInput& input, bool) const {
  const auto output = vit_module(module, name()).forward(input.values);
  return {{num_classes(config) > 0 ? "logits" : "features", output}};
}

TokenLayout ViTFamily::token_layout(const ModelConfig& config, const ModelInput& input) const {
  const auto& o = config.options<ViTOptions>();
  TokenLayout layout;
  layout.prefix = vit_prefix_tokens(o);
  std::tie(layout.rows, layout.cols) = vit_grid(o, input.values.size(-2), input.values.size(-1));
  layout.first_token_predicts = o.class_token() && o.global_pool() == GlobalPool::kToken;
  return layout;
}

std::optional<double> ViTFamily::layout_norm_eps(ViTCheckpointFormat layout) const {
  return layout == ViTCheckpointFormat::kHuggingFace ? 1e-12 : 1e-6;
}

std::unique_ptr<ModelFamily> make_vit_family() { return std::make_unique<ViTFamily>(); }

}  // namespace attnzoo
