// NVIDIA NeMo's ASR models as NeMo saves them: a .nemo file (a tar, plain or gzipped, written by
// ModelPT.save_to: model_config.yaml, model_weights.ckpt and the tokenizer's files, their names
// prefixed with a random hex string), or the folder such a file was unpacked into. Nothing is
// unpacked: the weights and the SentencePiece model are read in place, named in the document as
// ARCHIVE#ENTRY (io/archive_entry.h). model_config.yaml's OmegaConf interpolations are resolved
// first (NeMo saves them resolved; a hand-edited file may not be). They give:
//   - the frontend: AudioToMelSpectrogramPreprocessor (preprocessor) as features kind nemo_mel,
//     without dither (NeMo applies none in eval mode); pad_to and pad_value only pad batches;
//   - the encoder: ConformerEncoder (FastConformer included) with rel_pos attention, full,
//     limited (att_context_size) or chunked for cache-aware streaming (chunked_limited), or
//     rel_pos_local_attn (Longformer's window, with its global tokens); subsampling dw_striding,
//     striding (x4, x8, causal or not) or vggnet (x4, x8); xscaling, tied or untied position
//     biases, BatchNorm or LayerNorm in the convolution module, centred or causal convolutions,
//     the blocks' biases or none (use_bias);
//   - the heads: the CTC head, ConvASRDecoder (decoder, or a hybrid model's aux_ctc.decoder),
//     whose blank is the last class; the transducer, RNNTDecoder and RNNTJoint (decoder, joint),
//     RNN-T or TDT (decoding.model_type, decoding.durations), as architecture.transducer;
//   - the tokens: the heads' vocabulary and "<blank>" after it, as text through the tokenizer's
//     SentencePiece model (tokenizer.type bpe) or as characters (the models without a
//     tokenizer, their space as "▁");
//   - decoding: by the transducer where the model has one (a hybrid's default head, as in
//     NeMo), greedy with decoding.greedy.max_symbols, or NeMo's beam search (strategy beam, and
//     the other beam strategies with it) with decoding.beam's beam_size, return_best_hypothesis
//     and score_norm; the CTC head greedily.
// A model attnzoo does not run is refused naming model_config.yaml's key and value: a target that
// is not a CTC, transducer or hybrid ASR model (TTS, speaker and language models), an encoder
// other than ConformerEncoder, chunked attention with right context (chunked_limited_with_rc),
// asymmetric local windows, multi-blank transducers and every other option attnzoo does not
// implement.
#include <attnzoo/configs/omegaconf_interpolation.h>
#include <attnzoo/configs/source_yaml.h>
#include <attnzoo/configs/sources.h>
#include <attnzoo/core/error.h>
#include <attnzoo/io/archive_entry.h>
#include <attnzoo/io/byte_source.h>
#include <attnzoo/io/gunzip.h>
#include <attnzoo/io/tar_archive.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>

