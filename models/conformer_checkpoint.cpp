#include "models/conformer_checkpoint.h"

#include "models/checkpoint.h"

#include <torch/torch.h>

#include <map>
#include <regex>
#include <vector>

namespace attnzoo {
namespace {

MappedConformerCheckpoint from_torchaudio(const io::TensorDict& tensors) {
  // "$1" is the block index throughout.
  static const std::vector<RenameRule> rules = {
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

MappedConformerCheckpoint from_wenet(const io::TensorDict& tensors) {
  // "$1" is the block index throughout.
  static const std::vector<RenameRule> rules = {
      {std::regex(R"(encoder\.global_cmvn\.(mean|istd))"), "global_cmvn.$1"},
      {std::regex(R"(encoder\.embed\.conv\.(\d+)\.(weight|bias))"), "embed.conv.$1.$2"},
      {std::regex(R"(encoder\.embed\.(?:out\.0|linear)\.(weight|bias))"), "embed.out.$1"},
      {std::regex(R"(encoder\.encoders\.(\d+)\.self_attn\.linear_out\.(weight|bias))"),
       "conformer.layers.$1.attn.mha.proj.$2"},
      {std::regex(R"(encoder\.encoders\.(\d+)\.self_attn\.linear_pos\.weight)"),
       "conformer.layers.$1.attn.linear_pos.weight"},
      {std::regex(R"(encoder\.encoders\.(\d+)\.self_attn\.(pos_bias_[uv]))"),
       "conformer.layers.$1.attn.$2"},
      {std::regex(R"(encoder\.encoders\.(\d+)\.feed_forward_macaron\.w_([12])\.(weight|bias))"),
       "conformer.layers.$1.ffn1.linear$2.$3"},
      {std::regex(R"(encoder\.encoders\.(\d+)\.feed_forward\.w_([12])\.(weight|bias))"),
       "conformer.layers.$1.ffn2.linear$2.$3"},
      {std::regex(R"(encoder\.encoders\.(\d+)\.norm_ff_macaron\.(weight|bias))"),
       "conformer.layers.$1.ffn1.norm.$2"},
      {std::regex(R"(encoder\.encoders\.(\d+)\.norm_ff\.(weight|bias))"),
       "conformer.layers.$1.ffn2.norm.$2"},
      {std::regex(R"(encoder\.encoders\.(\d+)\.norm_mha\.(weight|bias))"),
       "conformer.layers.$1.attn_norm.$2"},
      {std::regex(R"(encoder\.encoders\.(\d+)\.norm_conv\.(weight|bias))"),
       "conformer.layers.$1.conv.norm.$2"},
      {std::regex(R"(encoder\.encoders\.(\d+)\.norm_final\.(weight|bias))"),
       "conformer.layers.$1.final_norm.$2"},
      {std::regex(R"(encoder\.encoders\.(\d+)\.conv_module\.)"
                  R"((pointwise_conv1|depthwise_conv|pointwise_conv2)\.(weight|bias))"),
       "conformer.layers.$1.conv.$2.$3"},
      {std::regex(R"(encoder\.encoders\.(\d+)\.conv_module\.norm\.)"
                  R"((weight|bias|running_mean|running_var|num_batches_tracked))"),
       "conformer.layers.$1.conv.conv_norm.$2"},
      {std::regex(R"(encoder\.after_norm\.(weight|bias))"), "after_norm.$1"},
      {std::regex(R"(ctc\.ctc_lo\.(weight|bias))"), "ctc.$1"},
  };
  static const std::regex qkv(
      R"(encoder\.encoders\.(\d+)\.self_attn\.linear_([qkv])\.(weight|bias))");
  MappedConformerCheckpoint out;
  // linear_q, linear_k, linear_v of each block and kind, gathered to be fused.
  QkvParts parts;
  for (const auto& item : tensors) {
    const auto& name = item.key();
    std::smatch m;
    if (std::regex_match(name, m, qkv)) {
      parts.add("conformer.layers." + m[1].str() + ".attn.mha.qkv." + m[3].str(), m[2].str()[0],
                item.value());
    } else if (name.rfind("decoder.", 0) == 0 || name.rfind("encoder.embed.pos_enc.", 0) == 0) {
      out.ignored.insert(name);
    } else {
      out.tensors.insert(rename_with(rules, name), item.value());
    }
  }
  parts.insert_into(out.tensors);
  return out;
}

}  // namespace

ConformerCheckpointFormat parse_conformer_format(const std::string& name) {
  if (name == "attnzoo") return ConformerCheckpointFormat::kAttnzoo;
  if (name == "torchaudio") return ConformerCheckpointFormat::kTorchaudio;
  if (name == "wenet") return ConformerCheckpointFormat::kWenet;
  TORCH_CHECK_VALUE(false, "unknown Conformer checkpoint format '", name,
                    "'; expected attnzoo, torchaudio or wenet");
}

const char* conformer_format_name(ConformerCheckpointFormat format) {
  switch (format) {
    case ConformerCheckpointFormat::kAttnzoo:
      return "attnzoo";
    case ConformerCheckpointFormat::kTorchaudio:
      return "torchaudio";
    case ConformerCheckpointFormat::kWenet:
      return "wenet";
  }
  return "?";
}

ConformerCheckpointFormat detect_conformer_format(const io::TensorDict& tensors) {
  for (const auto& item : tensors) {
    if (item.key().rfind("conformer_layers.", 0) == 0)
      return ConformerCheckpointFormat::kTorchaudio;
    if (item.key().rfind("encoder.encoders.", 0) == 0 || item.key().rfind("encoder.embed.", 0) == 0)
      return ConformerCheckpointFormat::kWenet;
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
    case ConformerCheckpointFormat::kWenet:
      return from_wenet(tensors);
  }
  return {tensors, {}};
}

}  // namespace attnzoo
