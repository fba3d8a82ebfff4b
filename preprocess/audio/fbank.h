// Speech features from a waveform: Kaldi's log mel filterbank, Whisper's log-mel spectrogram and
// ESPnet's STFT log-mel, computed frame-parallel (framing by unfold, one parallel pass per frame
// for DC removal, pre-emphasis, window and zero padding, torch::fft::rfft, one pass for the power
// spectrum, one matmul with the mel matrix), and incrementally for long or live audio
// (FeatureStream).
//
// kFbank is Kaldi's compute-fbank-feats (feat/feature-fbank.cc, feature-window.cc, mel-
// computations.cc), which kaldi-native-fbank and torchaudio.compliance.kaldi.fbank reimplement
// and WeNet, ESPnet and icefall train on. Per frame of frame_length samples every frame_shift
// (Kaldi's int(rate * 0.001 * ms)):
//   samples · 32768 (int16_scale: Kaldi reads WAV as 16-bit integers), + dither · N(0, 1),
//   − the frame's mean (remove_dc_offset), x[i] −= preemphasis · x[i−1] (x[0] −= p · x[0]),
//   · window (povey = hann^0.85, hamming, hanning, rectangular, blackman with Kaldi's 0.42),
//   zero-padded to the next power of two (round_to_power_of_two), |rfft|² without the Nyquist
//   bin, · triangular mel filters (mel = 1127 ln(1 + f / 700), num_mel_bins + 2 points evenly
//   spaced in mel between low_freq and high_freq, high_freq <= 0 counting down from Nyquist),
//   log(max(energy, FLT_EPSILON)): silence gives ln(2^-23) = -15.9424 in every bin, as Kaldi.
// snip_edges true: frames lie inside the signal, 1 + (N − length) / shift of them; false:
// (N + shift / 2) / shift frames centred on multiples of the shift, the signal mirrored at
// both ends (..., x1, x0 | x0, x1, ...). energy_floor acts on the log-energy, which fbank
// outputs only with Kaldi's --use-energy (not a config field); it cannot change the mel bins.
//
// Arithmetic is float64 throughout, the result float32. The float32 references disagree with
// each other (and with float64) by up to ~0.015 in rare ill-conditioned bins: a loud frame whose
// low mel bins hold almost nothing after DC removal and pre-emphasis, where float32 rounding of
// the frame is larger than the bin's energy. In float64 those bins are exact, and every
// difference from a reference is the reference's own rounding (preprocess/README.md).
//
// kWhisperLogMel is openai-whisper's log_mel_spectrogram: n_fft = frame_length (400 at 16 kHz),
// hop = frame_shift (160), periodic hann window, torch.stft(center=True) with reflect padding of
// n_fft / 2, power spectrum, the last frame dropped (N / hop frames), librosa's Slaney-normalised
// mel filters over 0 .. rate / 2, log10(max(x, 1e-10)), then max(x, x.max() − 8) and (x + 4) / 4
// over the whole utterance. The fbank-only options do not apply.
//
// kStftLogMel is ESPnet's DefaultFrontend (espnet2/asr/frontend/default.py: Stft, then LogMel):
// torch.stft(n_fft, win_length = frame_length, hop = frame_shift, periodic hann window of
// win_length centred in n_fft samples, center=True with reflect padding of n_fft / 2), the power
// spectrum, 1 + N / hop frames, librosa's Slaney-normalised mel filters over low_freq .. high_freq,
// ln(max(x, 1e-10)). No utterance-wide step: it streams as fbank does. The fbank-only options do
// not apply.
//
// kNemoMel is NeMo's AudioToMelSpectrogramPreprocessor (FilterbankFeatures in
// nemo/collections/asr/parts/preprocessing/features.py) as it runs at inference (no dither):
// pre-emphasis over the whole signal (y[0] = x[0], y[i] = x[i] − p·x[i−1]), torch.stft with
// n_fft (default the next power of two above the window), a symmetric window of frame_length
// samples (NeMo's window_size) centred in n_fft, zero padding of n_fft / 2 at either end (or of
// (n_fft − hop) / 2 without centring, exact_pad), |X|^mag_power, librosa's mel filters over
// low_freq .. high_freq (Slaney-normalised or not), log(x + guard) or log(max(x, guard)) (or no
// log), and NeMo's valid frames: one fewer than the STFT gives ((N + 2·pad − n_fft) / hop, N / hop
// for an even n_fft centred). normalize per_feature / all_features then scales by the whole
// utterance's statistics (unbiased std + 1e-5, as NeMo), so those features come out at the end.
// NeMo's pad_to only pads a batch with zero frames beyond each utterance's length: not part of
// an utterance's features.
//
// Dither (fbank only, 0 by default as WeNet and ESPnet at test time) is seeded: the noise of
// frame m is drawn from a generator seeded by (dither_seed, m / 64), so the features of a
// waveform do not depend on how it was split into blocks.
#pragma once