namespace attnzoo {
namespace {

namespace fs = std::filesystem;

constexpr const char* kConfigEntry = "model_config.yaml";
constexpr const char* kWeightsEntry = "model_weights.ckpt";
// A model_config.yaml is a few kilobytes; its vocabulary can make it a megabyte.
constexpr uint64_t kMaxConfigBytes = 16u << 20;

bool is_file(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

std::string absolute_path(const fs::path& path) {
  return fs::absolute(path).lexically_normal().string();
}

// The model's files: inside a .nemo file (entries), or in the folder it was unpacked into.
class NemoFiles {
 public:
  explicit NemoFiles(const std::string& path) {
    std::error_code error;
    if (fs::is_directory(path, error)) {
      folder_ = absolute_path(path);
      return;
    }
    archive_ = absolute_path(path);
    const io::FileSource source(archive_);
    const io::TarArchive tar(source);
    for (const auto& entry : tar.entries()) entries_.insert(entry.name);
    if (const auto* config = tar.find(kConfigEntry)) {
      config_text_ = tar.read_string(*config, kMaxConfigBytes, kConfigEntry);
    }
  }

  bool has(const std::string& name) const {
    return archive_.empty() ? is_file(fs::path(folder_) / name) : entries_.count(name) > 0;
  }
  // The path by which attnzoo reads the file: ARCHIVE#ENTRY, or the folder's file.
  std::string path(const std::string& name) const {
    return archive_.empty() ? absolute_path(fs::path(folder_) / name)
                            : io::archive_entry_path(archive_, name);
  }
  // What messages call model_config.yaml.
  std::string config_name() const { return path(kConfigEntry); }
  std::string config_text() const {
    if (!archive_.empty()) return config_text_;
    return io::read_file_or_entry(path(kConfigEntry), kMaxConfigBytes, kConfigEntry);
  }
  const std::string& where() const { return archive_.empty() ? folder_ : archive_; }
  bool is_archive() const { return !archive_.empty(); }

 private:
  std::string archive_, folder_;
  std::set<std::string> entries_;
  std::string config_text_;
};

// model_config.yaml, parsed and with its interpolations resolved.
detail::SourceYaml read_config(const NemoFiles& files) {
  const auto name = files.config_name();
  if (!files.has(kConfigEntry)) {
    throw ConfigError(files.where() + ": no " + kConfigEntry + " (not a NeMo model)", name, "");
  }
  YAML::Node root;
  try {
    root = YAML::Load(files.config_text());
  } catch (const YAML::Exception& e) {
    throw ConfigError(name + ": not YAML: " + e.what(), name, "");
  }
  return detail::SourceYaml(name, detail::resolve_interpolations(root, name));
}

// A "nemo:<name>" path of the config (an artifact the .nemo file holds), or a plain path whose
// file name is looked for among the model's files.
std::string artifact(const detail::SourceYaml& c, const NemoFiles& files, const std::string& key) {
  auto value = c.text(key, "");
  if (value.rfind("nemo:", 0) == 0) value.erase(0, 5);
  const auto name = fs::path(value).filename().string();
  if (name.empty() || !files.has(name)) {
    c.fail(key, "'" + c.text(key, "") + "' is not among the model's files");
  }
  return files.path(name);
}

// The heads of a model attnzoo runs, by model_config.yaml's target (the class save_to recorded):
// CTC, transducer (RNN-T or TDT) or both (hybrid), over SentencePiece pieces or characters.
struct ModelKind {
  bool ctc = false;
  bool transducer = false;
  bool characters = false;
};

ModelKind model_kind(const detail::SourceYaml& c) {
  static const std::map<std::string, ModelKind> kTargets = {
      {"nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE", {true, false, false}},
      {"nemo.collections.asr.models.ctc_models.EncDecCTCModel", {true, false, true}},
      {"nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel", {false, true, false}},
      {"nemo.collections.asr.models.rnnt_models.EncDecRNNTModel", {false, true, true}},
      {"nemo.collections.asr.models.hybrid_rnnt_ctc_bpe_models.EncDecHybridRNNTCTCBPEModel",
       {true, true, false}},
      {"nemo.collections.asr.models.hybrid_rnnt_ctc_models.EncDecHybridRNNTCTCModel",
       {true, true, true}},
  };
  const auto target = c.text("target", "");
  const auto found = kTargets.find(target);
  if (found == kTargets.end()) {
    std::string known;
    for (const auto& [name, kind] : kTargets) {
      known += (known.empty() ? "" : ", ") + name.substr(name.rfind('.') + 1);
    }
    c.fail("target", "'" + target + "' is not a model attnzoo runs (it runs NeMo's " + known + ")");
  }
  return found->second;
}

YAML::Node features(const detail::SourceYaml& c, int64_t feat_in) {
  const std::string p = "preprocessor";
  c.require(p + "._target_", "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "attnzoo reads NeMo's log-mel preprocessor");
  c.only_keys(p, {"_target_",
                  "sample_rate",
                  "window_size",
                  "window_stride",
                  "window",
                  "normalize",
                  "n_fft",
                  "preemph",
                  "features",
                  "lowfreq",
                  "highfreq",
                  "log",
                  "log_zero_guard_type",
                  "log_zero_guard_value",
                  "dither",
                  "pad_to",
                  "frame_splicing",
                  "exact_pad",
                  "pad_value",
                  "mag_power",
                  "mel_norm",
                  "rng",
                  "nb_augmentation_prob",
                  "nb_max_freq",
                  "use_torchaudio",
                  "stft_exact_pad",
                  "stft_conv",
                  "n_window_size",
                  "n_window_stride"});
  YAML::Node out;
  out["kind"] = "nemo_mel";
  const auto rate =
      c.integer(p + ".sample_rate", c.integer("sample_rate", 16000, 1000, 384000), 1000, 384000);
  out["sample_rate"] = rate;
  const auto bins = c.integer(p + ".features", 64, 1, 4096);
  if (bins != feat_in) {
    c.fail(p + ".features",
           std::to_string(bins) + " bins, but encoder.feat_in is " + std::to_string(feat_in));
  }
  out["num_mel_bins"] = bins;
  // Window and hop in seconds, or in samples (n_window_size, n_window_stride), within what the
  // frontend takes (features.frame_length_ms, frame_shift_ms: up to 1 s, the hop no longer than
  // the window), so that the config written here is one the reader accepts.
  std::string window_key, hop_key;
  const auto milliseconds = [&](const char* seconds_key, const char* samples_key, double fallback,
                                std::string& key) {
    double ms;
    if (c.has(p + "." + samples_key)) {
      key = p + "." + samples_key;
      ms = 1000.0 * static_cast<double>(c.integer(key, 0, 1, 1 << 20)) / static_cast<double>(rate);
    } else {
      key = p + "." + seconds_key;
      const double seconds = c.number(key, fallback);
      if (!(seconds > 0.0)) c.fail(key, "must be > 0");
      ms = 1000.0 * seconds;
    }
    if (!(ms <= 1000.0)) c.fail(key, "must be at most 1 s (" + detail::number_text(ms) + " ms)");
    return ms;
  };
  const double window_ms = milliseconds("window_size", "n_window_size", 0.02, window_key);
  const double hop_ms = milliseconds("window_stride", "n_window_stride", 0.01, hop_key);
  if (hop_ms > window_ms) {
    c.fail(hop_key, "the hop (" + detail::number_text(hop_ms) + " ms) is longer than the window (" +
                        window_key + ", " + detail::number_text(window_ms) + " ms)");
  }
  out["frame_length_ms"] = detail::number_text(window_ms);
  out["frame_shift_ms"] = detail::number_text(hop_ms);
  static const std::map<std::string, std::string> kWindows = {{"hann", "hanning"},
                                                              {"hamming", "hamming"},
                                                              {"blackman", "blackman"},
                                                              {"bartlett", "bartlett"}};
  const auto window = c.text(p + ".window", "hann");
  if (!kWindows.count(window)) {
    c.fail(p + ".window", "'" + window + "' is not supported (hann, hamming, blackman, bartlett)");
  }
  out["window"] = kWindows.at(window);
  if (c.has(p + ".n_fft")) {
    const auto n_fft = c.integer(p + ".n_fft", 0, 1, 1 << 20);
    // NeMo's STFT needs the window inside n_fft; the window's samples as the frontend counts them.
    const auto window_samples = static_cast<int64_t>(static_cast<double>(rate) * 0.001 * window_ms);
    if (n_fft < window_samples) {
      c.fail(p + ".n_fft", std::to_string(n_fft) + " is shorter than the window of " +
                               std::to_string(window_samples) + " samples (window_size at " +
                               std::to_string(rate) + " Hz)");
    }
    out["n_fft"] = n_fft;
  }
  // A key written as null is NeMo's "none" (no pre-emphasis, no mel normalisation, the Nyquist
  // frequency); an absent key its default.
  const auto stated_null = [&](const char* key) {
    const YAML::Node section = c.at(p);
    const YAML::Node value = section[key];
    return value.IsDefined() && value.IsNull();
  };
  out["preemphasis"] =
      detail::number_text(stated_null("preemph") ? 0.0 : c.number(p + ".preemph", 0.97));
  out["low_freq"] = detail::number_text(c.number(p + ".lowfreq", 0.0));
  if (c.has(p + ".highfreq")) out["high_freq"] = detail::number_text(c.number(p + ".highfreq", 0));
  const auto mel_norm = c.text(p + ".mel_norm", "slaney");
  if (mel_norm != "slaney") {
    c.fail(p + ".mel_norm", "'" + mel_norm + "' is not supported (slaney, or null)");
  }
  out["mel_norm"] = stated_null("mel_norm") ? "none" : "slaney";
  out["mag_power"] = detail::number_text(c.number(p + ".mag_power", 2.0));
  out["log"] = c.boolean(p + ".log", true);
  const auto guard = c.text(p + ".log_zero_guard_type", "add");
  if (guard != "add" && guard != "clamp") {
    c.fail(p + ".log_zero_guard_type", "'" + guard + "' is not supported (add, clamp)");
  }
  out["log_guard"] = guard;
  // A number, or "tiny" / "eps" of float32 (NeMo's features are float32).
  const auto guard_value = c.text(p + ".log_zero_guard_value", "");
  if (guard_value == "tiny") {
    out["log_guard_value"] = detail::number_text(std::numeric_limits<float>::min());
  } else if (guard_value == "eps") {
    out["log_guard_value"] = detail::number_text(std::numeric_limits<float>::epsilon());
  } else {
    out["log_guard_value"] =
        detail::number_text(c.number(p + ".log_zero_guard_value", std::ldexp(1.0, -24)));
  }
  const auto normalize = c.text(p + ".normalize", "per_feature");
  if (normalize == "per_feature" || normalize == "all_features") {
    out["normalize"] = normalize;
  } else if (normalize == "NA" || normalize == "None" || normalize.empty() ||
             !c.has(p + ".normalize")) {
    out["normalize"] = "none";
  } else {
    c.fail(p + ".normalize",
           "'" + normalize + "' is not supported (per_feature, all_features, NA)");
  }
  const bool exact_pad = c.boolean(p + ".exact_pad", false);
  const auto hop_samples = static_cast<int64_t>(static_cast<double>(rate) * 0.001 * hop_ms);
  if (exact_pad && hop_samples % 2 != 0) {
    c.fail(p + ".exact_pad", "needs an even hop (NeMo refuses an odd one); " + hop_key + " gives " +
                                 std::to_string(hop_samples) + " samples");
  }
  out["exact_pad"] = exact_pad;
  c.require_number(p + ".frame_splicing", 1.0, "attnzoo does not splice frames");
  c.require_flag(p + ".stft_conv", false, "the convolutional STFT of old NeMo releases");
  return out;
}

// att_context_size [L, R] (or the list of a multi-lookahead model, whose first is the one NeMo
// runs) under att_context_style: regular limits every frame to L frames before and R after
// (architecture.attention_left/right); chunked_limited attends in chunks of R + 1 frames with
// L / (R + 1) chunks of history (streaming.chunk_size and num_left_chunks: NeMo's
// _create_masks, which cache-aware streaming reproduces chunk by chunk).
//
// rel_pos_local_attn (Longformer's sliding window with Transformer-XL's positions) attends the
// same band [L, R], which attnzoo computes the same way as the regular one: a strip of queries
// at a time over the keys in reach, linear in the length. NeMo adds the window's position scores
// at columns that line up with their keys only when L = R, so other windows are refused. Its
// global tokens (global_tokens frames, global_tokens_spacing apart, with projections of their own
// under global_attn_separate) are architecture.global_tokens; plain rel_pos ignores them, as NeMo
// does.
void attention_context(const detail::SourceYaml& c, YAML::Node& arch, YAML::Node* streaming,
                       bool local) {
  const std::string key = "encoder.att_context_size";
  const auto style = c.text("encoder.att_context_style", "regular");
  if (style != "regular" && style != "chunked_limited") {
    c.fail("encoder.att_context_style",
           "'" + style + "' is not supported (regular, chunked_limited)");
  }
  if (local && style != "regular") {
    c.fail("encoder.att_context_style",
           "'" + style + "' with rel_pos_local_attn is not supported (regular)");
  }
  if (local) {
    const auto tokens = c.integer("encoder.global_tokens", 0, 0, 1 << 20);
    if (tokens > 0) {
      arch["global_tokens"] = tokens;
      arch["global_tokens_spacing"] = c.integer("encoder.global_tokens_spacing", 1, 1, 1 << 20);
      arch["global_attention_separate"] = c.boolean("encoder.global_attn_separate", false);
    }
  }
  if (!c.has(key)) {
    if (local) c.fail(key, "rel_pos_local_attn needs a window [w, w]");
    return;
  }
  auto context = c.at(key);
  const bool nested = context.IsSequence() && context.size() > 0 && context[0].IsSequence();
  if (nested) context = context[0];
  const auto bound = [&](size_t i) -> int64_t {
    int64_t value = 0;
    if (context.IsSequence() && context.size() == 2 && context[i].IsScalar() &&
        YAML::convert<int64_t>::decode(context[i], value) && value >= -1 && value <= (1 << 20)) {
      return value;
    }
    c.fail(key, std::string("must be [left, right]") + (nested ? " (its first entry)" : "") +
                    ", each -1 (unlimited) or a number of frames");
  };
  const int64_t left = bound(0), right = bound(1);
  if (local && (left != right || left <= 0)) {
    c.fail(key,
           "rel_pos_local_attn needs a window [w, w] with w > 0 (NeMo's position scores "
           "line up with the keys only then), got [" +
               std::to_string(left) + ", " + std::to_string(right) + "]");
  }
  if (style == "regular" || right < 0) {
    if (left >= 0) arch["attention_left"] = left;
    if (style == "regular" && right >= 0) arch["attention_right"] = right;
    return;
  }
  const int64_t chunk = right + 1;
  if (left >= 0 && left % chunk != 0) {
    c.fail(key, "chunked_limited needs a left context divisible by the chunk (right + 1 = " +
                    std::to_string(chunk) + "), got " + std::to_string(left));
  }
  (*streaming)["chunk_size"] = chunk;
  (*streaming)["num_left_chunks"] = left < 0 ? -1 : left / chunk;
}

YAML::Node encoder_architecture(const detail::SourceYaml& c, int64_t* feat_in,
                                YAML::Node* streaming) {
  const std::string e = "encoder";
  const auto target = c.text(e + "._target_", "");
  if (target != "nemo.collections.asr.modules.ConformerEncoder" &&
      target != "nemo.collections.asr.modules.conformer_encoder.ConformerEncoder") {
    c.fail(e + "._target_", "'" + target + "' is not supported (ConformerEncoder)");
  }
  c.only_keys(
      e, {"_target_", "feat_in", "feat_out", "n_layers", "d_model", "subsampling",
          "subsampling_factor", "subsampling_conv_channels", "subsampling_conv_chunking_factor",
          "causal_downsampling", "reduction", "reduction_position", "reduction_factor",
          "ff_expansion_factor", "self_attention_model", "n_heads", "att_context_size",
          "att_context_probs", "att_chunk_context_size", "att_context_style", "xscaling",
          "untie_biases", "pos_emb_max_len", "conv_kernel_size", "conv_norm_type",
          "conv_context_size", "conv_context_style", "use_bias", "global_tokens",
          "global_tokens_spacing", "global_attn_separate", "use_pytorch_sdpa",
          "use_pytorch_sdpa_backends", "sync_max_audio_length",
          // training only
          "dropout", "dropout_pre_encoder", "dropout_emb", "dropout_att",
          "stochastic_depth_drop_prob", "stochastic_depth_mode", "stochastic_depth_start_layer"});
  YAML::Node arch;
  *feat_in = c.integer(e + ".feat_in", 80, 1, 4096);
  arch["input_dim"] = *feat_in;
  const auto d = c.integer(e + ".d_model", 256, 1, 65536);
  arch["encoder_dim"] = d;
  arch["num_layers"] = c.integer(e + ".n_layers", 1, 1, 1000);
  arch["num_heads"] = c.integer(e + ".n_heads", 4, 1, 1024);
  arch["ffn_dim"] = d * c.integer(e + ".ff_expansion_factor", 4, 1, 64);
  const auto kernel = c.integer(e + ".conv_kernel_size", 31, 1, 1024);
  if (kernel % 2 == 0) c.fail(e + ".conv_kernel_size", "must be odd (NeMo's centred kernel)");
  arch["depthwise_conv_kernel_size"] = kernel;
  const auto norm = c.text(e + ".conv_norm_type", "batch_norm");
  if (norm != "batch_norm" && norm != "layer_norm") {
    c.fail(e + ".conv_norm_type", "'" + norm + "' is not supported (batch_norm, layer_norm)");
  }
  arch["conv_norm"] = norm;
  // null: centred ([(k − 1)/2, (k − 1)/2]); "causal" or [k − 1, 0]: causal (the cache-aware
  // streaming models').
  if (c.has(e + ".conv_context_size")) {
    const auto context = c.at(e + ".conv_context_size");
    const auto half = std::to_string((kernel - 1) / 2);
    const auto list =
        context.IsSequence() ? c.text_list(e + ".conv_context_size") : std::vector<std::string>{};
    const bool causal =
        (context.IsScalar() && context.Scalar() == "causal") ||
        (list.size() == 2 && list[0] == std::to_string(kernel - 1) && list[1] == "0");
    const bool centred = list.size() == 2 && list[0] == half && list[1] == half;
    if (!causal && !centred) {
      c.fail(e + ".conv_context_size", "only the centred kernel [" + half + ", " + half +
                                           "] and causal ([" + std::to_string(kernel - 1) +
                                           ", 0]) are supported");
    }
    arch["causal_conv"] = causal;
    if (causal) arch["causal_padding"] = "depthwise_input";  // CausalConv1D's zeros
  }
  c.require(e + ".conv_context_style", "regular", "attnzoo's convolution module");
  const auto subsampling = c.text(e + ".subsampling", "striding");
  const auto factor = c.integer(e + ".subsampling_factor", 4, 1, 64);
  const std::string kind = subsampling + std::to_string(factor);
  if ((subsampling != "dw_striding" && subsampling != "striding" && subsampling != "vggnet") ||
      (factor != 4 && factor != 8)) {
    c.fail(e + ".subsampling",
           "'" + subsampling + "' with subsampling_factor " + std::to_string(factor) +
               " is not supported (dw_striding, striding or vggnet, factor 4 or 8)");
  }
  // causal_downsampling: CausalConv2D's padding (the cache-aware streaming models); NeMo's vggnet
  // has no causal form.
  const bool causal_downsampling = c.boolean(e + ".causal_downsampling", false);
  if (causal_downsampling && subsampling == "vggnet") {
    c.fail(e + ".causal_downsampling", "vggnet has no causal form (dw_striding, striding)");
  }
  arch["subsampling"] = (causal_downsampling ? "causal_" : "") + kind;
  const auto channels = c.integer(e + ".subsampling_conv_channels", -1, -1, 65536);
  arch["subsampling_channels"] = channels <= 0 ? d : channels;
  if (c.has(e + ".reduction")) c.fail(e + ".reduction", "time reduction inside the encoder");
  const auto attention = c.text(e + ".self_attention_model", "rel_pos");
  if (attention != "rel_pos" && attention != "rel_pos_local_attn") {
    c.fail(e + ".self_attention_model",
           "'" + attention + "' is not supported (rel_pos, rel_pos_local_attn)");
  }
  arch["position"] = "rel_pos";
  attention_context(c, arch, streaming, attention == "rel_pos_local_attn");
  const auto feat_out = c.integer(e + ".feat_out", -1, -1, 65536);
  if (feat_out > 0 && feat_out != d) c.fail(e + ".feat_out", "an output projection");
  arch["xscaling"] = c.boolean(e + ".xscaling", true);
  // NeMo's default; the largest models (Parakeet 0.6B) have no biases in their blocks.
  arch["bias"] = c.boolean(e + ".use_bias", true);
  arch["final_norm"] = false;
  return arch;
}

// RNNTDecoder and RNNTJoint as architecture.transducer; the joint's vocabulary (without its
// blank) into `vocabulary`, the search's keys of the decoding section into `search`.
YAML::Node transducer_architecture(const detail::SourceYaml& c, int64_t d_model,
                                   std::vector<std::string>* vocabulary, YAML::Node* search) {
  c.require("decoder._target_", "nemo.collections.asr.modules.RNNTDecoder",
            "attnzoo reads NeMo's RNNTDecoder");
  c.only_keys("decoder", {"_target_", "prednet", "vocab_size", "normalization_mode",
                          "random_state_sampling", "blank_as_pad"});
  c.only_keys("decoder.prednet",
              {"pred_hidden", "pred_rnn_layers", "t_max", "dropout", "forget_gate_bias",
               "weights_init_scale", "hidden_hidden_bias_scale", "rnn_hidden_size"});
  c.require_flag("decoder.blank_as_pad", true, "the blank is the prediction network's padding");
  if (c.has("decoder.normalization_mode")) {
    c.fail("decoder.normalization_mode", "a normalised prediction network is not supported");
  }
  if (c.has("decoder.prednet.rnn_hidden_size") &&
      c.integer("decoder.prednet.rnn_hidden_size", -1, -1, 1 << 20) > 0) {
    c.fail("decoder.prednet.rnn_hidden_size", "an LSTM projection is not supported");
  }
  YAML::Node t;
  const auto pred_hidden = c.integer("decoder.prednet.pred_hidden", 640, 1, 65536);
  t["pred_hidden"] = pred_hidden;
  t["pred_layers"] = c.integer("decoder.prednet.pred_rnn_layers", 1, 1, 64);
  c.require("joint._target_", "nemo.collections.asr.modules.RNNTJoint",
            "attnzoo reads NeMo's RNNTJoint");
  c.only_keys("joint", {"_target_", "jointnet", "num_classes", "vocabulary", "num_extra_outputs",
                        "log_softmax", "preserve_memory", "fuse_loss_wer", "fused_batch_size",
                        "experimental_fuse_loss_wer"});
  c.only_keys("joint.jointnet",
              {"joint_hidden", "activation", "dropout", "encoder_hidden", "pred_hidden"});
  t["joint_hidden"] = c.integer("joint.jointnet.joint_hidden", 640, 1, 65536);
  const auto activation = c.text("joint.jointnet.activation", "relu");
  if (activation != "relu" && activation != "sigmoid" && activation != "tanh") {
    c.fail("joint.jointnet.activation",
           "'" + activation + "' is not supported (relu, sigmoid, tanh)");
  }
  t["activation"] = activation;
  if (c.integer("joint.jointnet.encoder_hidden", d_model, 1, 65536) != d_model) {
    c.fail("joint.jointnet.encoder_hidden",
           "must equal encoder.d_model " + std::to_string(d_model));
  }
  if (c.integer("joint.jointnet.pred_hidden", pred_hidden, 1, 65536) != pred_hidden) {
    c.fail("joint.jointnet.pred_hidden", "must equal decoder.prednet.pred_hidden");
  }
  *vocabulary = c.text_list("joint.vocabulary");
  if (vocabulary->empty()) c.fail("joint.vocabulary", "is empty");
  const auto classes = c.integer("joint.num_classes", -1, -1, 1 << 24);
  if (classes > 0 && classes != static_cast<int64_t>(vocabulary->size())) {
    c.fail("joint.num_classes", std::to_string(classes) + " classes but " +
                                    std::to_string(vocabulary->size()) + " in vocabulary");
  }
  if (c.has("decoder.vocab_size") &&
      c.integer("decoder.vocab_size", 0, 0, 1 << 24) != static_cast<int64_t>(vocabulary->size())) {
    c.fail("decoder.vocab_size", "differs from the joint's vocabulary");
  }
  const auto model_type = c.text("decoding.model_type", "rnnt");
  const auto extra = c.integer("joint.num_extra_outputs", 0, 0, 1024);
  if (model_type == "tdt") {
    const auto durations = c.text_list("decoding.durations");
    if (durations.size() < 2 || static_cast<int64_t>(durations.size()) != extra) {
      c.fail("decoding.durations",
             "a TDT model needs its durations, as many as "
             "joint.num_extra_outputs (" +
                 std::to_string(extra) + ")");
    }
    std::vector<int64_t> values;
    for (const auto& text : durations) {
      char* end = nullptr;
      const long long value = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || value < 0 || value > 1000) {
        c.fail("decoding.durations", "'" + text + "' is not a duration in [0, 1000] frames");
      }
      values.push_back(value);
    }
    t["durations"] = detail::flow_list(values);
  } else if (model_type != "rnnt") {
    c.fail("decoding.model_type", "'" + model_type + "' is not supported (rnnt, tdt)");
  } else if (extra != 0) {
    c.fail("joint.num_extra_outputs",
           "extra outputs of an RNN-T joint (multi-blank) are not "
           "supported");
  }
  if (c.has("decoding.big_blank_durations")) {
    c.fail("decoding.big_blank_durations", "multi-blank transducers are not supported");
  }
  (*search)["max_symbols"] = c.integer("decoding.greedy.max_symbols", 10, 1, 1000);
  // NeMo's beam strategies: `beam` is NeMo's default algorithm, which attnzoo runs; the others
  // (tsd, alsd, maes and the batched malsd_batch, maes_batch) decode with it too.
  const auto strategy = c.text("decoding.strategy", "greedy_batch");
  if (strategy == "beam" || strategy == "tsd" || strategy == "alsd" || strategy == "maes" ||
      strategy == "malsd_batch" || strategy == "maes_batch") {
    const auto beam_size = c.integer("decoding.beam.beam_size", 4, 1, 10000);
    (*search)["transducer_search"] = "beam";
    (*search)["beam_size"] = beam_size;
    (*search)["nbest"] =
        c.boolean("decoding.beam.return_best_hypothesis", true) ? int64_t{1} : beam_size;
    (*search)["score_norm"] = c.boolean("decoding.beam.score_norm", true);
  } else if (strategy != "greedy" && strategy != "greedy_batch") {
    c.fail("decoding.strategy",
           "'" + strategy +
               "' is not a transducer strategy attnzoo runs (greedy, "
               "greedy_batch, beam, tsd, alsd, maes, malsd_batch, maes_batch)");
  }
  return t;
}

// The CTC head's vocabulary (without its blank), checked against encoder and config.
std::vector<std::string> ctc_vocabulary(const detail::SourceYaml& c, const std::string& head,
                                        int64_t d_model) {
  c.require(head + "._target_", "nemo.collections.asr.modules.ConvASRDecoder",
            "attnzoo reads NeMo's CTC head");
  c.only_keys(head, {"_target_", "feat_in", "num_classes", "vocabulary", "init_mode", "add_blank"});
  c.require_flag(head + ".add_blank", true, "NeMo's CTC heads add the blank last");
  if (c.integer(head + ".feat_in", d_model, 1, 65536) != d_model) {
    c.fail(head + ".feat_in", "must equal encoder.d_model " + std::to_string(d_model));
  }
  const auto vocabulary = c.text_list(head + ".vocabulary");
  if (vocabulary.empty()) c.fail(head + ".vocabulary", "is empty");
  const auto classes = c.integer(head + ".num_classes", -1, -1, 1 << 24);
  if (classes > 0 && classes != static_cast<int64_t>(vocabulary.size())) {
    c.fail(head + ".num_classes", std::to_string(classes) + " classes but " +
                                      std::to_string(vocabulary.size()) + " in vocabulary");
  }
  return vocabulary;
}

constexpr uint64_t kMaxVocabularyBytes = 16 << 20;

// A wpe model's tokens in id order: its vocab.txt, a token per line (line i is id i, as BERT's
// tokenizer reads it). NeMo writes the heads' vocabulary in the order of the tokenizer's dict,
// which need not be the ids'; it must hold the same tokens.
std::vector<std::string> wordpiece_vocabulary(const detail::SourceYaml& c, const NemoFiles& files,
                                              const std::string& vocabulary_key,
                                              const std::vector<std::string>& heads) {
  const std::string key = "tokenizer.vocab_path";
  const auto path = artifact(c, files, key);
  const auto text = io::read_file_or_entry(path, kMaxVocabularyBytes, "vocab.txt");
  std::vector<std::string> tokens;
  for (size_t at = 0; at < text.size();) {
    const auto end = text.find('\n', at);
    tokens.push_back(text.substr(at, end == std::string::npos ? std::string::npos : end - at));
    at = end == std::string::npos ? text.size() : end + 1;
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].empty() || tokens[i].find_first_of(" \t\r\n") != std::string::npos) {
      c.fail(key, path + " line " + std::to_string(i + 1) + " is empty or holds white space");
    }
  }
  if (std::multiset<std::string>(tokens.begin(), tokens.end()) !=
      std::multiset<std::string>(heads.begin(), heads.end())) {
    c.fail(vocabulary_key, "does not hold the " + std::to_string(tokens.size()) +
                               " tokens of tokenizer.vocab_path (" + std::to_string(heads.size()) +
                               " tokens)");
  }
  return tokens;
}

YAML::Node decoding(const detail::SourceYaml& c, const NemoFiles& files, ModelKind kind,
                    const std::string& vocabulary_key, std::vector<std::string> vocabulary) {
  YAML::Node out;
  if (kind.characters) {
    for (size_t i = 0; i < vocabulary.size(); ++i) {
      auto& token = vocabulary[i];
      if (token == " ") token = "\u2581";
      if (token.empty() || token.find_first_of(" \t\r\n") != std::string::npos) {
        c.fail(vocabulary_key, "token " + std::to_string(i) + " is empty or holds white space");
      }
    }
    out["text"] = "characters";
  } else {
    const auto type = c.text("tokenizer.type", "");
    if (type == "wpe") {
      out["text"] = "wordpiece";
      vocabulary = wordpiece_vocabulary(c, files, vocabulary_key, vocabulary);
    } else if (type == "bpe") {
      out["text"] = "sentencepiece";
      out["sentencepiece_model"] = artifact(c, files, "tokenizer.model_path");
    } else {
      c.fail("tokenizer.type", "'" + type +
                                   "' is not supported (bpe: a SentencePiece model, wpe: BERT's "
                                   "WordPiece)");
    }
  }
  for (const auto& token : vocabulary) {
    if (token == "<blank>") c.fail(vocabulary_key, "holds '<blank>', NeMo's added class");
  }
  vocabulary.push_back("<blank>");
  YAML::Node tokens(YAML::NodeType::Sequence);
  for (const auto& token : vocabulary) tokens.push_back(token);
  tokens.SetStyle(YAML::EmitterStyle::Flow);
  out["tokens"] = tokens;
  out["search"] = "greedy";
  return out;
}

class NemoSource final : public ModelSource {
 public:
  const char* name() const override { return "nemo"; }
  const char* config_name() const override { return kConfigEntry; }

