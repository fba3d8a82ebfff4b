#include <attnzoo/configs/config_sections.h>
#include <attnzoo/io/archive_entry.h>

#include <filesystem>
#include <sstream>
#include <stdexcept>

namespace attnzoo::detail {

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

ImagePreprocessConfig read_image_preprocess(MapReader pre, int64_t in_chans, int64_t height,
                                            int64_t width, int64_t patch_size, bool tiled) {
  ImagePreprocessConfig p;
  auto& t = p.transform;
  const auto size = pre.integer_list("input_size", 3, 1, kMaxImageSize);
  p.channels = size ? (*size)[0] : in_chans;
  t.height = size ? (*size)[1] : height;
  t.width = size ? (*size)[2] : width;
  t.crop_pct = pre.number("crop_pct", std::nullopt, 0.0, 1.0, /*min_exclusive=*/true);
  t.interpolation = pre.enumeration("interpolation", std::nullopt,
                                    {Interpolation::kBicubic, Interpolation::kBilinear});
  t.crop_mode = pre.enumeration("crop_mode", t.crop_mode, {CropMode::kCenter, CropMode::kSquash});
  const auto channels = static_cast<size_t>(in_chans);
  const auto mean = pre.number_list("mean", channels, 0.0, 1.0);
  const auto stdev = pre.number_list("std", channels, 0.0, 10.0, /*min_exclusive=*/true);
  if (!mean) pre.fail("mean", "required key is missing");
  if (!stdev) pre.fail("std", "required key is missing");
  t.mean = *mean;
  t.std = *stdev;
  pre.finish();

  if (p.channels != in_chans) {
    pre.fail("input_size", "input_size has " + std::to_string(p.channels) +
                               " channels, architecture.in_chans is " + std::to_string(in_chans));
  }
  // Other sizes than img_size are fine (the position embedding is resampled), but the patches
  // must tile the image.
  if (t.height < patch_size || t.width < patch_size ||
      (tiled && (t.height % patch_size != 0 || t.width % patch_size != 0))) {
    pre.fail("input_size",
             "input_size " + std::to_string(t.height) + "x" + std::to_string(t.width) +
                 " is not divisible by architecture.patch_size " + std::to_string(patch_size));
  }
  return p;
}

std::optional<AudioFeatureOptions> read_audio_features(MapReader& root, int64_t input_dim,
                                                       const std::string& input_key) {
  if (!root.has("features")) return std::nullopt;
  AudioFeatureOptions f;
  auto features = root.map("features", true);
  f.kind = features.enumeration("kind", std::nullopt,
                                {AudioFeatureKind::kFbank, AudioFeatureKind::kWhisperLogMel,
                                 AudioFeatureKind::kStftLogMel, AudioFeatureKind::kNemoMel});
  const bool nemo = f.kind == AudioFeatureKind::kNemoMel;
  if (nemo) f.frame_length_ms = 20.0;  // NeMo's window_size default, 0.02 s
  f.sample_rate = features.integer("sample_rate", f.sample_rate, 1000, kMaxSampleRate);
  f.num_mel_bins = features.integer("num_mel_bins", f.num_mel_bins, 1, kMaxFeatures);
  f.frame_length_ms = features.number("frame_length_ms", f.frame_length_ms, 0.0, 1000.0, true);
  f.frame_shift_ms = features.number("frame_shift_ms", f.frame_shift_ms, 0.0, 1000.0, true);
  f.fixed_frames = features.integer("frames", f.fixed_frames, 0, kMaxFrames);
  f.normalize_mean = features.number("mean", f.normalize_mean, -1e6, 1e6);
  f.normalize_std = features.number("std", f.normalize_std, 0.0, 1e6, /*min_exclusive=*/true);
  const bool fbank = f.kind == AudioFeatureKind::kFbank;
  if (fbank) {
    f.dither = features.number("dither", f.dither, 0.0, 100.0);
    f.preemphasis = features.number("preemphasis", f.preemphasis, 0.0, 1.0);
    f.remove_dc_offset = features.boolean("remove_dc_offset", f.remove_dc_offset);
    f.window =
        features.enumeration("window", f.window,
                             {FrameWindow::kPovey, FrameWindow::kHamming, FrameWindow::kHanning,
                              FrameWindow::kRectangular, FrameWindow::kBlackman});
    f.snip_edges = features.boolean("snip_edges", f.snip_edges);
    f.energy_floor = features.number("energy_floor", f.energy_floor, 0.0, 1e10);
    f.low_freq = features.number("low_freq", f.low_freq, 0.0, kMaxSampleRate / 2.0);
    f.high_freq =
        features.number("high_freq", f.high_freq, -kMaxSampleRate / 2.0, kMaxSampleRate / 2.0);
    f.int16_scale = features.boolean("int16_scale", f.int16_scale);
    f.allow_empty_mel_bins = features.boolean("allow_empty_mel_bins", f.allow_empty_mel_bins);
  }
  const bool stft = f.kind == AudioFeatureKind::kStftLogMel;
  if (stft) {
    // librosa's fmin and fmax, ESPnet's defaults 0 and rate / 2.
    f.low_freq = features.number("low_freq", 0.0, 0.0, kMaxSampleRate / 2.0);
    f.high_freq = features.number("high_freq", 0.0, -kMaxSampleRate / 2.0, kMaxSampleRate / 2.0);
    f.n_fft = features.integer("n_fft", 0, 0, int64_t{1} << 20);
  }
  if (nemo) {
    // NeMo's AudioToMelSpectrogramPreprocessor, with its defaults.
    f.window = features.enumeration("window", FrameWindow::kHanning,
                                    {FrameWindow::kHanning, FrameWindow::kHamming,
                                     FrameWindow::kBlackman, FrameWindow::kBartlett});
    f.n_fft = features.integer("n_fft", 0, 0, int64_t{1} << 20);
    f.preemphasis = features.number("preemphasis", 0.97, 0.0, 1.0);
    f.low_freq = features.number("low_freq", 0.0, 0.0, kMaxSampleRate / 2.0);
    f.high_freq = features.number("high_freq", 0.0, -kMaxSampleRate / 2.0, kMaxSampleRate / 2.0);
    f.mel_norm =
        features.enumeration("mel_norm", MelNorm::kSlaney, {MelNorm::kSlaney, MelNorm::kNone});
    f.mag_power = features.number("mag_power", f.mag_power, 0.0, 8.0, /*min_exclusive=*/true);
    f.log = features.boolean("log", f.log);
    f.log_guard =
        features.enumeration("log_guard", f.log_guard, {LogGuard::kAdd, LogGuard::kClamp});
    f.log_guard_value =
        features.number("log_guard_value", f.log_guard_value, 0.0, 1e10, /*min_exclusive=*/true);
    f.normalize = features.enumeration(
        "normalize", FeatureNormalize::kPerFeature,
        {FeatureNormalize::kPerFeature, FeatureNormalize::kAllFeatures, FeatureNormalize::kNone});
    f.exact_pad = features.boolean("exact_pad", f.exact_pad);
  }
  features.finish();
  if (f.num_mel_bins != input_dim) {
    features.fail("num_mel_bins", "num_mel_bins " + std::to_string(f.num_mel_bins) +
                                      " must equal " + input_key + " " + std::to_string(input_dim));
  }
  const double nyquist = f.sample_rate / 2.0;
  const double high = f.high_freq > 0.0 ? f.high_freq : nyquist + f.high_freq;
  if ((fbank || stft || nemo) && !(f.low_freq < high && high <= nyquist)) {
    features.fail(features.has("high_freq") ? "high_freq" : "low_freq",
                  "need 0 <= low_freq < high_freq <= sample_rate / 2 = " +
                      std::to_string(static_cast<int64_t>(nyquist)) + " Hz (high_freq <= 0 " +
                      "counts down from there)");
  }
  if (f.frame_shift_ms > f.frame_length_ms) {
    features.fail("frame_shift_ms", "frame_shift_ms must not exceed frame_length_ms");
  }
  // The window's samples as the frontend counts them (Kaldi's truncation).
  const auto window = static_cast<int64_t>(double(f.sample_rate) * 0.001 * f.frame_length_ms);
  if ((stft || nemo) && f.n_fft > 0 && f.n_fft < window) {
    features.fail("n_fft", "n_fft " + std::to_string(f.n_fft) + " is shorter than the " +
                               std::to_string(window) + "-sample window of frame_length_ms");
  }
  const auto hop = static_cast<int64_t>(double(f.sample_rate) * 0.001 * f.frame_shift_ms);
  if (nemo && f.exact_pad && hop % 2 != 0) {
    features.fail("exact_pad",
                  "exact_pad needs an even hop (NeMo refuses an odd one); "
                  "frame_shift_ms gives " +
                      std::to_string(hop) + " samples");
  }
  return f;
}

namespace {

// A file named at `key`, relative to the folder of the YAML file `source`; it must exist. With
// `entry_too`, a file inside a tar archive as ARCHIVE#ENTRY (io/archive_entry.h) is one as well.
std::string existing_file(MapReader& section, const std::string& key, const std::string& source,
                          bool entry_too = false) {
  namespace fs = std::filesystem;
  fs::path file(section.string(key, std::nullopt));
  if (file.is_relative()) file = fs::path(source).parent_path() / file;
  std::error_code error;
  if (entry_too && io::split_archive_entry(file.string())) {
    if (!io::is_file_or_entry(file.string())) {
      section.fail(key, "'" + file.string() + "' names no entry of a tar archive");
    }
    return file.lexically_normal().string();
  }
  if (!fs::is_regular_file(file, error)) {
    section.fail(key, "'" + file.string() + "' is not a file (paths are relative to the YAML)");
  }
  return file.lexically_normal().string();
}
}  // namespace

DecodingConfig read_decoding(MapReader& root, const std::string& source, const SpeechHeads& heads) {
  DecodingConfig d;
  d.head = heads.transducer ? decoding::DecodingHead::kTransducer : decoding::DecodingHead::kCtc;
  if (!root.has("decoding")) return d;
  auto section = root.map("decoding", true);
  if (heads.vocab <= 0) {
    section.fail_here(
        "a decoding section needs a CTC or transducer head (architecture.vocab_size > 0)");
  }
  const int64_t decoder_directions = heads.decoder_directions;
  // A units file, or the tokens inline; a units file given as an override (--units, --set)
  // replaces the document's inline tokens.
  const bool has_units = section.has("units");
  if (section.has("tokens") && (!has_units || !section.overridden("units"))) {
    if (has_units) {
      section.fail(section.relation_key("units", "tokens"),
                   "a token table is decoding.units or decoding.tokens, not both");
    }
    d.tokens = *section.string_list("tokens");
    for (size_t i = 0; i < d.tokens.size(); ++i) {
      if (d.tokens[i].find_first_of(" \t\r\n") != std::string::npos) {
        section.fail("tokens", "token " + std::to_string(i) + " holds whitespace");
      }
    }
  } else {
    if (section.has("tokens")) (void)section.string_list("tokens");
    d.units = existing_file(section, "units", source);
  }
  d.units_format =
      section.enumeration("units_format", d.units_format,
                          {decoding::UnitsFormat::kWenet, decoding::UnitsFormat::kEspnet});
  d.text =
      section.enumeration("text", d.text,
                          {decoding::TextJoin::kCharacters, decoding::TextJoin::kWords,
                           decoding::TextJoin::kSentencePiece, decoding::TextJoin::kWordPiece});
  if (section.has("sentencepiece_model")) {
    if (d.text != decoding::TextJoin::kSentencePiece) {
      section.fail("sentencepiece_model", "a SentencePiece model goes with text: sentencepiece");
    }
    d.sentencepiece_model = existing_file(section, "sentencepiece_model", source, true);
  }
  d.search = section.enumeration("search", d.search,
                                 {decoding::CtcSearch::kGreedy, decoding::CtcSearch::kPrefixBeam});
  auto& b = d.beam;
  b.beam_size = section.integer("beam_size", b.beam_size, 1, kMaxBeam);
  b.nbest = section.integer("nbest", b.nbest, 1, kMaxBeam);
  if (b.nbest > b.beam_size) {
    section.fail(section.relation_key("nbest", "beam_size"),
                 "nbest " + std::to_string(b.nbest) + " exceeds beam_size " +
                     std::to_string(b.beam_size) + " (the beam holds the hypotheses returned)");
  }
  b.token_top_k = section.integer("token_top_k", b.token_top_k, 0, kMaxClasses);
  b.token_top_p = section.number("token_top_p", b.token_top_p, 0.0, 1.0, /*min_exclusive=*/true);
  if (section.has("token_min_log_prob")) {
    b.token_min_log_prob = section.number("token_min_log_prob", std::nullopt, -1e30, 0.0);
  }
  b.beam_unit = section.enumeration(
      "beam_unit", b.beam_unit, {decoding::BeamUnit::kPrefix, decoding::BeamUnit::kPrefixEnding});
  d.stable_margin = section.number("stable_margin", d.stable_margin, 0.0, 1e6);
  d.mode = section.enumeration(
      "mode", d.mode, {decoding::DecodingMode::kCtc, decoding::DecodingMode::kAttentionRescoring});
  auto& r = d.rescoring;
  r.ctc_weight = section.number("ctc_weight", r.ctc_weight, 0.0, 1e6);
  r.reverse_weight = section.number("reverse_weight", r.reverse_weight, 0.0, 1.0);
  d.head = section.enumeration("head", d.head,
                               {decoding::DecodingHead::kCtc, decoding::DecodingHead::kTransducer});
  d.transducer_search =
      section.enumeration("transducer_search", d.transducer_search,
                          {decoding::TransducerSearch::kGreedy, decoding::TransducerSearch::kBeam});
  d.max_symbols = section.integer("max_symbols", d.max_symbols, 1, 1000);
  d.score_norm = section.boolean("score_norm", d.score_norm);
  section.finish();
  if (d.head == decoding::DecodingHead::kCtc && !heads.ctc) {
    section.fail("head", "the model has no CTC head (head: transducer)");
  }
  if (d.head == decoding::DecodingHead::kTransducer && !heads.transducer) {
    section.fail("head", "the model has no transducer head (architecture.transducer)");
  }
  if (d.head == decoding::DecodingHead::kTransducer &&
      d.mode == decoding::DecodingMode::kAttentionRescoring) {
    section.fail(section.relation_key("mode", "head"),
                 "attention_rescoring ranks a CTC beam's hypotheses (head: ctc)");
  }
  if (d.mode == decoding::DecodingMode::kAttentionRescoring) {
    if (decoder_directions == 0) {
      section.fail("mode", "attention_rescoring needs an attention decoder (architecture.decoder)");
    }
    if (d.search != decoding::CtcSearch::kPrefixBeam) {
      section.fail(section.relation_key("search", "mode"),
                   "attention_rescoring ranks the n-best of search: prefix_beam, not greedy");
    }
    if (r.reverse_weight > 0.0 && decoder_directions < 2) {
      section.fail("reverse_weight",
                   "reverse_weight > 0 needs a right-to-left decoder (architecture.decoder.kind: "
                   "bitransformer)");
    }
  }
  return d;
}

void read_checkpoint(MapReader checkpoint, const std::vector<std::string>& formats,
                     ModelConfig& config, bool takes_cmvn) {
  if (checkpoint.has("format")) {
    config.checkpoint_format = checkpoint.choice("format", std::nullopt, formats);
  }
  // A file, or (the weights) a file inside a tar archive as ARCHIVE#ENTRY (a .nemo file's).
  const auto existing_file = [&](const char* key, bool entry_too) {
    const auto file = resolve(config.source, checkpoint.string(key, std::nullopt));
    std::error_code error;
    if (entry_too && io::split_archive_entry(file)) {
      if (!io::is_file_or_entry(file)) {
        checkpoint.fail(key, "'" + file + "' names no entry of a tar archive");
      }
    } else if (!std::filesystem::is_regular_file(file, error)) {
      checkpoint.fail(key, "'" + file + "' is not a file");
    }
    return std::filesystem::path(file).lexically_normal().string();
  };
  if (checkpoint.has("file")) config.checkpoint_file = existing_file("file", true);
  config.checkpoint_key = checkpoint.string("key", "");
  if (checkpoint.has("cmvn_file")) {
    if (!takes_cmvn) {
      checkpoint.fail("cmvn_file", "this model has no global CMVN to take statistics (family " +
                                       config.family +
                                       "; a conformer with architecture.global_cmvn: true has)");
    }
    config.cmvn_file = existing_file("cmvn_file", false);
  }
  checkpoint.finish();
}

bool adopts_layout_value(const ModelConfig& config, const std::string& key_path,
                         const std::string& layout) {
  if (config.overridden(key_path)) return false;
  if (config.stated.count(key_path) == 0) return true;
  return !config.checkpoint_format.empty() && config.checkpoint_format != layout;
}

std::string layout_value_note(const std::string& key_path, double before, double after,
                              const std::string& layout, const std::string& what) {
  std::ostringstream out;
  out << what << " " << after << ", the " << layout << " layout's, instead of the config's "
      << before << " (--set " << key_path << "=" << before << " keeps it)";
  return out.str();
}

void require_floating(const torch::Tensor& tensor, const std::string& what) {
  if (tensor.is_floating_point()) return;
  throw InputError(what + "must be floating point, got " +
                   std::string(c10::toString(tensor.scalar_type())));
}

}  // namespace attnzoo::detail
