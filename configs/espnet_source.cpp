// ESPnet2 ASR experiment folders, as ESPnet's training leaves them (exp/asr_train_*/: config.yaml,
// which ESPnet writes with every option and the token list inline, and the averaged model
// valid.acc.ave.pth), and espnet_model_zoo's downloads (a zip, or its unpacked folder: meta.yaml
// naming the config and the model file, the recipe's exp/ and data/ trees beside it; a zip is
// unpacked once into attnzoo's cache folder, $XDG_CACHE_HOME/attnzoo/espnet/). They give:
//   - the frontend: ESPnet's DefaultFrontend (frontend_conf) as features kind stft_log_mel, or no
//     features section for a model trained on features (input_size);
//   - the encoder: ESPnet's ConformerEncoder (encoder_conf; rel_pos_type latest), its CTC head
//     (the token list's size) and GlobalMVN (normalize: global_mvn, its normalize_conf.stats_file
//     as the model's cmvn_file, replaced by the checkpoint's normalize.* buffers as ESPnet loads
//     them);
//   - the token table (token_list, inline or a file) and its text: token_type char (<space> is a
//     space), word, or bpe (bpemodel's SentencePiece model);
//   - decoding: CTC prefix beam search over every token with beam 20, which is what ESPnet's
//     Speech2Text does with ctc_weight 1.0 (its label-synchronous search finds the same best
//     hypothesis and score). ESPnet's attention decoder, where the model has one, is not loaded:
//     attnzoo does not run ESPnet's joint CTC/attention search.
// Paths in config.yaml are the recipe's (exp/asr_stats_*/train/feats_stats.npz): each is looked
// for from the model's root (meta.yaml's folder), from the config's folder and its parents, and by
// its file name beside config.yaml. Every key of encoder_conf and frontend_conf is honoured,
// known to matter for training only, or refused naming the file, the key and the value; so are
// the choices of encoder, frontend, normalize, model and token_type.
#include <attnzoo/configs/source_yaml.h>
#include <attnzoo/configs/sources.h>
#include <attnzoo/io/byte_source.h>
#include <attnzoo/io/zip_archive.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

namespace attnzoo {
namespace {

namespace fs = std::filesystem;

// Where a model's files are: its config, its weights, and the folders recipe paths start from.
struct EspnetFolder {
  fs::path root;    // meta.yaml's folder, else the config's
  fs::path config;  // config.yaml
  std::string weights;
};

std::string absolute_path(const fs::path& path) {
  return fs::absolute(path).lexically_normal().string();
}

bool is_file(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

// A recipe-relative path of config.yaml as a file of this folder; std::nullopt when none of the
// places it could be holds it.
std::optional<std::string> recipe_file(const EspnetFolder& folder, const std::string& written) {
  if (written.empty()) return std::nullopt;
  const fs::path path(written);
  std::vector<fs::path> candidates;
  if (path.is_absolute()) candidates.push_back(path);
  candidates.push_back(folder.root / path);
  for (auto dir = folder.config.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    candidates.push_back(dir / path);
    if (dir == dir.root_path() || candidates.size() > 8) break;
  }
  candidates.push_back(folder.config.parent_path() / path.filename());
  for (const auto& candidate : candidates) {
    if (is_file(candidate)) return absolute_path(candidate);
  }
  return std::nullopt;
}

// The folder attnzoo unpacks downloads into: $XDG_CACHE_HOME/attnzoo, else ~/.cache/attnzoo.
fs::path cache_folder() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return fs::path(xdg) / "attnzoo";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return fs::path(home) / ".cache" / "attnzoo";
  }
  return fs::temp_directory_path() / "attnzoo";
}

// A model file is smaller; an entry claiming more is refused before memory is taken for it.
constexpr uint64_t kMaxUnpackedEntry = uint64_t{4} << 30;

bool is_zoo_archive(const std::string& path) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) return false;
  try {
    const io::FileSource source(path);
    if (!io::ZipArchive::is_zip(source)) return false;
    return io::ZipArchive(source).find("meta.yaml") != nullptr;
  } catch (const Error&) {
    return false;
  }
}

