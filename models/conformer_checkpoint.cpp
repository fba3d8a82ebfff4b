#include <attnzoo/models/conformer_checkpoint.h>

#include <attnzoo/models/checkpoint.h>

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>
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
  for (const auto& item : tensors) {
    insert_mapped(out.tensors, rename_with(rules, item.key()), item.key(), item.value());
  }
  return out;
}

bool starts_with(const std::string& name, const char* prefix) { return name.rfind(prefix, 0) == 0; }

// A bare encoder's state_dict (the Encoder module saved alone) has no encoder. prefix.
bool is_bare_encoder(const io::TensorDict& tensors) {
  for (const auto& item : tensors) {
    if (starts_with(item.key(), "encoders.")) return true;
  }
  return false;
}

// WeNet's attention decoder (TransformerDecoder, or BiTransformerDecoder's left_decoder and
// right_decoder) onto AttentionDecoder's names (models/attention_decoder.h). The separate q, k, v
// projections go to `self_qkv` (self-attention) and `src_kv` (the cross-attention's k and v) to be
// fused. Returns false for a name that is not the decoder's.
bool map_wenet_decoder(const std::string& name, const torch::Tensor& tensor,
                       MappedConformerCheckpoint& out, QkvParts& self_qkv, QkvParts& src_kv) {
  static const std::regex decoder(R"(decoder\.(?:(left|right)_decoder\.)?(.+))");
  // "$1" is the block index throughout; the direction's prefix is put in front.
  static const std::vector<RenameRule> rules = {
      {std::regex(R"(embed\.0\.weight)"), "embed.weight"},
      {std::regex(R"((after_norm|output_layer)\.(weight|bias))"), "$1.$2"},
      {std::regex(R"(decoders\.(\d+)\.(self_attn|src_attn)\.linear_out\.(weight|bias))"),
       "blocks.$1.$2.proj.$3"},
      {std::regex(R"(decoders\.(\d+)\.src_attn\.linear_q\.(weight|bias))"),
       "blocks.$1.src_attn.q.$2"},
      {std::regex(R"(decoders\.(\d+)\.feed_forward\.w_([12])\.(weight|bias))"),
       "blocks.$1.mlp.fc$2.$3"},
      {std::regex(R"(decoders\.(\d+)\.(norm[123])\.(weight|bias))"), "blocks.$1.$2.$3"},
  };
  static const std::regex self_part(R"(decoders\.(\d+)\.self_attn\.linear_([qkv])\.(weight|bias))");
  static const std::regex src_part(R"(decoders\.(\d+)\.src_attn\.linear_([kv])\.(weight|bias))");
  std::smatch m;
  if (!std::regex_match(name, m, decoder)) return false;
  const std::string prefix =
      "decoder." + std::string(m[1].str() == "right" ? "right" : "left") + ".";
  const std::string rest = m[2].str();
  std::smatch part;
  if (rest == "embed.1.pe") {
    out.ignored.insert(name);  // the sinusoid table, computed
  } else if (std::regex_match(rest, part, self_part)) {
    self_qkv.add(prefix + "blocks." + part[1].str() + ".self_attn.qkv." + part[3].str(),
                 part[2].str()[0], tensor);
  } else if (std::regex_match(rest, part, src_part)) {
    src_kv.add(prefix + "blocks." + part[1].str() + ".src_attn.kv." + part[3].str(),
               part[2].str()[0], tensor);
  } else {
    // An unknown name keeps its source name, for the strict loader to report.
    const bool known = std::any_of(rules.begin(), rules.end(), [&](const RenameRule& rule) {
      return std::regex_match(rest, rule.pattern);
    });
    insert_mapped(out.tensors, known ? prefix + rename_with(rules, rest) : name, name, tensor);
  }
  return true;
}

