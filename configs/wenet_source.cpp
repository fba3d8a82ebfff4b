// WeNet experiment folders, as WeNet's training leaves them: train.yaml (the config it trained
// with, as wenet/bin/train.py saved it), final.pt (else the only *.pt; WeNet's save_checkpoint:
// a state dict), global_cmvn and units.txt. They give:
//   - the encoder: WeNet's ConformerEncoder (encoder_conf), its CTC head (output_dim) and CMVN
//     (cmvn: global_cmvn; the statistics of cmvn_conf.cmvn_file's name in the folder, JSON or
//     Kaldi text, replaced by the checkpoint's encoder.global_cmvn buffers as WeNet loads them);
//   - the attention decoder, transformer (U2) or bitransformer (U2++) (decoder_conf);
//   - the features: Kaldi fbank as dataset_conf.fbank_conf says, without dither (WeNet decodes
//     with none);
//   - the token table (units.txt, else tokenizer_conf.symbol_table_path's file name in the
//     folder) and the decoding defaults of WeNet's runtime: prefix beam search with beam 10 over
//     the 10 most likely tokens of each frame, then attention rescoring with ctc_weight 0.5 and
//     reverse_weight 0 when there is a decoder; a model trained with dynamic chunks (causal) is
//     decoded in chunks of 16 frames with all earlier chunks, as the runtime's defaults do.
// Every key of encoder_conf and decoder_conf is either honoured, known to matter for training
// only, or refused naming the file, the key and the value.
#include <attnzoo/configs/source_yaml.h>
#include <attnzoo/configs/sources.h>
#include <attnzoo/configs/yaml_reader.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace attnzoo {
namespace {

namespace fs = std::filesystem;

YAML::Node encoder_architecture(const detail::SourceYaml& c) {
  c.require("encoder", "conformer", "attnzoo reads WeNet's conformer encoder");
  const std::string e = "encoder_conf";
  c.only_keys(
      e, {"input_layer", "output_size", "attention_heads", "linear_units", "num_blocks",
          "cnn_module_kernel", "cnn_module_norm", "causal", "pos_enc_layer_type",
          "selfattention_layer_type", "normalize_before", "macaron_style", "use_cnn_module",
          "activation_type", "positionwise_conv_kernel_size", "key_bias", "query_bias",
          "value_bias", "conv_bias", "mlp_bias", "mlp_type", "layer_norm_type", "norm_eps",
          "final_norm", "conv_inner_factor", "n_kv_head", "head_dim",
          // training only
          "dropout_rate", "positional_dropout_rate", "attention_dropout_rate", "use_dynamic_chunk",
          "use_dynamic_left_chunk", "static_chunk_size", "gradient_checkpointing"});
  YAML::Node arch;
  arch["input_dim"] = c.integer("input_dim", 80, 1, 4096);
  arch["encoder_dim"] = c.integer(e + ".output_size", 256, 1, 65536);
  arch["num_layers"] = c.integer(e + ".num_blocks", 6, 1, 1000);
  arch["num_heads"] = c.integer(e + ".attention_heads", 4, 1, 1024);
  arch["ffn_dim"] = c.integer(e + ".linear_units", 2048, 1, 1 << 20);
  arch["depthwise_conv_kernel_size"] = c.integer(e + ".cnn_module_kernel", 15, 1, 1024);
  const auto norm = c.text(e + ".cnn_module_norm", "batch_norm");
  if (norm != "batch_norm" && norm != "layer_norm") {
    c.fail(e + ".cnn_module_norm", "'" + norm + "' is not supported (batch_norm, layer_norm)");
  }
  arch["conv_norm"] = norm;
  arch["causal_conv"] = c.boolean(e + ".causal", false);
  static const std::map<std::string, std::string> kSubsampling = {
      {"conv2d", "conv2d4"}, {"conv2d6", "conv2d6"}, {"conv2d8", "conv2d8"}};
  const auto input_layer = c.text(e + ".input_layer", "conv2d");
  if (!kSubsampling.count(input_layer)) {
    c.fail(e + ".input_layer", "'" + input_layer + "' is not supported (conv2d, conv2d6, conv2d8)");
  }
  arch["subsampling"] = kSubsampling.at(input_layer);
  const auto pos = c.text(e + ".pos_enc_layer_type", "rel_pos");
  const auto attention = c.text(e + ".selfattention_layer_type", "rel_selfattn");
  if (pos == "rel_pos" && attention == "rel_selfattn") {
    arch["position"] = "rel_pos_wenet";
  } else if (pos == "abs_pos" && attention == "selfattn") {
    arch["position"] = "abs_pos";
  } else if (pos == "no_pos" && attention == "selfattn") {
    arch["position"] = "none";
  } else {
    c.fail(e + ".pos_enc_layer_type", "'" + pos + "' with selfattention_layer_type '" + attention +
                                          "' is not supported (rel_pos with rel_selfattn, abs_pos "
                                          "or no_pos with selfattn)");
  }
  const std::string structure = "attnzoo's Conformer blocks have this fixed";
  c.require_flag(e + ".normalize_before", true, structure);
  c.require_flag(e + ".macaron_style", true, structure);
  c.require_flag(e + ".use_cnn_module", true, structure);
  c.require(e + ".activation_type", "swish", structure);
  c.require_number(e + ".positionwise_conv_kernel_size", 1.0, structure);
  for (const char* bias : {"key_bias", "query_bias", "value_bias", "conv_bias", "mlp_bias"}) {
    c.require_flag(e + "." + bias, true, structure);
  }
  c.require(e + ".mlp_type", "position_wise_feed_forward", structure);
  c.require(e + ".layer_norm_type", "layer_norm", structure);
  c.require_number(e + ".conv_inner_factor", 2.0, structure);
  c.require_flag(e + ".final_norm", true, structure);
  for (const char* key : {"n_kv_head", "head_dim"}) {
    if (c.has(e + "." + key)) c.fail(e + "." + key, "is not supported (heads of width D / H)");
  }
  if (c.has(e + ".norm_eps"))
    arch["norm_eps"] = detail::number_text(c.number(e + ".norm_eps", 1e-5));
  const auto cmvn = c.text("cmvn", "");
  if (!cmvn.empty() && cmvn != "global_cmvn") {
    c.fail("cmvn", "'" + cmvn + "' is not supported (global_cmvn, or none)");
  }
  arch["global_cmvn"] = cmvn == "global_cmvn";
  arch["final_norm"] = true;
  c.require("ctc", "ctc", "attnzoo reads WeNet's CTC head");
  if (c.integer("ctc_conf.ctc_blank_id", 0, 0, 1 << 20) != 0) {
    c.fail("ctc_conf.ctc_blank_id", "the blank must be token 0, as units.txt's <blank>");
  }
  arch["vocab_size"] = c.integer("output_dim", 0, 2, 1 << 24);
  return arch;
}

YAML::Node decoder_architecture(const detail::SourceYaml& c) {
  const auto kind = c.text("decoder", "bitransformer");
  if (kind != "transformer" && kind != "bitransformer") {
    c.fail("decoder", "'" + kind + "' is not supported (transformer, bitransformer)");
  }
  const std::string d = "decoder_conf";
  c.only_keys(d, {"attention_heads", "linear_units", "num_blocks", "r_num_blocks", "input_layer",
                  "use_output_layer", "normalize_before", "src_attention", "key_bias", "query_bias",
                  "value_bias", "activation_type", "mlp_type", "layer_norm_type", "norm_eps",
                  "tie_word_embedding", "mlp_bias", "n_kv_head", "head_dim",
                  // training only
                  "dropout_rate", "positional_dropout_rate", "self_attention_dropout_rate",
                  "src_attention_dropout_rate", "gradient_checkpointing"});
  const std::string structure = "attnzoo's attention decoder has this fixed";
  c.require(d + ".input_layer", "embed", structure);
  c.require_flag(d + ".use_output_layer", true, structure);
  c.require_flag(d + ".normalize_before", true, structure);
  c.require_flag(d + ".src_attention", true, structure);
  for (const char* bias : {"key_bias", "query_bias", "value_bias", "mlp_bias"}) {
    c.require_flag(d + "." + bias, true, structure);
  }
  c.require(d + ".activation_type", "relu", structure);
  c.require(d + ".mlp_type", "position_wise_feed_forward", structure);
  c.require(d + ".layer_norm_type", "layer_norm", structure);
  c.require_flag(d + ".tie_word_embedding", false, structure);
  c.require_number(d + ".norm_eps", 1e-5, structure);
  for (const char* key : {"n_kv_head", "head_dim"}) {
    if (c.has(d + "." + key)) c.fail(d + "." + key, "is not supported (heads of width D / H)");
  }
  YAML::Node decoder;
  decoder["kind"] = kind;
  decoder["num_heads"] = c.integer(d + ".attention_heads", 4, 1, 1024);
  decoder["ffn_dim"] = c.integer(d + ".linear_units", 2048, 1, 1 << 20);
  decoder["num_blocks"] = c.integer(d + ".num_blocks", 6, 1, 1000);
  if (kind == "bitransformer") {
    decoder["right_blocks"] = c.integer(d + ".r_num_blocks", 0, 1, 1000);
  }
  return decoder;
}

YAML::Node features(const detail::SourceYaml& c) {
  for (const char* other : {"dataset_conf.mfcc_conf", "dataset_conf.log_mel_spectrogram_conf"}) {
    if (c.has(other)) c.fail(other, "attnzoo reads WeNet models of fbank features");
  }
  const std::string f = "dataset_conf.fbank_conf";
  YAML::Node out;
  out["kind"] = "fbank";
  out["sample_rate"] = c.integer("dataset_conf.resample_conf.resample_rate", 16000, 1000, 384000);
  out["num_mel_bins"] = c.integer(f + ".num_mel_bins", 80, 1, 4096);
  out["frame_length_ms"] = detail::number_text(c.number(f + ".frame_length", 25.0));
  out["frame_shift_ms"] = detail::number_text(c.number(f + ".frame_shift", 10.0));
  out["dither"] = "0.0";  // WeNet decodes without dither (recognize.py sets it to 0)
  out["energy_floor"] = "0.0";
  return out;
}

// The token table and how its pieces make text.
YAML::Node decoding(const detail::SourceYaml& c, const fs::path& dir, bool has_decoder) {
  YAML::Node out;
  std::error_code error;
  std::string units = (dir / "units.txt").string();
  if (!fs::is_regular_file(units, error) && c.has("tokenizer_conf.symbol_table_path")) {
    units = (dir / fs::path(c.text("tokenizer_conf.symbol_table_path", "")).filename()).string();
  }
  if (!fs::is_regular_file(units, error)) {
    throw ConfigError(dir.string() + ": no units.txt (the token table WeNet's training wrote)",
                      dir.string(), "");
  }
  out["units"] = fs::absolute(units).lexically_normal().string();
  out["units_format"] = "wenet";
  const auto tokenizer = c.text("tokenizer", "char");
  if (tokenizer == "bpe") {
    const auto model = dir / fs::path(c.text("tokenizer_conf.bpe_path", "bpe.model")).filename();
    if (!fs::is_regular_file(model, error)) {
      c.fail("tokenizer_conf.bpe_path", "no " + model.filename().string() + " in the folder");
    }
    out["text"] = "sentencepiece";
    out["sentencepiece_model"] = fs::absolute(model).lexically_normal().string();
  } else if (tokenizer == "char") {
    // Word pieces that begin with "▁" (WeNet's English units) make words, as its runtime joins
    // them; other characters (Chinese) join as they are.
    std::ifstream table(units);
    std::string line;
    bool pieces = false;
    while (!pieces && std::getline(table, line)) pieces = line.rfind("\u2581", 0) == 0;
    out["text"] = pieces ? "sentencepiece" : "characters";
  } else {
    c.fail("tokenizer", "'" + tokenizer + "' is not supported (char, bpe)");
  }
  out["search"] = "prefix_beam";
  out["beam_size"] = 10;
  out["token_top_k"] = 10;
  if (has_decoder) {
    out["mode"] = "attention_rescoring";
    out["ctc_weight"] = "0.5";
    out["reverse_weight"] = "0.0";
  }
  return out;
}

class WenetSource final : public ModelSource {
 public:
  const char* name() const override { return "wenet"; }
  const char* config_name() const override { return "train.yaml"; }