// An espnet_model_zoo archive (a zip with meta.yaml) unpacked once into the cache, in a folder
// named by the archive's name, size and time; the folder appears whole or not at all (unpacked
// beside it, then renamed). Entries that would land outside it are refused naming the archive.
std::string unpacked(const std::string& archive) {
  const io::FileSource source(archive);
  const io::ZipArchive zip(source);
  std::error_code error;
  const auto time = fs::last_write_time(archive, error).time_since_epoch().count();
  const auto key = std::hash<std::string>{}(
      absolute_path(archive) + "|" + std::to_string(source.size()) + "|" + std::to_string(time));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx", key);
  const auto target = cache_folder() / "espnet" / (fs::path(archive).stem().string() + "-" + hex);
  if (is_file(target / ".attnzoo-unpacked")) return target.string();
  const auto scratch = fs::path(target.string() + ".partial-" + std::to_string(::getpid()));
  fs::remove_all(scratch, error);
  fs::create_directories(scratch);
  std::vector<char> bytes;
  for (const auto& entry : zip.entries()) {
    const fs::path name = fs::path(entry.name).lexically_normal();
    if (entry.name.empty() || name.is_absolute() || name.begin() == name.end() ||
        *name.begin() == "..") {
      fs::remove_all(scratch, error);
      throw ConfigError(archive + ": entry '" + entry.name.substr(0, 200) +
                            "' would be written outside the archive's folder",
                        archive, "");
    }
    if (entry.name.back() == '/') {
      fs::create_directories(scratch / name);
      continue;
    }
    if (entry.size > kMaxUnpackedEntry) {
      fs::remove_all(scratch, error);
      throw ConfigError(archive + ": entry '" + entry.name.substr(0, 200) + "' claims " +
                            std::to_string(entry.size) + " bytes (at most 4 GiB are unpacked)",
                        archive, "");
    }
    fs::create_directories((scratch / name).parent_path());
    bytes.resize(entry.size);
    zip.read(entry, bytes.data());
    std::ofstream out(scratch / name, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      fs::remove_all(scratch, error);
      throw ConfigError(archive + ": cannot write " + (scratch / name).string(), archive, "");
    }
  }
  std::ofstream(scratch / ".attnzoo-unpacked") << archive << "\n";
  fs::rename(scratch, target, error);
  if (error) {  // another process unpacked it first
    fs::remove_all(scratch, error);
    if (!is_file(target / ".attnzoo-unpacked")) {
      throw ConfigError(archive + ": cannot unpack into " + target.string(), archive, "");
    }
  }
  return target.string();
}

EspnetFolder locate(const std::string& path) {
  const fs::path dir(path);
  EspnetFolder folder;
  folder.root = dir;
  if (is_file(dir / "meta.yaml")) {
    const detail::SourceYaml meta((dir / "meta.yaml").string(), "espnet_model_zoo meta.yaml");
    const auto config = meta.text("yaml_files.asr_train_config", "");
    const auto weights = meta.text("files.asr_model_file", "");
    if (config.empty() || weights.empty()) {
      meta.fail(config.empty() ? "yaml_files.asr_train_config" : "files.asr_model_file",
                "missing: attnzoo reads ESPnet's ASR models");
    }
    // The unpacked archive's paths are relative to meta.yaml's folder (or made absolute).
    for (const auto& [key, value] : {std::pair{"yaml_files.asr_train_config", config},
                                     std::pair{"files.asr_model_file", weights}}) {
      const fs::path file = fs::path(value).is_absolute() ? fs::path(value) : dir / value;
      if (!is_file(file)) meta.fail(key, "'" + file.string() + "' is not a file");
    }
    folder.config = fs::path(config).is_absolute() ? fs::path(config) : dir / config;
    folder.weights =
        absolute_path(fs::path(weights).is_absolute() ? fs::path(weights) : dir / weights);
    return folder;
  }
  folder.config = dir / "config.yaml";
  // The averaged model ESPnet's recipes decode with, else the only *.pth (checkpoint.pth, the
  // training state, is not a model).
  folder.weights = detail::training_checkpoint(
      path,
      {"valid.acc.ave.pth", "valid.acc.best.pth", "valid.loss.ave.pth", "valid.loss.best.pth"},
      ".pth", {"checkpoint.pth"});
  return folder;
}