MappedConformerCheckpoint from_wenet(const io::TensorDict& tensors, bool espnet) {
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
  const bool bare = is_bare_encoder(tensors);
  // linear_q, linear_k, linear_v of each block and kind, gathered to be fused.
  QkvParts parts, decoder_qkv, decoder_kv("kv");
  for (const auto& item : tensors) {
    const auto name = bare ? "encoder." + item.key() : item.key();
    std::smatch m;
    if (std::regex_match(name, m, qkv)) {
      parts.add("conformer.layers." + m[1].str() + ".attn.mha.qkv." + m[3].str(), m[2].str()[0],
                item.value());
    } else if (!espnet && !bare &&
               map_wenet_decoder(name, item.value(), out, decoder_qkv, decoder_kv)) {
      continue;
    } else if (starts_with(name, "decoder.") || starts_with(name, "encoder.embed.pos_enc.") ||
               (espnet && starts_with(name, "frontend."))) {
      out.ignored.insert(item.key());
    } else if (espnet && name == "normalize.mean") {
      insert_mapped(out.tensors, "global_cmvn.mean", name, item.value());
    } else if (espnet && name == "normalize.std") {
      // GlobalMVN divides by std; GlobalCmvn multiplies by its inverse.
      insert_mapped(out.tensors, "global_cmvn.istd", name, item.value().reciprocal());
    } else {
      insert_mapped(out.tensors, rename_with(rules, name), name, item.value());
    }
  }
  parts.insert_into(out.tensors);
  decoder_qkv.insert_into(out.tensors);
  decoder_kv.insert_into(out.tensors);
  return out;
}

