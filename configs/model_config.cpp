#include <attnzoo/configs/model_config.h>

#include <attnzoo/configs/yaml_reader.h>
#include <attnzoo/layers/attention_backend.h>
#include <attnzoo/models/conformer_checkpoint.h>
#include <attnzoo/models/conformer_frontend.h>
#include <attnzoo/models/vit_checkpoint.h>

#include <c10/util/Exception.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace attnzoo {
namespace {

using config_detail::Document;
using config_detail::MapReader;

// Upper bounds on sizes: a config is untrusted input, and a typo such as depth: 12000 should be an
// error, not an attempt to allocate the model. Each is far above any published ViT.
constexpr int64_t kMaxImageSize = 8192;
constexpr int64_t kMaxChannels = 64;
constexpr int64_t kMaxEmbedDim = 16384;
constexpr int64_t kMaxDepth = 1000;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxClasses = 1000000;
constexpr int64_t kMaxTokens = 1024;
constexpr int64_t kMaxBackendSize = int64_t{1} << 20;
constexpr double kMaxMlpRatio = 64.0;
constexpr int64_t kMaxFeatures = 4096;
constexpr int64_t kMaxKernel = 1024;
constexpr int64_t kMaxChunk = 1 << 20;
constexpr int64_t kMaxSampleRate = 384000;
// Rates are probabilities of dropping; 1 would drop everything.
constexpr double kBelowOne = 0.999999;

// The `attention:` section, shared by every family that has attention layers.
struct AttentionSection {
  std::string backend = "auto";
  AttentionBackendOptions options;
  bool head_gating = false;
};

AttentionSection read_attention(MapReader attention) {
  AttentionSection section;
  const auto& defaults = section.options;
  section.backend = attention.string("backend", section.backend);
  if (!is_attention_backend(section.backend)) {
    std::string known = "auto";
    for (const auto& name : attention_backend_names()) known += ", " + name;
    attention.fail("backend",
                   "unknown attention backend '" + section.backend + "'; expected one of " + known);
  }
  section.options.chunk_size(
      attention.integer("chunk_size", defaults.chunk_size(), 1, kMaxBackendSize));
  section.options.block_size(
      attention.integer("block_size", defaults.block_size(), 1, kMaxBackendSize));
  section.options.window(attention.integer("window", defaults.window(), 0, kMaxBackendSize));
  section.options.global_tokens(
      attention.integer("global_tokens", defaults.global_tokens(), 0, kMaxBackendSize));
  section.head_gating = attention.boolean("head_gating", false);
  attention.finish();
  return section;
}

// `architecture:` of family vit: ViTOptions by their names. Absent keys keep ViTOptions' defaults,
// which are timm's VisionTransformer defaults (ViT-B/16 at 224).
ViTOptions read_vit_architecture(MapReader arch) {
  ViTOptions o;
  o.img_size(arch.integer("img_size", o.img_size(), 1, kMaxImageSize));
  o.patch_size(arch.integer("patch_size", o.patch_size(), 1, kMaxImageSize));
  o.in_chans(arch.integer("in_chans", o.in_chans(), 1, kMaxChannels));
  o.num_classes(arch.integer("num_classes", o.num_classes(), 0, kMaxClasses));
  o.global_pool(
      arch.choice("global_pool", o.global_pool(), {"token", "avg", "max", "avgmax", "none"}));
  o.embed_dim(arch.integer("embed_dim", o.embed_dim(), 1, kMaxEmbedDim));
  o.depth(arch.integer("depth", o.depth(), 1, kMaxDepth));
  o.num_heads(arch.integer("num_heads", o.num_heads(), 1, kMaxHeads));
  o.mlp_ratio(arch.number("mlp_ratio", o.mlp_ratio(), 0.0, kMaxMlpRatio, /*min_exclusive=*/true));
  o.qkv_bias(arch.boolean("qkv_bias", o.qkv_bias()));
  o.qk_norm(arch.boolean("qk_norm", o.qk_norm()));
  o.proj_bias(arch.boolean("proj_bias", o.proj_bias()));
  o.init_values(arch.nullable_number("init_values", o.init_values(), 0.0, 100.0, true));
  o.class_token(arch.boolean("class_token", o.class_token()));
  o.no_embed_class(arch.boolean("no_embed_class", o.no_embed_class()));
  o.reg_tokens(arch.integer("reg_tokens", o.reg_tokens(), 0, kMaxTokens));
  o.pre_norm(arch.boolean("pre_norm", o.pre_norm()));
  o.final_norm(arch.boolean("final_norm", o.final_norm()));
  o.fc_norm(arch.nullable_boolean("fc_norm", o.fc_norm()));
  o.norm_eps(arch.number("norm_eps", o.norm_eps(), 0.0, 1.0, true));
  o.activation(arch.choice("activation", o.activation(), {"gelu", "gelu_tanh"}));
  o.drop_rate(arch.number("drop_rate", o.drop_rate(), 0.0, kBelowOne));
  o.pos_drop_rate(arch.number("pos_drop_rate", o.pos_drop_rate(), 0.0, kBelowOne));
  o.proj_drop_rate(arch.number("proj_drop_rate", o.proj_drop_rate(), 0.0, kBelowOne));
  o.attn_drop_rate(arch.number("attn_drop_rate", o.attn_drop_rate(), 0.0, kBelowOne));
  o.drop_path_rate(arch.number("drop_path_rate", o.drop_path_rate(), 0.0, kBelowOne));
  arch.finish();

  // Relations between values, checked once every value is known to be well-formed. Reported at
  // an overridden key of the relation if there is one (the override is what changed), else at
  // the first key the file sets (else at the mapping, when both keep their defaults).
  const auto at = [&](const std::string& first, const std::string& second) {
    if (arch.overridden(second) && !arch.overridden(first)) return second;
    return arch.has(first) ? first : second;
  };
  if (o.embed_dim() % o.num_heads() != 0) {
    arch.fail(at("embed_dim", "num_heads"),
              "embed_dim " + std::to_string(o.embed_dim()) + " is not divisible by num_heads " +
                  std::to_string(o.num_heads()) + " (each head takes embed_dim / num_heads)");
  }
  if (o.img_size() % o.patch_size() != 0) {
    arch.fail(at("img_size", "patch_size"), "img_size " + std::to_string(o.img_size()) +
                                                " is not divisible by patch_size " +
                                                std::to_string(o.patch_size()));
  }
  if (o.global_pool() == "token" && !o.class_token()) {
    arch.fail(at("global_pool", "class_token"),
              "global_pool 'token' needs class_token: true; use avg, max, avgmax or none");
  }
  if (static_cast<int64_t>(static_cast<double>(o.embed_dim()) * o.mlp_ratio()) < 1) {
    arch.fail("mlp_ratio", "embed_dim · mlp_ratio must give an MLP of at least one unit");
  }
  return o;
}

// `preprocess:` for image models: timm's pretrained-cfg fields.
ImagePreprocessConfig read_image_preprocess(MapReader pre, int64_t in_chans, int64_t img_size,
                                            int64_t patch_size) {
  ImagePreprocessConfig p;
  const auto size = pre.integer_list("input_size", 3, 1, kMaxImageSize);
  p.input_size = size ? std::array<int64_t, 3>{(*size)[0], (*size)[1], (*size)[2]}
                      : std::array<int64_t, 3>{in_chans, img_size, img_size};
  p.crop_pct = pre.number("crop_pct", std::nullopt, 0.0, 1.0, /*min_exclusive=*/true);
  p.interpolation = pre.choice("interpolation", std::nullopt, {"bicubic", "bilinear"});
  const auto channels = static_cast<size_t>(in_chans);
  const auto mean = pre.number_list("mean", channels, 0.0, 1.0);
  const auto stdev = pre.number_list("std", channels, 0.0, 10.0, /*min_exclusive=*/true);
  if (!mean) pre.fail("mean", "required key is missing");
  if (!stdev) pre.fail("std", "required key is missing");
  p.mean = *mean;
  p.std = *stdev;
  pre.finish();

  if (p.input_size[0] != in_chans) {
    pre.fail("input_size", "input_size has " + std::to_string(p.input_size[0]) +
                               " channels, architecture.in_chans is " + std::to_string(in_chans));
  }
  // Other sizes than img_size are fine (the position embedding is resampled), but the patches
  // must tile the image.
  if (p.input_size[1] % patch_size != 0 || p.input_size[2] % patch_size != 0) {
    pre.fail("input_size", "input_size " + std::to_string(p.input_size[1]) + "x" +
                               std::to_string(p.input_size[2]) +
                               " is not divisible by architecture.patch_size " +
                               std::to_string(patch_size));
  }
  return p;
}

LabelsConfig read_labels(MapReader& root, const std::string& source) {
  LabelsConfig labels;
  if (!root.has("labels")) return labels;
  const std::string value = root.string("labels", std::nullopt);
  if (value == "imagenet") {
    labels.source = LabelsConfig::Source::kImageNet;
    return labels;
  }
  namespace fs = std::filesystem;
  fs::path file(value);
  if (file.is_relative()) file = fs::path(source).parent_path() / file;
  std::error_code error;
  if (!fs::is_regular_file(file, error)) {
    root.fail("labels", "expected 'imagenet' or a labels file relative to the config; '" +
                            file.string() + "' is not a file");
  }
  labels.source = LabelsConfig::Source::kFile;
  labels.file = file.lexically_normal().string();
  return labels;
}

std::string read_vit_checkpoint_format(MapReader checkpoint) {
  const std::string format = checkpoint.string("format", std::nullopt);
  try {
    parse_vit_format(format);
  } catch (const c10::Error& e) {
    checkpoint.fail("format", e.what_without_backtrace());
  }
  checkpoint.finish();
  return format;
}

// The family vit: architecture, attention, preprocessing and checkpoint layout.
void read_vit(MapReader& root, ModelConfig& config) {
  config.family = ModelFamily::kViT;
  config.vit = read_vit_architecture(root.map("architecture", true));
  const auto attention = read_attention(root.map("attention", false));
  config.vit.attention_backend(attention.backend)
      .attention_options(attention.options)
      .head_gating(attention.head_gating);
  config.image = read_image_preprocess(root.map("preprocess", true), config.vit.in_chans(),
                                       config.vit.img_size(), config.vit.patch_size());
  if (root.has("checkpoint")) {
    config.checkpoint_format = read_vit_checkpoint_format(root.map("checkpoint", true));
  }
}

// `architecture:` of family conformer: ConformerEncoderOptions and its blocks' ConformerOptions.
// Absent keys take WeNet's LibriSpeech conformer (80 fbank, 256 wide, 12 blocks, 4 heads, 2048
// feed-forward units, kernel 15, conv2d x4, WeNet's relative positions).
ConformerEncoderOptions read_conformer_architecture(MapReader arch) {
  ConformerOptions blocks(256, 4, 2048, 12, 15);
  const int64_t input_dim = arch.integer("input_dim", 80, 1, kMaxFeatures);
  blocks.input_dim(arch.integer("encoder_dim", blocks.input_dim(), 1, kMaxEmbedDim));
  blocks.num_layers(arch.integer("num_layers", blocks.num_layers(), 1, kMaxDepth));
  blocks.num_heads(arch.integer("num_heads", blocks.num_heads(), 1, kMaxHeads));
  blocks.ffn_dim(arch.integer("ffn_dim", blocks.ffn_dim(), 1, 8 * kMaxEmbedDim));
  blocks.depthwise_conv_kernel_size(arch.integer(
      "depthwise_conv_kernel_size", blocks.depthwise_conv_kernel_size(), 1, kMaxKernel));
  blocks.conv_norm(
      arch.choice("conv_norm", blocks.conv_norm(), {"batch_norm", "group_norm", "layer_norm"}));
  blocks.convolution_first(arch.boolean("convolution_first", blocks.convolution_first()));
  blocks.causal_conv(arch.boolean("causal_conv", blocks.causal_conv()));
  blocks.dropout(arch.number("dropout", blocks.dropout(), 0.0, kBelowOne));
  blocks.norm_eps(arch.number("norm_eps", blocks.norm_eps(), 0.0, 1.0, true));
  blocks.conv_norm_eps(arch.number("conv_norm_eps", blocks.conv_norm_eps(), 0.0, 1.0, true));
  ConformerEncoderOptions o(input_dim, blocks);
  o.subsampling(arch.choice("subsampling", o.subsampling(),
                            {"none", "conv2d4", "conv2d6", "conv2d8", "dw_striding8"}));
  o.subsampling_channels(
      arch.integer("subsampling_channels", o.subsampling_channels(), 0, kMaxEmbedDim));
  o.position(
      arch.choice("position", o.position(), {"none", "abs_pos", "rel_pos", "rel_pos_wenet"}));
  o.global_cmvn(arch.boolean("global_cmvn", o.global_cmvn()));
  o.final_norm(arch.boolean("final_norm", o.final_norm()));
  o.vocab_size(arch.integer("vocab_size", o.vocab_size(), 0, kMaxClasses));
  o.num_classes(arch.integer("num_classes", o.num_classes(), 0, kMaxClasses));
  arch.finish();

  const auto at = [&](const std::string& first, const std::string& second) {
    if (arch.overridden(second) && !arch.overridden(first)) return second;
    return arch.has(first) ? first : second;
  };
  const int64_t d = blocks.input_dim();
  if (d % blocks.num_heads() != 0) {
    arch.fail(at("encoder_dim", "num_heads"), "encoder_dim " + std::to_string(d) +
                                                  " is not divisible by num_heads " +
                                                  std::to_string(blocks.num_heads()) +
                                                  " (each head takes encoder_dim / num_heads)");
  }
  if (o.position() != "none" && d % 2 != 0) {
    arch.fail(at("encoder_dim", "position"), "position " + o.position() +
                                                 " uses sinusoidal encodings, which need an even "
                                                 "encoder_dim; got " +
                                                 std::to_string(d));
  }
  if (o.subsampling() == "none" && input_dim != d) {
    arch.fail(at("input_dim", "subsampling"),
              "without subsampling the features go straight to the blocks: input_dim " +
                  std::to_string(input_dim) + " must equal encoder_dim " + std::to_string(d));
  }
  if (o.subsampling() != "none" &&
      subsampled_length(conformer_subsampling_steps(o.subsampling()), input_dim) < 1) {
    arch.fail(at("input_dim", "subsampling"),
              "subsampling " + o.subsampling() + " leaves no features of input_dim " +
                  std::to_string(input_dim) + "; it needs more feature bins");
  }
  return o;
}

// `features:` of speech models (AudioFeaturesConfig). Absent: kind "none", the model takes
// features made elsewhere (e.g. torchaudio's Conformer behind the user's own front end).
AudioFeaturesConfig read_audio_features(MapReader& root, int64_t input_dim) {
  AudioFeaturesConfig f;
  if (!root.has("features")) {
    f.kind = "none";
    return f;
  }
  auto features = root.map("features", true);
  f.kind = features.choice("kind", std::nullopt, {"fbank", "whisper_log_mel"});
  f.sample_rate = features.integer("sample_rate", f.sample_rate, 1000, kMaxSampleRate);
  f.num_mel_bins = features.integer("num_mel_bins", f.num_mel_bins, 1, kMaxFeatures);
  f.frame_length_ms = features.number("frame_length_ms", f.frame_length_ms, 0.0, 1000.0, true);
  f.frame_shift_ms = features.number("frame_shift_ms", f.frame_shift_ms, 0.0, 1000.0, true);
  if (f.kind == "fbank") {
    f.dither = features.number("dither", f.dither, 0.0, 100.0);
    f.preemphasis = features.number("preemphasis", f.preemphasis, 0.0, 1.0);
    f.remove_dc_offset = features.boolean("remove_dc_offset", f.remove_dc_offset);
    f.window = features.choice("window", f.window,
                               {"povey", "hamming", "hanning", "rectangular", "blackman"});
    f.snip_edges = features.boolean("snip_edges", f.snip_edges);
    f.energy_floor = features.number("energy_floor", f.energy_floor, 0.0, 1e10);
    f.low_freq = features.number("low_freq", f.low_freq, 0.0, kMaxSampleRate / 2.0);
    f.high_freq =
        features.number("high_freq", f.high_freq, -kMaxSampleRate / 2.0, kMaxSampleRate / 2.0);
    f.int16_scale = features.boolean("int16_scale", f.int16_scale);
  }
  features.finish();
  if (f.num_mel_bins != input_dim) {
    features.fail("num_mel_bins", "num_mel_bins " + std::to_string(f.num_mel_bins) +
                                      " must equal architecture.input_dim " +
                                      std::to_string(input_dim));
  }
  const double nyquist = f.sample_rate / 2.0;
  const double high = f.high_freq > 0.0 ? f.high_freq : nyquist + f.high_freq;
  if (f.kind == "fbank" && !(f.low_freq < high && high <= nyquist)) {
    features.fail(features.has("high_freq") ? "high_freq" : "low_freq",
                  "need 0 <= low_freq < high_freq <= sample_rate / 2 = " +
                      std::to_string(static_cast<int64_t>(nyquist)) + " Hz (high_freq <= 0 " +
                      "counts down from there)");
  }
  if (f.frame_shift_ms > f.frame_length_ms) {
    features.fail("frame_shift_ms", "frame_shift_ms must not exceed frame_length_ms");
  }
  return f;
}

// `streaming:` (StreamingConfig), checked against what can stream.
StreamingConfig read_streaming(MapReader streaming, const ConformerEncoderOptions& model,
                               bool head_gating) {
  StreamingConfig s;
  s.chunk_size = streaming.integer("chunk_size", s.chunk_size, 0, kMaxChunk);
  s.num_left_chunks = streaming.integer("num_left_chunks", s.num_left_chunks, -1, kMaxChunk);
  streaming.finish();
  if (s.chunk_size == 0) return s;
  std::string why;
  if (!model.blocks().causal_conv()) {
    why = "architecture.causal_conv: true (a centred kernel reads frames not yet arrived)";
  } else if (model.blocks().conv_norm() == "group_norm") {
    why = "a conv_norm other than group_norm (it normalises over the whole utterance)";
  } else if (model.subsampling() == "dw_striding8") {
    why = "a subsampling without padding (none, conv2d4, conv2d6, conv2d8)";
  } else if (head_gating) {
    why = "attention.head_gating: false (the gates pool the whole utterance)";
  }
  if (!why.empty()) streaming.fail("chunk_size", "streaming (chunk_size > 0) needs " + why);
  return s;
}

std::string read_conformer_checkpoint_format(MapReader checkpoint) {
  const std::string format = checkpoint.string("format", std::nullopt);
  try {
    parse_conformer_format(format);
  } catch (const c10::Error& e) {
    checkpoint.fail("format", e.what_without_backtrace());
  }
  checkpoint.finish();
  return format;
}

// The family conformer: the encoder, attention, features, streaming and checkpoint layout.
void read_conformer(MapReader& root, ModelConfig& config) {
  config.family = ModelFamily::kConformer;
  config.conformer = read_conformer_architecture(root.map("architecture", true));
  auto attention_map = root.map("attention", false);
  const auto attention = read_attention(attention_map);
  const auto& position = config.conformer.position();
  if (attention.backend == "linear" && (position == "rel_pos" || position == "rel_pos_wenet")) {
    attention_map.fail("backend",
                       "linear attention cannot add the relative-position bias of "
                       "position " +
                           position + "; use position abs_pos or none");
  }
  config.conformer.blocks()
      .attention_backend(attention.backend)
      .attention_options(attention.options)
      .head_gating(attention.head_gating);
  config.features = read_audio_features(root, config.conformer.input_dim());
  config.streaming =
      read_streaming(root.map("streaming", false), config.conformer, attention.head_gating);
  if (root.has("checkpoint")) {
    config.checkpoint_format = read_conformer_checkpoint_format(root.map("checkpoint", true));
  }
}

bool valid_name(const std::string& name) {
  for (const char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return !name.empty();
}

ModelConfig read_document(const Document& document, const std::vector<std::string>& overrides) {
  MapReader root(document, document.root(), "");
  ModelConfig config;
  config.source = document.source();
  config.overrides = overrides;
  config.name = root.string("name", std::nullopt);
  // Names are registry keys and CLI arguments.
  if (!valid_name(config.name)) {
    root.fail("name", "'" + config.name + "' is not a model name (letters, digits, _ - .)");
  }
  // One branch per family; the families differ in architecture and preprocessing.
  const std::string family = root.choice("family", std::nullopt, {"vit", "conformer"});
  if (family == "vit") read_vit(root, config);
  if (family == "conformer") read_conformer(root, config);
  config.labels = read_labels(root, document.source());
  if (config.family == ModelFamily::kConformer &&
      config.labels.source == LabelsConfig::Source::kImageNet) {
    root.fail("labels",
              "imagenet labels are for image classifiers; a Conformer's labels are its "
              "CTC units, one per line, in a file relative to this YAML");
  }
  root.finish();
  return config;
}

}  // namespace

const char* model_family_name(ModelFamily family) {
  switch (family) {
    case ModelFamily::kViT:
      return "vit";
    case ModelFamily::kConformer:
      return "conformer";
  }
  return "unknown";
}

ModelConfig parse_model_config(const std::string& yaml, const std::string& source,
                               const std::vector<std::string>& overrides) {
  Document document(yaml, source);
  for (const auto& item : overrides) document.apply_override(item);
  return read_document(document, overrides);
}

ModelConfig load_model_config(const std::string& path, const std::vector<std::string>& overrides) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    throw ConfigError(path + ": no such config file", path, "");
  }
  const auto size = fs::file_size(path, error);
  if (error || size > config_detail::kMaxDocumentBytes) {
    throw ConfigError(path + ": " + (error ? "cannot read the file size" : "file too large") +
                          " (a model config is at most " +
                          std::to_string(config_detail::kMaxDocumentBytes) + " bytes)",
                      path, "");
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw ConfigError(path + ": cannot read the file", path, "");
  return parse_model_config(text.str(), path, overrides);
}

}  // namespace attnzoo