// ESPnet's fs: an integer, or humanfriendly's "16k" (k = 1000).
int64_t sample_rate(const detail::SourceYaml& c, const std::string& key) {
  const auto text = c.text(key, "16000");
  std::string digits = text;
  int64_t scale = 1;
  if (!digits.empty() && (digits.back() == 'k' || digits.back() == 'K')) {
    digits.pop_back();
    scale = 1000;
  }
  if (digits.empty() || digits.size() > 7 ||
      !std::all_of(digits.begin(), digits.end(), [](char ch) { return std::isdigit(ch); })) {
    c.fail(key, "'" + text + "' is not a sample rate attnzoo reads (16000, 16k)");
  }
  const int64_t rate = std::stoll(digits) * scale;
  if (rate < 1000 || rate > 384000) c.fail(key, "'" + text + "' is outside 1000 to 384000 Hz");
  return rate;
}

// A length in samples as frame milliseconds that the frontend truncates back to the same count.
std::string samples_as_ms(int64_t samples, int64_t rate) {
  double ms = 1000.0 * double(samples) / double(rate);
  if (static_cast<int64_t>(double(rate) * 0.001 * ms) != samples) {
    ms = 1000.0 * (double(samples) + 1e-6) / double(rate);
  }
  return detail::number_text(ms);
}

// frontend: default (Stft + LogMel) as stft_log_mel features; the input dimension.
YAML::Node frontend_features(const detail::SourceYaml& c, int64_t& input_dim) {
  const std::string f = "frontend_conf";
  c.only_keys(f, {"fs", "n_fft", "win_length", "hop_length", "window", "center", "normalized",
                  "onesided", "n_mels", "fmin", "fmax", "htk", "frontend_conf", "apply_stft"});
  c.only_keys(f + ".frontend_conf",
              {"use_wpe", "use_beamformer", "wtype", "wlayers", "wunits", "wprojs", "wdropout_rate",
               "taps", "delay", "use_dnn_mask_for_wpe", "btype", "blayers", "bunits", "bprojs",
               "badim", "ref_channel", "bnmask", "bdropout_rate"});
  const std::string why = "attnzoo's stft_log_mel features have this fixed";
  c.require_flag(f + ".frontend_conf.use_wpe", false, why);
  c.require_flag(f + ".frontend_conf.use_beamformer", false, why);
  c.require(f + ".window", "hann", why);
  c.require_flag(f + ".center", true, why);
  c.require_flag(f + ".normalized", false, why);
  c.require_flag(f + ".onesided", true, why);
  c.require_flag(f + ".htk", false, why);
  c.require_flag(f + ".apply_stft", true, why);
  YAML::Node out;
  out["kind"] = "stft_log_mel";
  const int64_t rate = sample_rate(c, f + ".fs");
  const int64_t n_fft = c.integer(f + ".n_fft", 512, 2, 1 << 20);
  const int64_t win =
      c.has(f + ".win_length") ? c.integer(f + ".win_length", n_fft, 2, n_fft) : n_fft;
  const int64_t hop = c.integer(f + ".hop_length", 128, 1, win);
  input_dim = c.integer(f + ".n_mels", 80, 1, 4096);
  out["sample_rate"] = rate;
  out["num_mel_bins"] = input_dim;
  out["frame_length_ms"] = samples_as_ms(win, rate);
  out["frame_shift_ms"] = samples_as_ms(hop, rate);
  out["n_fft"] = n_fft;
  out["low_freq"] = detail::number_text(c.number(f + ".fmin", 0.0));
  out["high_freq"] = detail::number_text(c.number(f + ".fmax", 0.0));
  return out;
}