  // A folder with a train.yaml of WeNet's keys (encoder_conf), not any train.yaml (attnzoo's own
  // training configs are named so too).
  bool detect(const std::string& path) const override {
    std::error_code error;
    const auto file = fs::path(path) / "train.yaml";
    if (!fs::is_directory(path, error) || !fs::is_regular_file(file, error)) return false;
    std::ifstream in(file);
    std::string line;
    for (int n = 0; n < 10000 && std::getline(in, line); ++n) {
      if (line.rfind("encoder_conf:", 0) == 0) return true;
    }
    return false;
  }

  std::string document(const std::string& path) const override {
    const fs::path dir(path);
    const detail::SourceYaml c((dir / "train.yaml").string(), "WeNet config");
    c.require("model", "asr_model", "attnzoo reads WeNet's CTC / attention ASR models");
    YAML::Node doc;
    doc["name"] = detail::source_model_name(path);
    doc["family"] = "conformer";
    auto arch = encoder_architecture(c);
    const bool has_decoder = c.has("decoder") || c.has("decoder_conf");
    if (has_decoder) arch["decoder"] = decoder_architecture(c);
    doc["architecture"] = arch;
    doc["features"] = features(c);
    if (c.boolean("encoder_conf.use_dynamic_chunk", false) &&
        c.boolean("encoder_conf.causal", false)) {
      YAML::Node streaming;
      streaming["chunk_size"] = 16;
      streaming["num_left_chunks"] = -1;
      doc["streaming"] = streaming;
    }
    doc["decoding"] = decoding(c, dir, has_decoder);
    YAML::Node checkpoint;
    checkpoint["format"] = "wenet";
    // final.pt, else the only *.pt (WeNet's save_checkpoint), else an error listing them.
    checkpoint["file"] = detail::training_checkpoint(dir.string(), {"final.pt"}, ".pt");
    if (c.text("cmvn", "") == "global_cmvn") {
      // The statistics beside the checkpoint, which WeNet builds the model with before final.pt's
      // own replace them; without the file, final.pt's alone.
      // cmvn_conf.cmvn_file is the recipe's path: its name in the folder, else global_cmvn.
      const auto named = fs::path(c.text("cmvn_conf.cmvn_file", "")).filename();
      std::error_code error;
      for (const auto& name : {named, fs::path("global_cmvn")}) {
        if (!name.empty() && fs::is_regular_file(dir / name, error)) {
          checkpoint["cmvn_file"] = fs::absolute(dir / name).lexically_normal().string();
          break;
        }
      }
    }
    doc["checkpoint"] = checkpoint;
    return detail::emit_document(
        doc, {"Read from " + fs::absolute(dir).lexically_normal().string() + ":",
              "a WeNet experiment folder (train.yaml, the checkpoint, units.txt), with WeNet's",
              "runtime defaults for decoding."});
  }
};

}  // namespace

std::unique_ptr<ModelSource> make_wenet_source() { return std::make_unique<WenetSource>(); }

}  // namespace attnzoo
