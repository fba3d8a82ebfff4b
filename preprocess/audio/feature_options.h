// The options of the audio frontend, and the closed choices among them, with their names in a
// model config. Light (the standard library alone), so that configs/model_config.h, which reads a
// config's `features:` section into them, does not bring the frontend's LibTorch headers to
// everything that includes it.
#pragma once

#include <cstdint>
#include <string>

namespace attnzoo {

enum class AudioFeatureKind { kFbank, kWhisperLogMel, kStftLogMel, kNemoMel };
// "fbank" | "whisper_log_mel" | "stft_log_mel" | "nemo_mel" (the values of a config's
// features.kind).
AudioFeatureKind parse_audio_feature_kind(const std::string& name);
constexpr const char* to_string(AudioFeatureKind kind) {
  switch (kind) {
    case AudioFeatureKind::kFbank:
      return "fbank";
    case AudioFeatureKind::kWhisperLogMel:
      return "whisper_log_mel";
    case AudioFeatureKind::kStftLogMel:
      return "stft_log_mel";
    case AudioFeatureKind::kNemoMel:
      return "nemo_mel";
  }
  return "fbank";
}

enum class FrameWindow { kPovey, kHamming, kHanning, kRectangular, kBlackman, kBartlett };
// "povey" | "hamming" | "hanning" | "rectangular" | "blackman" (Kaldi's --window-type), and
// "bartlett" (torch.bartlett_window, one of NeMo's). All symmetric (torch's periodic=False).
FrameWindow parse_frame_window(const std::string& name);
constexpr const char* to_string(FrameWindow window) {
  switch (window) {
    case FrameWindow::kPovey:
      return "povey";
    case FrameWindow::kHamming:
      return "hamming";
    case FrameWindow::kHanning:
      return "hanning";
    case FrameWindow::kRectangular:
      return "rectangular";
    case FrameWindow::kBlackman:
      return "blackman";
    case FrameWindow::kBartlett:
      return "bartlett";
  }
  return "povey";
}

// nemo_mel: librosa's mel filter normalisation (NeMo's mel_norm: "slaney" or None).
enum class MelNorm { kSlaney, kNone };
constexpr const char* to_string(MelNorm norm) {
  return norm == MelNorm::kSlaney ? "slaney" : "none";
}

// nemo_mel: how the log is kept off zero (NeMo's log_zero_guard_type): log(x + value) or
// log(max(x, value)).
enum class LogGuard { kAdd, kClamp };
constexpr const char* to_string(LogGuard guard) {
  return guard == LogGuard::kAdd ? "add" : "clamp";
}

// nemo_mel: NeMo's normalize_batch over the utterance's frames: per_feature (each mel bin to
// mean 0, unbiased std 1), all_features (one mean and std for the whole spectrogram), or none.
enum class FeatureNormalize { kNone, kPerFeature, kAllFeatures };
constexpr const char* to_string(FeatureNormalize normalize) {
  switch (normalize) {
    case FeatureNormalize::kNone:
      return "none";
    case FeatureNormalize::kPerFeature:
      return "per_feature";
    case FeatureNormalize::kAllFeatures:
      return "all_features";
  }
  return "none";
}

// The options of the audio frontend (FeatureExtractor, FeatureStream): a model config's
// `features:` section reads into them (configs/model_config.h). Kaldi's defaults, except dither
// (0, deterministic, as WeNet at test time) and energy_floor (0).
struct AudioFeatureOptions {
  AudioFeatureKind kind = AudioFeatureKind::kFbank;
  int64_t sample_rate = 16000;  // Hz, of the waveform features are computed on
  int64_t num_mel_bins = 80;
  double frame_length_ms = 25.0;
  double frame_shift_ms = 10.0;
  // kFbank only, but for preemphasis and window (kNemoMel too).
  double dither = 0.0;
  uint64_t dither_seed = 0;
  double preemphasis = 0.97;
  bool remove_dc_offset = true;
  FrameWindow window = FrameWindow::kPovey;
  bool snip_edges = true;
  double energy_floor = 0.0;
  // fbank: the mel bins' range; stft_log_mel and nemo_mel too (librosa's fmin and fmax: ESPnet's
  // and NeMo's default is low_freq 0, which a config's section for them takes when it states
  // none).
  double low_freq = 20.0;
  double high_freq = 0.0;  // <= 0: that far below the Nyquist frequency
  bool int16_scale = true;
  // A mel bin narrower than the FFT's resolution is empty (energy 0, log the floor), as in
  // torchaudio.compliance.kaldi.fbank (AST's 128 bins at 512 points), instead of an error (Kaldi).
  bool allow_empty_mel_bins = false;
  // kStftLogMel and kNemoMel: the FFT's size in samples, with the frame_length_ms window centred
  // in it (torch.stft's n_fft and win_length); 0: the window's length (kStftLogMel), the next
  // power of two (kNemoMel, as NeMo).
  int64_t n_fft = 0;
  // kNemoMel only (NeMo's AudioToMelSpectrogramPreprocessor; it also takes window, preemphasis,
  // applied to the whole signal, low_freq and high_freq from above).
  MelNorm mel_norm = MelNorm::kSlaney;
  double mag_power = 2.0;  // the mel filters weigh |X|^mag_power
  bool log = true;
  LogGuard log_guard = LogGuard::kAdd;
  double log_guard_value = 0x1p-24;
  FeatureNormalize normalize = FeatureNormalize::kNone;
  // false: torch.stft centred (n_fft / 2 zeros at either end); true: (n_fft - hop) / 2 zeros
  // and no centring, so that N samples give N / hop frames.
  bool exact_pad = false;
  // Whole utterances (the Audio Spectrogram Transformer's input): padded with zero rows at the
  // end or cut to this many frames; 0: as many as the audio gives.
  int64_t fixed_frames = 0;
  // Every feature becomes (feature - normalize_mean) / normalize_std, after any padding (AST:
  // -4.2677393 and 2 x 4.5689974, AudioSet's statistics).
  double normalize_mean = 0.0;
  double normalize_std = 1.0;

  double frames_per_second() const { return 1000.0 / frame_shift_ms; }
};

}  // namespace attnzoo