YAML::Node encoder_architecture(const detail::SourceYaml& c, int64_t input_dim) {
  c.require("encoder", "conformer", "attnzoo reads ESPnet's conformer encoder");
  const std::string e = "encoder_conf";
  c.only_keys(
      e, {"output_size", "attention_heads", "linear_units", "num_blocks", "input_layer",
          "normalize_before", "concat_after", "positionwise_layer_type",
          "positionwise_conv_kernel_size", "macaron_style", "rel_pos_type", "pos_enc_layer_type",
          "selfattention_layer_type", "activation_type", "use_cnn_module", "zero_triu",
          "cnn_module_kernel", "padding_idx", "interctc_layer_idx", "interctc_use_conditioning",
          "ctc_trim", "max_pos_emb_len", "qk_norm", "use_flash_attn",
          // training only
          "dropout_rate", "positional_dropout_rate", "attention_dropout_rate",
          "stochastic_depth_rate", "layer_drop_rate"});
  YAML::Node arch;
  arch["input_dim"] = input_dim;
  arch["encoder_dim"] = c.integer(e + ".output_size", 256, 1, 65536);
  arch["num_layers"] = c.integer(e + ".num_blocks", 6, 1, 1000);
  arch["num_heads"] = c.integer(e + ".attention_heads", 4, 1, 1024);
  arch["ffn_dim"] = c.integer(e + ".linear_units", 2048, 1, 1 << 20);
  arch["depthwise_conv_kernel_size"] = c.integer(e + ".cnn_module_kernel", 31, 1, 1024);
  static const std::map<std::string, std::string> kSubsampling = {
      {"conv2d", "conv2d4"}, {"conv2d6", "conv2d6"}, {"conv2d8", "conv2d8"}};
  const auto input_layer = c.text(e + ".input_layer", "conv2d");
  if (!kSubsampling.count(input_layer)) {
    c.fail(e + ".input_layer", "'" + input_layer + "' is not supported (conv2d, conv2d6, conv2d8)");
  }
  arch["subsampling"] = kSubsampling.at(input_layer);
  const std::string structure = "attnzoo's Conformer blocks have this fixed";
  // ESPnet's defaults differ from attnzoo's here: macaron_style false and rel_pos_type legacy
  // when absent, both refused.
  if (!c.boolean(e + ".macaron_style", false)) {
    c.fail(e + ".macaron_style", "'false' (ESPnet's default) is not supported: " + structure);
  }
  if (c.text(e + ".rel_pos_type", "legacy") != "latest") {
    c.fail(e + ".rel_pos_type", "'" + c.text(e + ".rel_pos_type", "legacy") +
                                    "' (ESPnet's default) is not supported: attnzoo's rel_pos is "
                                    "ESPnet's latest");
  }
  c.require(e + ".pos_enc_layer_type", "rel_pos", "attnzoo reads ESPnet's relative positions");
  c.require(e + ".selfattention_layer_type", "rel_selfattn",
            "attnzoo reads ESPnet's relative positions");
  arch["position"] = "rel_pos";
  c.require_flag(e + ".normalize_before", true, structure);
  c.require_flag(e + ".concat_after", false, structure);
  c.require(e + ".positionwise_layer_type", "linear", structure);
  c.require(e + ".activation_type", "swish", structure);
  c.require_flag(e + ".use_cnn_module", true, structure);
  c.require_flag(e + ".zero_triu", false, structure);
  c.require_flag(e + ".qk_norm", false, structure);
  if (!c.text_list(e + ".interctc_layer_idx").empty()) {
    c.fail(e + ".interctc_layer_idx", "intermediate CTC is not supported");
  }
  c.require_flag(e + ".interctc_use_conditioning", false, "intermediate CTC is not supported");
  c.require_flag(e + ".ctc_trim", false, "intermediate CTC is not supported");
  arch["conv_norm"] = "batch_norm";
  arch["norm_eps"] = "1.0e-12";  // ESPnet's LayerNorm
  arch["final_norm"] = true;
  return arch;
}

class EspnetSource final : public ModelSource {
 public:
  const char* name() const override { return "espnet"; }
  const char* config_name() const override { return "config.yaml"; }

  // An espnet_model_zoo download, as its zip or unpacked (meta.yaml), or a folder whose
  // config.yaml has ESPnet's encoder_conf and token_list.
  bool detect(const std::string& path) const override {
    std::error_code error;
    if (!fs::is_directory(path, error)) return is_zoo_archive(path);
    const fs::path dir(path);
    if (is_file(dir / "meta.yaml")) {
      std::ifstream in(dir / "meta.yaml");
      std::string line;
      for (int n = 0; n < 1000 && std::getline(in, line);) {
        if (line.find("asr_train_config") != std::string::npos) return true;
        ++n;
      }
    }
    if (!is_file(dir / "config.yaml")) return false;
    std::ifstream in(dir / "config.yaml");
    std::string line;
    bool encoder = false, tokens = false;
    for (int n = 0; n < 1'000'000 && std::getline(in, line) && !(encoder && tokens); ++n) {
      encoder = encoder || line.rfind("encoder_conf:", 0) == 0;
      tokens = tokens || line.rfind("token_list:", 0) == 0;
    }
    return encoder && tokens;
  }

