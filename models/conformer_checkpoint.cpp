#include "models/conformer_checkpoint.h"

#include <torch/torch.h>

#include <regex>
#include <vector>

namespace attnzoo {
namespace {

struct Rule {
  std::regex pattern;
  std::string replacement;
};

std::string rename_with(const std::vector<Rule>& rules, const std::string& name) {
  for (const auto& rule : rules) {
    if (std::regex_match(name, rule.pattern)) {
      return std::regex_replace(name, rule.pattern, rule.replacement);
    }
  }
  return name;
}

MappedConformerCheckpoint from_torchaudio(const io::TensorDict& tensors) {
  // "$1" is the block index throughout.
  static const std::vector<Rule> rules = {
      {std::regex(R"(conformer_layers\.(\d+)\.(ffn[12])\.sequential\.0\.(weight|bias))"),
       "layers.$1.$2.norm.$3"},
      {std::regex(R"(conformer_layers\.(\d+)\.(ffn[12])\.sequential\.1\.(weight|bias))"),
       "layers.$1.$2.linear1.$3"},
      {std::regex(R"(conformer_layers\.(\d+)\.(ffn[12])\.sequential\.4\.(weight|bias))"),
       "layers.$1.$2.linear2.$3"},
      {std::regex(R"(conformer_layers\.(\d+)\.self_attn_layer_norm\.(weight|bias))"),
       "layers.$1.attn_norm.$2"},
      // nn.MultiheadAttention's in_proj is already fused with q, k, v rows in that order.
      {std::regex(R"(conformer_layers\.(\d+)\.self_attn\.in_proj_(weight|bias))"),
       "layers.$1.attn.mha.qkv.$2"},
      {std::regex(R"(conformer_layers\.(\d+)\.self_attn\.out_proj\.(weight|bias))"),
       "layers.$1.attn.mha.proj.$2"},
      {std::regex(R"(conformer_layers\.(\d+)\.conv_module\.layer_norm\.(weight|bias))"),
       "layers.$1.conv.norm.$2"},
      {std::regex(R"(conformer_layers\.(\d+)\.conv_module\.sequential\.0\.(weight|bias))"),
       "layers.$1.conv.pointwise_conv1.$2"},
      {std::regex(R"(conformer_layers\.(\d+)\.conv_module\.sequential\.2\.(weight|bias))"),
       "layers.$1.conv.depthwise_conv.$2"},
      {std::regex(R"(conformer_layers\.(\d+)\.conv_module\.sequential\.3\.)"
                  R"((weight|bias|running_mean|running_var|num_batches_tracked))"),
       "layers.$1.conv.conv_norm.$2"},
      {std::regex(R"(conformer_layers\.(\d+)\.conv_module\.sequential\.5\.(weight|bias))"),
       "layers.$1.conv.pointwise_conv2.$2"},
      {std::regex(R"(conformer_layers\.(\d+)\.final_layer_norm\.(weight|bias))"),
       "layers.$1.final_norm.$2"},
  };
  MappedConformerCheckpoint out;
  for (const auto& item : tensors) out.tensors.insert(rename_with(rules, item.key()), item.value());
  return out;
}

}  // namespace

ConformerCheckpointFormat parse_conformer_format(const std::string& name) {
  if (name == "attnzoo") return ConformerCheckpointFormat::kAttnzoo;
  if (name == "torchaudio") return ConformerCheckpointFormat::kTorchaudio;
  TORCH_CHECK_VALUE(false, "unknown Conformer checkpoint format '", name,
                    "'; expected attnzoo or torchaudio");
}

const char* conformer_format_name(ConformerCheckpointFormat format) {
  switch (format) {
    case ConformerCheckpointFormat::kAttnzoo:
      return "attnzoo";
    case ConformerCheckpointFormat::kTorchaudio:
      return "torchaudio";
  }
  return "?";
}

ConformerCheckpointFormat detect_conformer_format(const io::TensorDict& tensors) {
  for (const auto& item : tensors) {
    if (item.key().rfind("conformer_layers.", 0) == 0)
      return ConformerCheckpointFormat::kTorchaudio;
  }
  return ConformerCheckpointFormat::kAttnzoo;
}

MappedConformerCheckpoint to_conformer_layout(const io::TensorDict& tensors,
                                              ConformerCheckpointFormat format) {
  switch (format) {
    case ConformerCheckpointFormat::kAttnzoo:
      return {tensors, {}};
    case ConformerCheckpointFormat::kTorchaudio:
      return from_torchaudio(tensors);
  }
  return {tensors, {}};
}

}  // namespace attnzoo