#include <attnzoo/preprocess/audio/error.h>
#include <attnzoo/preprocess/audio/feature_options.h>

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo {

// Kaldi's mel filterbank: [num_bins, fft_size / 2] float64 (the Nyquist bin has no weight).
// Throws c10::ValueError for frequencies outside 0 <= low < high <= rate / 2, or, as Kaldi does,
// when a filter covers no FFT bin (num_bins too large for the FFT size) unless `allow_empty`
// (torchaudio.compliance.kaldi's behaviour: that bin's energy is 0, its log the floor).
torch::Tensor kaldi_mel_banks(int64_t num_bins, int64_t fft_size, double sample_rate,
                              double low_freq, double high_freq, bool allow_empty = false);
// librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk=False, norm="slaney"), the filters of
// Whisper: [num_bins, n_fft / 2 + 1] float64. `norm` false: librosa's norm=None (peaks of 1).
torch::Tensor slaney_mel_filters(int64_t num_bins, int64_t n_fft, double sample_rate, double fmin,
                                 double fmax, bool norm = true);

class FeatureExtractor {
 public:
  // Throws c10::ValueError naming the option: a rate below 1 Hz, a frame under 2 samples, a
  // shift of 0 samples or longer than the frame, no mel bins, frequencies out of range, a
  // negative dither, a pre-emphasis outside [0, 1].
  explicit FeatureExtractor(AudioFeatureOptions options);

  const AudioFeatureOptions& options() const { return options_; }
  int64_t frame_length() const { return length_; }  // samples
  int64_t frame_shift() const { return shift_; }
  int64_t fft_size() const { return fft_size_; }
  int64_t num_features() const { return options_.num_mel_bins; }
  // Frames of a waveform of `num_samples` (0 when too short), and the fewest samples that give
  // one frame.
  int64_t num_frames(int64_t num_samples) const;
  int64_t min_samples() const;
  // [frame_length] float64 (stft_log_mel: n_fft samples, the window centred in zeros)
  const torch::Tensor& window() const { return window_; }
  const torch::Tensor& mel_filters() const { return mel_; }  // [bins, spectrum bins] float64
  std::string describe() const;  // one line: "Kaldi fbank: 80 bins, 25 ms / 10 ms, povey, ..."
  // False when features come out only once the utterance is whole (Whisper's normalisation,
  // nemo_mel's normalize, fixed_frames): such features cannot feed a live stream.
  bool streams() const { return !holds_utterance(); }

  // waveform: [N] float (mono, at options().sample_rate, in [-1, 1]) -> [T, num_mel_bins]
  // float32, T = num_frames(N). Throws AudioError naming `source` for a waveform with no samples,
  // too few for one frame ("too short" with the numbers), or NaN/infinite samples.
  torch::Tensor operator()(const torch::Tensor& waveform,
                           const std::string& source = "<waveform>") const;

 private:
  friend class FeatureStream;
  // frames: [n, frame_length] float64, the (scaled) samples of frames first .. first + n - 1
  // -> [n, num_mel_bins] float64: log mel energies (Whisper: log10, before its normalisation).
  torch::Tensor log_mel(torch::Tensor frames, int64_t first) const;
  // Whisper's dynamic-range clamp and scaling over a whole utterance, [T, F] float64.
  static torch::Tensor whisper_normalize(const torch::Tensor& log_mel);
  // NeMo's normalize_batch over a whole utterance's frames [T, F] float64.
  static torch::Tensor nemo_normalize(const torch::Tensor& frames, FeatureNormalize normalize);
  bool holds_utterance() const;
  // normalize_mean and normalize_std applied to frames [n, F] float64.
  torch::Tensor normalized(torch::Tensor frames) const;
  // A whole utterance's frames [T, F] float64: Whisper's normalisation, fixed_frames, then
  // normalized().
  torch::Tensor utterance(torch::Tensor frames) const;

  AudioFeatureOptions options_;
  int64_t length_ = 0, shift_ = 0, fft_size_ = 0;
  int64_t offset_ = 0;  // frame m starts at sample m * shift - offset
  torch::Tensor window_, mel_, mel_t_;
};

// Features of a waveform that arrives in blocks: push() returns the frames each block completes,
// finish() the rest. The result equals FeatureExtractor's on the concatenated samples; memory is
// bounded by one frame plus the block (Whisper keeps its log-mel frames, as its normalisation
// needs the utterance's maximum, and returns them all from finish(); so does a fixed number of
// frames, which needs the utterance's length).
class FeatureStream {
 public:
  explicit FeatureStream(FeatureExtractor extractor, std::string source = "<stream>");

  const FeatureExtractor& extractor() const { return extractor_; }
  // samples: [n] float, mono at the extractor's rate -> [k, num_mel_bins] float32, the frames
  // now complete (fbank; [0, F] for whisper_log_mel). AudioError for NaN/infinite samples.
  torch::Tensor push(const torch::Tensor& samples);
  // The remaining frames at the end of the input. AudioError when the whole stream gave none
  // (no samples, or too short). The stream is then done.
  torch::Tensor finish();

  int64_t samples_received() const { return received_; }
  int64_t frames_emitted() const { return next_frame_; }

 private:
  // Frames [begin, end) from the samples held; total_samples: the stream's length once known
  // (the end may be mirrored), -1 while samples may still come.
  torch::Tensor frames(int64_t begin, int64_t end, int64_t total_samples) const;
  torch::Tensor gather(int64_t begin, int64_t end, int64_t total_samples) const;
  torch::Tensor emit(int64_t begin, int64_t end, int64_t total_samples);

  FeatureExtractor extractor_;
  std::string source_;
  torch::Tensor head_;        // float64: the first frame_length samples (what the start mirrors)
  double last_sample_ = 0.0;  // nemo_mel: the last sample received, before its pre-emphasis
  torch::Tensor buffer_;      // float64: samples [buffer_start_, received_)
  int64_t buffer_start_ = 0, received_ = 0, next_frame_ = 0;
  bool finished_ = false;
  std::vector<torch::Tensor> held_;  // whisper_log_mel: log-mel frames until finish()
};

}  // namespace attnzoo