  std::string document(const std::string& path) const override {
    std::error_code error;
    const auto folder = locate(fs::is_directory(path, error) ? path : unpacked(path));
    const detail::SourceYaml c(folder.config.string(), "ESPnet config");
    const auto model = c.text("model", "espnet");
    if (model != "espnet")
      c.fail("model", "'" + model + "' is not supported (espnet: CTC/attention)");
    for (const char* key : {"preencoder", "postencoder"}) {
      if (c.has(key)) c.fail(key, "'" + c.text(key, "") + "' is not supported (none)");
    }
    if (c.number("model_conf.ctc_weight", 0.5) <= 0.0) {
      c.fail("model_conf.ctc_weight", "0: the model has no CTC head, which attnzoo decodes with");
    }
    YAML::Node doc;
    doc["name"] = detail::source_model_name(path);
    doc["family"] = "conformer";
    int64_t input_dim = 0;
    std::optional<YAML::Node> features;
    if (c.has("frontend")) {
      c.require("frontend", "default", "attnzoo reads ESPnet's default frontend (STFT log-mel)");
      features = frontend_features(c, input_dim);
    } else if (c.has("input_size")) {
      input_dim = c.integer("input_size", 0, 1, 4096);
    } else {
      c.fail("frontend", "none, and no input_size: the model's input is unknown");
    }
    auto arch = encoder_architecture(c, input_dim);

    YAML::Node checkpoint;
    checkpoint["format"] = "espnet";
    checkpoint["file"] = folder.weights;
    const auto normalize = c.text("normalize", "");
    if (normalize == "global_mvn") {
      c.require_flag("normalize_conf.norm_means", true, "attnzoo's global CMVN normalises both");
      c.require_flag("normalize_conf.norm_vars", true, "attnzoo's global CMVN normalises both");
      arch["global_cmvn"] = true;
      // The statistics ESPnet builds GlobalMVN from; the checkpoint's normalize.* replace them.
      if (const auto stats = recipe_file(folder, c.text("normalize_conf.stats_file", ""))) {
        checkpoint["cmvn_file"] = *stats;
      }
    } else if (!normalize.empty()) {
      c.fail("normalize", "'" + normalize + "' is not supported (global_mvn, or none)");
    }

    YAML::Node decoding;
    const auto tokens = c.at("token_list");
    int64_t vocab = 0;
    std::string first;
    if (tokens.IsSequence()) {
      const auto list = c.text_list("token_list");
      vocab = static_cast<int64_t>(list.size());
      first = list.empty() ? "" : list.front();
      for (const auto& token : list) decoding["tokens"].push_back(token);
    } else {
      const auto file = recipe_file(folder, c.text("token_list", ""));
      if (!file) c.fail("token_list", "no such file beside the model");
      decoding["units"] = *file;
      decoding["units_format"] = "espnet";
      std::ifstream in(*file);
      std::string line;
      while (std::getline(in, line)) {
        if (vocab++ == 0) first = line;
      }
    }
    if (first != "<blank>") {
      c.fail("token_list", "the first token is '" + first +
                               "'; ESPnet's CTC blank is token 0, "
                               "<blank>");
    }
    arch["vocab_size"] = vocab;
    const auto token_type = c.text("token_type", "bpe");
    if (token_type == "char") {
      decoding["text"] = "characters";
    } else if (token_type == "word") {
      decoding["text"] = "words";
    } else if (token_type == "bpe") {
      const auto model_file = recipe_file(folder, c.text("bpemodel", ""));
      if (!model_file)
        c.fail("bpemodel",
               "no SentencePiece model at '" + c.text("bpemodel", "") + "' beside the model");
      decoding["text"] = "sentencepiece";
      decoding["sentencepiece_model"] = *model_file;
    } else {
      c.fail("token_type", "'" + token_type + "' is not supported (char, word, bpe)");
    }
    decoding["search"] = "prefix_beam";
    decoding["beam_size"] = 20;
    decoding["token_top_k"] = 0;

    doc["architecture"] = arch;
    if (features) doc["features"] = *features;
    doc["decoding"] = decoding;
    doc["checkpoint"] = checkpoint;
    return detail::emit_document(
        doc, {"Read from " + absolute_path(path) + ":",
              "an ESPnet ASR experiment (" + absolute_path(folder.config) + ",",
              folder.weights + "), decoded with CTC prefix beam search as ESPnet's",
              "Speech2Text decodes with ctc_weight 1.0."});
  }
};

}  // namespace

std::unique_ptr<ModelSource> make_espnet_source() { return std::make_unique<EspnetSource>(); }

}  // namespace attnzoo
