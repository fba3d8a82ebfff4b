#include <attnzoo/models/vit_checkpoint.h>

#include <attnzoo/models/checkpoint.h>

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <regex>

namespace attnzoo {
namespace {

bool has_prefix(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

MappedCheckpoint from_torchvision(const io::TensorDict& tensors) {
  static const std::vector<RenameRule> rules = {
      {std::regex(R"(class_token)"), "cls_token"},
      {std::regex(R"(conv_proj\.(weight|bias))"), "patch_embed.proj.$1"},
      {std::regex(R"(encoder\.pos_embedding)"), "pos_embed"},
      {std::regex(R"(encoder\.layers\.encoder_layer_(\d+)\.ln_1\.(weight|bias))"),
       "blocks.$1.norm1.$2"},
      {std::regex(R"(encoder\.layers\.encoder_layer_(\d+)\.ln_2\.(weight|bias))"),
       "blocks.$1.norm2.$2"},
      {std::regex(R"(encoder\.layers\.encoder_layer_(\d+)\.self_attention\.in_proj_(weight|bias))"),
       "blocks.$1.attn.qkv.$2"},
      {std::regex(
           R"(encoder\.layers\.encoder_layer_(\d+)\.self_attention\.out_proj\.(weight|bias))"),
       "blocks.$1.attn.proj.$2"},
      {std::regex(R"(encoder\.layers\.encoder_layer_(\d+)\.mlp\.0\.(weight|bias))"),
       "blocks.$1.mlp.fc1.$2"},
      {std::regex(R"(encoder\.layers\.encoder_layer_(\d+)\.mlp\.3\.(weight|bias))"),
       "blocks.$1.mlp.fc2.$2"},
      {std::regex(R"(encoder\.ln\.(weight|bias))"), "norm.$1"},
      {std::regex(R"(heads\.head\.(weight|bias))"), "head.$1"},
  };
  MappedCheckpoint out;
  for (const auto& item : tensors) {
    insert_mapped(out.tensors, rename_with(rules, item.key()), item.key(), item.value());
  }
  return out;
}

MappedCheckpoint from_hugging_face(const io::TensorDict& tensors) {
  static const std::vector<RenameRule> rules = {
      {std::regex(R"(embeddings\.cls_token)"), "cls_token"},
      {std::regex(R"(embeddings\.distillation_token)"), "dist_token"},
      {std::regex(R"(embeddings\.position_embeddings)"), "pos_embed"},
      {std::regex(R"(embeddings\.patch_embeddings\.projection\.(weight|bias))"),
       "patch_embed.proj.$1"},
      {std::regex(R"(encoder\.layer\.(\d+)\.layernorm_before\.(weight|bias))"),
       "blocks.$1.norm1.$2"},
      {std::regex(R"(encoder\.layer\.(\d+)\.layernorm_after\.(weight|bias))"),
       "blocks.$1.norm2.$2"},
      {std::regex(R"(encoder\.layer\.(\d+)\.attention\.output\.dense\.(weight|bias))"),
       "blocks.$1.attn.proj.$2"},
      {std::regex(R"(encoder\.layer\.(\d+)\.intermediate\.dense\.(weight|bias))"),
       "blocks.$1.mlp.fc1.$2"},
      {std::regex(R"(encoder\.layer\.(\d+)\.output\.dense\.(weight|bias))"),
       "blocks.$1.mlp.fc2.$2"},
      // transformers >= 5 names its ViT modules like its language models (state_dict layout);
      // checkpoint files on the Hub keep the 4.x names above.
      {std::regex(R"(layers\.(\d+)\.layernorm_before\.(weight|bias))"), "blocks.$1.norm1.$2"},
      {std::regex(R"(layers\.(\d+)\.layernorm_after\.(weight|bias))"), "blocks.$1.norm2.$2"},
      {std::regex(R"(layers\.(\d+)\.attention\.o_proj\.(weight|bias))"), "blocks.$1.attn.proj.$2"},
      {std::regex(R"(layers\.(\d+)\.mlp\.(fc1|fc2)\.(weight|bias))"), "blocks.$1.mlp.$2.$3"},
      {std::regex(R"(layernorm\.(weight|bias))"), "norm.$1"},
      {std::regex(R"(classifier\.(weight|bias))"), "head.$1"},
      // DeiTForImageClassificationWithTeacher: a head on each of the two tokens.
      {std::regex(R"(cls_classifier\.(weight|bias))"), "head.$1"},
      {std::regex(R"(distillation_classifier\.(weight|bias))"), "head_dist.$1"},
      // ASTForAudioClassification's head: a LayerNorm, then the classifier.
      {std::regex(R"(classifier\.layernorm\.(weight|bias))"), "head_norm.$1"},
      {std::regex(R"(classifier\.dense\.(weight|bias))"), "head.$1"},
  };
  static const std::regex qkv_part(
      R"(encoder\.layer\.(\d+)\.attention\.attention\.(query|key|value)\.(weight|bias))");
  static const std::regex qkv_part_v5(R"(layers\.(\d+)\.attention\.(q|k|v)_proj\.(weight|bias))");
  MappedCheckpoint out;
  // ViTForImageClassification nests the backbone under "vit.", the DeiT classifiers under
  // "deit.", ASTForAudioClassification under "audio_spectrogram_transformer."; ViTModel,
  // DeiTModel and ASTModel do not.
  static const std::string kAst = "audio_spectrogram_transformer.";
  QkvParts qkv;
  for (const auto& item : tensors) {
    std::string name = item.key();
    if (has_prefix(name, "vit.") || has_prefix(name, "deit."))
      name = name.substr(name.find('.') + 1);
    if (has_prefix(name, kAst)) name = name.substr(kAst.size());
    std::smatch m;
    if (std::regex_match(name, m, qkv_part) || std::regex_match(name, m, qkv_part_v5)) {
      // query|key|value or q|k|v: the first letter names the part.
      qkv.add("blocks." + m[1].str() + ".attn.qkv." + m[3].str(), m[2].str()[0], item.value());
      continue;
    }
    if (has_prefix(name, "pooler.") || name == "embeddings.mask_token") {
      out.ignored.insert(item.key());  // ViTModel's pooler and MAE's mask token: not part of ViT
      continue;
    }
    insert_mapped(out.tensors, rename_with(rules, name), name, item.value());
  }
  qkv.insert_into(out.tensors);
  return out;
}

}  // namespace

ViTCheckpointFormat parse_vit_format(const std::string& name) {
  if (name == "timm") return ViTCheckpointFormat::kTimm;
  if (name == "torchvision") return ViTCheckpointFormat::kTorchvision;
  if (name == "hf") return ViTCheckpointFormat::kHuggingFace;
  TORCH_CHECK_VALUE(false, "unknown ViT checkpoint format '", name,
                    "'; expected timm, torchvision or hf");
}

const char* vit_format_name(ViTCheckpointFormat format) {
  switch (format) {
    case ViTCheckpointFormat::kTimm:
      return "timm";
    case ViTCheckpointFormat::kTorchvision:
      return "torchvision";
    case ViTCheckpointFormat::kHuggingFace:
      return "hf";
  }
  return "?";
}

ViTCheckpointFormat detect_vit_format(const io::TensorDict& tensors) {
  for (const auto& item : tensors) {
    const auto& name = item.key();
    if (name == "conv_proj.weight" || has_prefix(name, "encoder.layers.encoder_layer_")) {
      return ViTCheckpointFormat::kTorchvision;
    }
    if (has_prefix(name, "vit.embeddings.") || has_prefix(name, "deit.embeddings.") ||
        has_prefix(name, "embeddings.patch_embeddings.") ||
        has_prefix(name, "audio_spectrogram_transformer.embeddings.")) {
      return ViTCheckpointFormat::kHuggingFace;
    }
  }
  return ViTCheckpointFormat::kTimm;
}

MappedCheckpoint to_timm_layout(const io::TensorDict& tensors, ViTCheckpointFormat format) {
  switch (format) {
    case ViTCheckpointFormat::kTimm:
      return {tensors, {}};
    case ViTCheckpointFormat::kTorchvision:
      return from_torchvision(tensors);
    case ViTCheckpointFormat::kHuggingFace:
      return from_hugging_face(tensors);
  }
  return {tensors, {}};
}

ViTLoadReport load_vit_checkpoint(VisionTransformerImpl& model, const io::TensorDict& tensors,
                                  std::optional<ViTCheckpointFormat> format,
                                  const std::string& source,
                                  const std::set<std::string>& optional) {
  ViTLoadReport report;
  report.format = format ? *format : detect_vit_format(tensors);
  auto mapped = to_timm_layout(tensors, report.format);
  report.ignored = mapped.ignored;
  if (auto* pos = mapped.tensors.find("pos_embed")) {
    const auto want = model.pos_embed.sizes();
    if (pos->dim() == 3 && pos->size(2) == want[2] && pos->size(1) != want[1]) {
      // Trained at another resolution: resize the patch grid (square, as checkpoints are).
      const int64_t prefix = model.options.no_embed_class() ? 0 : model.num_prefix_tokens();
      const int64_t patches = pos->size(1) - prefix;
      const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(patches))));
      if (patches > 0 && side * side == patches) {
        const auto rule = report.format == ViTCheckpointFormat::kTorchvision
                              ? PosEmbedResampling::kTorchvision
                              : PosEmbedResampling::kTimm;
        const auto [rows, cols] = model.grid();
        *pos = resample_pos_embed(*pos, prefix, side, side, rows, cols, rule);
        report.pos_embed_resampled = true;
      }
      // Otherwise the strict loader reports the shape mismatch.
    }
  }
  LoadOptions options;
  options.optional = optional;
  options.source = source;
  load_state_dict(model, mapped.tensors, options);
  return report;
}

}  // namespace attnzoo