  // A tar (plain or gzipped) holding model_config.yaml, or a folder holding it beside
  // model_weights.ckpt.
  bool detect(const std::string& path) const override {
    std::error_code error;
    if (fs::is_directory(path, error)) {
      return is_file(fs::path(path) / kConfigEntry) && is_file(fs::path(path) / kWeightsEntry);
    }
    if (!is_file(path)) return false;
    try {
      const io::FileSource source(path);
      if (!io::TarArchive::is_tar(source) && !io::is_gzip(source)) return false;
      const io::TarArchive tar(source);
      return tar.find(kConfigEntry) != nullptr;
    } catch (const CheckpointError&) {
      return false;
    }
  }

  std::string document(const std::string& path) const override {
    const NemoFiles files(path);
    const auto c = read_config(files);
    const auto kind = model_kind(c);
    YAML::Node doc;
    doc["name"] =
        detail::source_model_name(files.is_archive() ? fs::path(path).stem().string() : path);
    doc["family"] = "conformer";
    int64_t feat_in = 0;
    YAML::Node streaming;
    auto arch = encoder_architecture(c, &feat_in, &streaming);
    const auto d_model = arch["encoder_dim"].as<int64_t>();
    // The tokens: the CTC head's vocabulary, the same as the joint's in a hybrid.
    std::vector<std::string> vocabulary;
    std::string vocabulary_key;
    YAML::Node search;
    if (kind.transducer) {
      arch["transducer"] = transducer_architecture(c, d_model, &vocabulary, &search);
      vocabulary_key = "joint.vocabulary";
    }
    if (kind.ctc) {
      const std::string head = kind.transducer ? "aux_ctc.decoder" : "decoder";
      auto ctc_tokens = ctc_vocabulary(c, head, d_model);
      if (kind.transducer && ctc_tokens != vocabulary) {
        c.fail(head + ".vocabulary", "differs from joint.vocabulary");
      }
      vocabulary = std::move(ctc_tokens);
      vocabulary_key = head + ".vocabulary";
    } else {
      arch["ctc_head"] = false;
    }
    arch["vocab_size"] = static_cast<int64_t>(vocabulary.size()) + 1;
    doc["architecture"] = arch;
    doc["features"] = features(c, feat_in);
    if (streaming.size() > 0) doc["streaming"] = streaming;
    auto decoding_section = decoding(c, files, kind, vocabulary_key, std::move(vocabulary));
    if (kind.transducer) {
      decoding_section["head"] = "transducer";
      for (const auto& key : search) decoding_section[key.first] = key.second;
    }
    doc["decoding"] = decoding_section;
    if (!files.has(kWeightsEntry)) {
      throw ConfigError(files.where() + ": no " + kWeightsEntry + " (the model's weights)",
                        files.where(), "");
    }
    YAML::Node checkpoint;
    checkpoint["format"] = "nemo";
    checkpoint["file"] = files.path(kWeightsEntry);
    doc["checkpoint"] = checkpoint;
    std::vector<std::string> header = {
        "Read from " + files.where() + ":",
        std::string(files.is_archive() ? "a NeMo .nemo file" : "an unpacked NeMo .nemo folder") +
            " (" + c.text("target", "") + ").",
    };
    if (kind.transducer) {
      header.push_back(
          "Decoded greedily by its transducer" +
          std::string(kind.ctc ? " (decoding.head: ctc decodes with its CTC head)." : "."));
    }
    return detail::emit_document(doc, header);
  }
};

}  // namespace

std::unique_ptr<ModelSource> make_nemo_source() { return std::make_unique<NemoSource>(); }

}  // namespace attnzoo
