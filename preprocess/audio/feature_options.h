// The options of the audio frontend, and the closed choices among them, with their names in a
// model config. Light (the standard library alone), so that configs/model_config.h, which reads a
// config's `features:` section into them, does not bring the frontend's LibTorch headers to
// everything that includes it.
#pragma once

#include <cstdint>
#include <string>

namespace attnzoo {

enum class AudioFeatureKind { kFbank, kWhisperLogMel, kStftLogMel };
// "fbank" | "whisper_log_mel" | "stft_log_mel" (the values of a config's features.kind).
AudioFeatureKind parse_audio_feature_kind(const std::string& name);
constexpr const char* to_string(AudioFeatureKind kind) {
  switch (kind) {
    case AudioFeatureKind::kFbank:
      return "fbank";
    case AudioFeatureKind::kWhisperLogMel:
      return "whisper_log_mel";
    case AudioFeatureKind::kStftLogMel:
      return "stft_log_mel";
  }
  return "fbank";
}

enum class FrameWindow { kPovey, kHamming, kHanning, kRectangular, kBlackman };
// "povey" | "hamming" | "hanning" | "rectangular" | "blackman" (Kaldi's --window-type).
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
  }
  return "povey";
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
  // kFbank only.
  double dither = 0.0;
  uint64_t dither_seed = 0;
  double preemphasis = 0.97;
  bool remove_dc_offset = true;
  FrameWindow window = FrameWindow::kPovey;
  bool snip_edges = true;
  double energy_floor = 0.0;
  // fbank: the mel bins' range; stft_log_mel too (librosa's fmin and fmax: ESPnet's default is
  // low_freq 0, which a config's stft_log_mel section takes when it states none).
  double low_freq = 20.0;
  double high_freq = 0.0;  // <= 0: that far below the Nyquist frequency
  bool int16_scale = true;
  // A mel bin narrower than the FFT's resolution is empty (energy 0, log the floor), as in
  // torchaudio.compliance.kaldi.fbank (AST's 128 bins at 512 points), instead of an error (Kaldi).
  bool allow_empty_mel_bins = false;
  // kStftLogMel only: the FFT's size in samples, with the frame_length_ms window centred in it
  // (torch.stft's n_fft and win_length); 0: the window's length.
  int64_t n_fft = 0;
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