// NeMo's ConformerEncoder (FastConformer included) with its CTC head, as model_weights.ckpt of
// a .nemo file holds them.
MappedConformerCheckpoint from_nemo(const io::TensorDict& tensors) {
  // "$1" is the block index throughout.
  static const std::vector<RenameRule> rules = {
      {std::regex(R"(encoder\.pre_encode\.conv\.(\d+)\.(weight|bias))"), "embed.conv.$1.$2"},
      {std::regex(R"(encoder\.pre_encode\.out\.(weight|bias))"), "embed.out.$1"},
      {std::regex(R"(encoder\.layers\.(\d+)\.norm_feed_forward([12])\.(weight|bias))"),
       "conformer.layers.$1.ffn$2.norm.$3"},
      {std::regex(R"(encoder\.layers\.(\d+)\.feed_forward([12])\.linear([12])\.(weight|bias))"),
       "conformer.layers.$1.ffn$2.linear$3.$4"},
      {std::regex(R"(encoder\.layers\.(\d+)\.norm_self_att\.(weight|bias))"),
       "conformer.layers.$1.attn_norm.$2"},
      {std::regex(R"(encoder\.layers\.(\d+)\.self_attn\.linear_out\.(weight|bias))"),
       "conformer.layers.$1.attn.mha.proj.$2"},
      {std::regex(R"(encoder\.layers\.(\d+)\.self_attn\.linear_pos\.weight)"),
       "conformer.layers.$1.attn.linear_pos.weight"},
      {std::regex(R"(encoder\.layers\.(\d+)\.self_attn\.(pos_bias_[uv]))"),
       "conformer.layers.$1.attn.$2"},
      {std::regex(R"(encoder\.layers\.(\d+)\.norm_conv\.(weight|bias))"),
       "conformer.layers.$1.conv.norm.$2"},
      {std::regex(R"(encoder\.layers\.(\d+)\.conv\.)"
                  R"((pointwise_conv1|depthwise_conv|pointwise_conv2)\.(weight|bias))"),
       "conformer.layers.$1.conv.$2.$3"},
      // NeMo calls the norm after the depthwise convolution batch_norm whatever its kind.
      {std::regex(R"(encoder\.layers\.(\d+)\.conv\.batch_norm\.)"
                  R"((weight|bias|running_mean|running_var|num_batches_tracked))"),
       "conformer.layers.$1.conv.conv_norm.$2"},
      {std::regex(R"(encoder\.layers\.(\d+)\.norm_out\.(weight|bias))"),
       "conformer.layers.$1.final_norm.$2"},
      // The transducer: RNNTDecoder's prediction network and RNNTJoint.
      {std::regex(R"(decoder\.prediction\.embed\.weight)"), "transducer.embed.weight"},
      {std::regex(R"(decoder\.prediction\.dec_rnn\.lstm\.((?:weight|bias)_(?:ih|hh)_l\d+))"),
       "transducer.lstm.$1"},
      {std::regex(R"(joint\.(enc|pred)\.(weight|bias))"), "transducer.$1.$2"},
      // The joint's last Linear: after its activation, and a Dropout where jointnet.dropout > 0.
      {std::regex(R"(joint\.joint_net\.[12]\.(weight|bias))"), "transducer.out.$1"},
  };
  static const std::regex qkv(
      R"(encoder\.layers\.(\d+)\.self_attn\.(linear|global)_([qkv])\.(weight|bias))");
  static const std::regex layer(R"(encoder\.layers\.(\d+)\..*)");
  static const std::regex ctc_head(R"((?:decoder|ctc_decoder)\.decoder_layers\.0\.(weight|bias))");
  MappedConformerCheckpoint out;
  QkvParts parts;
  std::set<std::string> layers;
  std::map<std::string, torch::Tensor> shared_biases;  // untie_biases: false
  for (const auto& item : tensors) {
    const auto& name = item.key();
    std::smatch m;
    if (std::regex_match(name, m, layer)) layers.insert(m[1].str());
    if (std::regex_match(name, m, qkv)) {
      // linear_q/k/v into the attention's qkv, global_q/k/v (Longformer's global tokens with
      // global_attn_separate) into global_qkv.
      const auto fused = m[2].str() == "linear" ? ".attn.mha.qkv." : ".attn.global_qkv.";
      parts.add("conformer.layers." + m[1].str() + fused + m[4].str(), m[3].str()[0], item.value());
    } else if (std::regex_match(name, m, ctc_head)) {
      // ConvASRDecoder: a Conv1d of kernel 1, [V, D, 1], onto the Linear [V, D].
      const auto& t = item.value();
      insert_mapped(out.tensors, "ctc." + m[1].str(), name,
                    m[1].str() == "weight" && t.dim() == 3 && t.size(2) == 1 ? t.squeeze(2) : t);
    } else if (name == "encoder.pos_bias_u" || name == "encoder.pos_bias_v") {
      shared_biases[name.substr(std::string("encoder.").size())] = item.value();
    } else if (starts_with(name, "preprocessor.") || starts_with(name, "encoder.pos_enc.")) {
      // The window, mel filters and positional table: computed (features kind nemo_mel).
      out.ignored.insert(name);

    } else {
      insert_mapped(out.tensors, rename_with(rules, name), name, item.value());
    }
  }
  for (const auto& [bias, tensor] : shared_biases) {
    for (const auto& index : layers) {
      insert_mapped(out.tensors, "conformer.layers." + index + ".attn." + bias, "encoder." + bias,
                    tensor);
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
  if (name == "espnet") return ConformerCheckpointFormat::kEspnet;
  if (name == "nemo") return ConformerCheckpointFormat::kNemo;
  TORCH_CHECK_VALUE(false, "unknown Conformer checkpoint format '", name,
                    "'; expected attnzoo, torchaudio, wenet, espnet or nemo");
}

const char* conformer_format_name(ConformerCheckpointFormat format) {
  switch (format) {
    case ConformerCheckpointFormat::kAttnzoo:
      return "attnzoo";
    case ConformerCheckpointFormat::kTorchaudio:
      return "torchaudio";
    case ConformerCheckpointFormat::kWenet:
      return "wenet";
    case ConformerCheckpointFormat::kEspnet:
      return "espnet";
    case ConformerCheckpointFormat::kNemo:
      return "nemo";
  }
  return "?";
}

ConformerCheckpointFormat detect_conformer_format(const io::TensorDict& tensors) {
  bool wenet_names = false;
  for (const auto& item : tensors) {
    const auto& name = item.key();
    if (starts_with(name, "conformer_layers.")) return ConformerCheckpointFormat::kTorchaudio;
    if (starts_with(name, "encoder.pre_encode.") || starts_with(name, "encoder.layers.")) {
      return ConformerCheckpointFormat::kNemo;
    }
    if (name == "normalize.mean" || name == "normalize.std")
      return ConformerCheckpointFormat::kEspnet;
    if (starts_with(name, "encoder.encoders.") || starts_with(name, "encoder.embed.") ||
        starts_with(name, "encoders.")) {
      wenet_names = true;
    }
  }
  return wenet_names ? ConformerCheckpointFormat::kWenet : ConformerCheckpointFormat::kAttnzoo;
}

MappedConformerCheckpoint to_conformer_layout(const io::TensorDict& tensors,
                                              ConformerCheckpointFormat format) {
  switch (format) {
    case ConformerCheckpointFormat::kAttnzoo:
      return {tensors, {}};
    case ConformerCheckpointFormat::kTorchaudio:
      return from_torchaudio(tensors);
    case ConformerCheckpointFormat::kWenet:
      return from_wenet(tensors, /*espnet=*/false);
    case ConformerCheckpointFormat::kEspnet:
      return from_wenet(tensors, /*espnet=*/true);
    case ConformerCheckpointFormat::kNemo:
      return from_nemo(tensors);
  }
  return {tensors, {}};
}

}  // namespace attnzoo
