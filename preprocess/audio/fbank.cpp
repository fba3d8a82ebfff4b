#include <attnzoo/kernels/cpu_parallel.h>
#include <attnzoo/preprocess/audio/fbank.h>

#include <attnzoo/core/splitmix64.h>
#include <attnzoo/preprocess/audio/finite_samples.h>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace attnzoo {
namespace {

// Frames per rfft/matmul: temporaries of a few hundred KB, which glibc serves from memory it holds
// (512 frames took 4x the time of 64 on a 2.1 s utterance, most of it in page faults).
constexpr int64_t kBatchFrames = 64;
constexpr int64_t kDitherChunk = 64;                    // frames per dither generator
constexpr double kFltEpsilon = 1.1920928955078125e-07;  // FLT_EPSILON, Kaldi's log floor

// Kaldi's WindowSize() / WindowShift(): static_cast<int32>(samp_freq * 0.001 * ms).
int64_t samples_of(double rate, double ms) { return static_cast<int64_t>(rate * 0.001 * ms); }

int64_t round_up_to_power_of_two(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

double kaldi_mel(double hz) { return 1127.0 * std::log1p(hz / 700.0); }

// librosa's Slaney mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above.
constexpr double kSlaneyFsp = 200.0 / 3.0, kSlaneyMinLogHz = 1000.0,
                 kSlaneyMinLogMel = kSlaneyMinLogHz / kSlaneyFsp;
double slaney_logstep() { return std::log(6.4) / 27.0; }
double slaney_hz_to_mel(double hz) {
  return hz >= kSlaneyMinLogHz
             ? kSlaneyMinLogMel + std::log(hz / kSlaneyMinLogHz) / slaney_logstep()
             : hz / kSlaneyFsp;
}
torch::Tensor slaney_mel_to_hz(const torch::Tensor& mel) {
  return torch::where(mel >= kSlaneyMinLogMel,
                      kSlaneyMinLogHz * torch::exp(slaney_logstep() * (mel - kSlaneyMinLogMel)),
                      kSlaneyFsp * mel);
}

// Kaldi's FeatureWindowFunction (symmetric windows, a = 2π / (N − 1)).
torch::Tensor kaldi_window(FrameWindow type, int64_t length) {
  const auto n = torch::arange(length, torch::kDouble);
  const double a = 2.0 * M_PI / double(length - 1);
  const auto hann = 0.5 - 0.5 * torch::cos(a * n);
  switch (type) {
    case FrameWindow::kHanning:
      return hann;
    case FrameWindow::kPovey:
      return torch::pow(hann, 0.85);
    case FrameWindow::kHamming:
      return 0.54 - 0.46 * torch::cos(a * n);
    case FrameWindow::kRectangular:
      return torch::ones({length}, torch::kDouble);
    case FrameWindow::kBlackman:  // Kaldi's --blackman-coeff default, 0.42
      return 0.42 - 0.5 * torch::cos(a * n) + 0.08 * torch::cos(2.0 * a * n);
    case FrameWindow::kBartlett:  // torch.bartlett_window(periodic=False)
      return 1.0 - torch::abs(2.0 * n / double(length - 1) - 1.0);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown window");
}

std::string format_number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// One pass per frame instead of LibTorch's op-by-op passes over [n, frame_length]: the frame
// (any strides: an unfold view of the held samples) minus its mean (remove_dc), pre-emphasised
// (Kaldi: x[i] -= p x[i-1] from the end, x[0] -= p x[0]), times the window, zero-padded to
// fft_size. float64 in and out.
torch::Tensor prepare_frames(const torch::Tensor& frames, const torch::Tensor& window,
                             int64_t fft_size, bool remove_dc, double preemphasis) {
  TORCH_INTERNAL_ASSERT(frames.dim() == 2 && frames.scalar_type() == torch::kDouble &&
                        window.is_contiguous() && window.size(0) == frames.size(1));
  const int64_t n = frames.size(0), length = frames.size(1);
  const int64_t row = frames.stride(0), col = frames.stride(1);
  auto out = torch::empty({n, fft_size}, torch::kDouble);
  const double* x = frames.const_data_ptr<double>();
  const double* w = window.const_data_ptr<double>();
  double* y = out.mutable_data_ptr<double>();
  attnzoo::kernels::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      const double* in = x + m * row;
      double* frame = y + m * fft_size;
      for (int64_t i = 0; i < length; ++i) frame[i] = in[i * col];
      if (remove_dc) {
        double sum = 0.0;
        for (int64_t i = 0; i < length; ++i) sum += frame[i];
        const double mean = sum / static_cast<double>(length);
        for (int64_t i = 0; i < length; ++i) frame[i] -= mean;
      }
      if (preemphasis != 0.0) {
        for (int64_t i = length - 1; i > 0; --i) frame[i] -= preemphasis * frame[i - 1];
        frame[0] -= preemphasis * frame[0];
      }
      for (int64_t i = 0; i < length; ++i) frame[i] *= w[i];
      std::fill(frame + length, frame + fft_size, 0.0);
    }
  });
  return out;
}

// |X_k|^2 of the first `bins` bins of complex128 spectra [n, >= bins] -> [n, bins] float64.
torch::Tensor power_spectrum(const torch::Tensor& spectrum, int64_t bins) {
  TORCH_INTERNAL_ASSERT(spectrum.is_contiguous() &&
                        spectrum.scalar_type() == torch::kComplexDouble);
  const int64_t n = spectrum.size(0), width = spectrum.size(1);
  auto out = torch::empty({n, bins}, torch::kDouble);
  const auto* x = spectrum.const_data_ptr<c10::complex<double>>();
  double* y = out.mutable_data_ptr<double>();
  attnzoo::kernels::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      for (int64_t k = 0; k < bins; ++k) {
        const auto z = x[m * width + k];
        y[m * bins + k] = z.real() * z.real() + z.imag() * z.imag();
      }
    }
  });
  return out;
}

}  // namespace

AudioFeatureKind parse_audio_feature_kind(const std::string& name) {
  if (name == "fbank") return AudioFeatureKind::kFbank;
  if (name == "whisper_log_mel") return AudioFeatureKind::kWhisperLogMel;
  if (name == "stft_log_mel") return AudioFeatureKind::kStftLogMel;
  if (name == "nemo_mel") return AudioFeatureKind::kNemoMel;
  TORCH_CHECK_VALUE(false, "features kind '", name,
                    "': expected fbank, whisper_log_mel, stft_log_mel or nemo_mel");
}

FrameWindow parse_frame_window(const std::string& name) {
  if (name == "povey") return FrameWindow::kPovey;
  if (name == "hamming") return FrameWindow::kHamming;
  if (name == "hanning") return FrameWindow::kHanning;
  if (name == "rectangular") return FrameWindow::kRectangular;
  if (name == "blackman") return FrameWindow::kBlackman;
  if (name == "bartlett") return FrameWindow::kBartlett;
  TORCH_CHECK_VALUE(false, "window '", name,
                    "': expected povey, hamming, hanning, rectangular, blackman or bartlett");
}

// Kaldi's MelBanks (mel-computations.cc) without VTLN: filter b rises linearly in mel from
// left = low + b·Δ to centre = left + Δ and falls to right = left + 2Δ, Δ = (high − low) / (bins
// + 1) in mel; FFT bin k at frequency k · rate / fft_size, k < fft_size / 2.
torch::Tensor kaldi_mel_banks(int64_t num_bins, int64_t fft_size, double sample_rate,
                              double low_freq, double high_freq, bool allow_empty) {
  TORCH_CHECK_VALUE(num_bins >= 1, "num_mel_bins must be >= 1, got ", num_bins);
  TORCH_CHECK_VALUE(fft_size >= 2 && sample_rate > 0, "kaldi_mel_banks: fft_size ", fft_size,
                    ", sample_rate ", sample_rate);
  const double nyquist = 0.5 * sample_rate;
  const double high = high_freq > 0.0 ? high_freq : nyquist + high_freq;
  TORCH_CHECK_VALUE(low_freq >= 0.0 && low_freq < high && high <= nyquist,
                    "mel frequencies: need 0 <= low_freq < high_freq <= sample_rate / 2 = ",
                    nyquist, " Hz, got low_freq ", low_freq, ", high_freq ", high_freq,
                    " (high_freq <= 0 counts down from ", nyquist, ": ", high, ")");
  const double mel_low = kaldi_mel(low_freq), mel_high = kaldi_mel(high);
  const double delta = (mel_high - mel_low) / double(num_bins + 1);
  const auto b = torch::arange(num_bins, torch::kDouble).unsqueeze(1);
  const auto left = mel_low + b * delta, centre = left + delta, right = left + 2.0 * delta;
  const auto hz = torch::arange(fft_size / 2, torch::kDouble) * (sample_rate / double(fft_size));
  const auto mel = (1127.0 * torch::log1p(hz / 700.0)).unsqueeze(0);
  const auto up = (mel - left) / (centre - left), down = (right - mel) / (right - centre);
  const auto banks = torch::clamp_min(torch::minimum(up, down), 0.0);
  const auto empty = (banks.sum(1) == 0).nonzero();
  TORCH_CHECK_VALUE(allow_empty || empty.size(0) == 0, "num_mel_bins ", num_bins,
                    " is too large for an FFT of ", fft_size, " points at ", sample_rate,
                    " Hz between ", low_freq, " and ", high, " Hz: mel bin ",
                    empty.size(0) ? empty[0][0].item<int64_t>() : 0,
                    " covers no FFT bin (Kaldi refuses this too; torchaudio's fbank and "
                    "allow_empty_mel_bins take it as empty)");
  return banks;
}

// librosa.filters.mel(norm="slaney", htk=False): bins + 2 points evenly spaced on the Slaney
// scale, triangles in Hz over the rfft frequencies, each scaled by 2 / its width in Hz (norm).
torch::Tensor slaney_mel_filters(int64_t num_bins, int64_t n_fft, double sample_rate, double fmin,
                                 double fmax, bool norm) {
  TORCH_CHECK_VALUE(num_bins >= 1 && n_fft >= 2 && sample_rate > 0 && fmin >= 0 && fmin < fmax,
                    "slaney_mel_filters: bins ", num_bins, ", n_fft ", n_fft, ", rate ",
                    sample_rate, ", fmin ", fmin, ", fmax ", fmax);
  const auto freqs = torch::arange(n_fft / 2 + 1, torch::kDouble) * (sample_rate / double(n_fft));
  const auto mel_f = slaney_mel_to_hz(torch::linspace(
      slaney_hz_to_mel(fmin), slaney_hz_to_mel(fmax), num_bins + 2, torch::kDouble));
  const auto fdiff = mel_f.narrow(0, 1, num_bins + 1) - mel_f.narrow(0, 0, num_bins + 1);
  const auto ramps = mel_f.unsqueeze(1) - freqs.unsqueeze(0);
  const auto lower = -ramps.narrow(0, 0, num_bins) / fdiff.narrow(0, 0, num_bins).unsqueeze(1);
  const auto upper = ramps.narrow(0, 2, num_bins) / fdiff.narrow(0, 1, num_bins).unsqueeze(1);
  const auto weights = torch::clamp_min(torch::minimum(lower, upper), 0.0);
  if (!norm) return weights;
  const auto enorm = 2.0 / (mel_f.narrow(0, 2, num_bins) - mel_f.narrow(0, 0, num_bins));
  return weights * enorm.unsqueeze(1);
}

FeatureExtractor::FeatureExtractor(AudioFeatureOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  const bool fbank = o.kind == AudioFeatureKind::kFbank;
  TORCH_CHECK_VALUE(o.sample_rate >= 1 && o.sample_rate <= 1'000'000,
                    "AudioFeatureOptions.sample_rate: 1 to 1000000 Hz, got ", o.sample_rate);
  TORCH_CHECK_VALUE(o.num_mel_bins >= 1 && o.num_mel_bins <= 4096,
                    "AudioFeatureOptions.num_mel_bins: 1 to 4096, got ", o.num_mel_bins);
  TORCH_CHECK_VALUE(std::isfinite(o.frame_length_ms) && std::isfinite(o.frame_shift_ms) &&
                        o.frame_length_ms <= 1000.0 && o.frame_shift_ms <= 1000.0,
                    "AudioFeatureOptions: frame_length_ms and frame_shift_ms must be at most ",
                    "1000 ms, got ", o.frame_length_ms, " and ", o.frame_shift_ms);
  length_ = samples_of(double(o.sample_rate), o.frame_length_ms);
  shift_ = samples_of(double(o.sample_rate), o.frame_shift_ms);
  TORCH_CHECK_VALUE(length_ >= 2, "AudioFeatureOptions.frame_length_ms: ", o.frame_length_ms,
                    " ms at ", o.sample_rate, " Hz is ", length_,
                    " samples; a frame needs at least 2");
  TORCH_CHECK_VALUE(shift_ >= 1 && shift_ <= length_,
                    "AudioFeatureOptions.frame_shift_ms: ", o.frame_shift_ms, " ms at ",
                    o.sample_rate, " Hz is ", shift_, " samples; need 1 to frame_length (", length_,
                    " samples)");
  TORCH_CHECK_VALUE(o.fixed_frames >= 0 && o.fixed_frames <= (int64_t{1} << 24),
                    "AudioFeatureOptions.fixed_frames: 0 to 2^24, got ", o.fixed_frames);
  TORCH_CHECK_VALUE(
      std::isfinite(o.normalize_mean) && std::isfinite(o.normalize_std) && o.normalize_std > 0.0,
      "AudioFeatureOptions: normalize_mean must be finite and normalize_std > 0, "
      "got ",
      o.normalize_mean, " and ", o.normalize_std);
  if (fbank) {
    TORCH_CHECK_VALUE(std::isfinite(o.dither) && o.dither >= 0.0,
                      "AudioFeatureOptions.dither: must be >= 0, got ", o.dither);
    TORCH_CHECK_VALUE(o.preemphasis >= 0.0 && o.preemphasis <= 1.0,
                      "AudioFeatureOptions.preemphasis: 0 to 1, got ", o.preemphasis);
    TORCH_CHECK_VALUE(o.energy_floor >= 0.0, "AudioFeatureOptions.energy_floor: must be >= 0, got ",
                      o.energy_floor);
    fft_size_ = round_up_to_power_of_two(length_);
    offset_ = o.snip_edges ? 0 : length_ / 2 - shift_ / 2;
    window_ = kaldi_window(o.window, length_);
    mel_ = kaldi_mel_banks(o.num_mel_bins, fft_size_, double(o.sample_rate), o.low_freq,
                           o.high_freq, o.allow_empty_mel_bins);
  } else if (o.kind == AudioFeatureKind::kNemoMel) {
    // torch.stft as NeMo calls it: a symmetric window of win samples centred in n_fft, frames
    // centred on multiples of the hop with n_fft / 2 zeros at either end, or (exact_pad)
    // starting (n_fft - hop) / 2 zeros before them.
    const int64_t win = length_;
    const int64_t n_fft = o.n_fft > 0 ? o.n_fft : round_up_to_power_of_two(win);
    TORCH_CHECK_VALUE(n_fft >= win && n_fft <= (int64_t{1} << 20),
                      "AudioFeatureOptions.n_fft: at least the frame's ", win,
                      " samples and at most 2^20, got ", n_fft);
    TORCH_CHECK_VALUE(!o.exact_pad || shift_ % 2 == 0,
                      "AudioFeatureOptions.exact_pad needs an even hop (NeMo refuses an odd one), "
                      "got ",
                      shift_, " samples");
    TORCH_CHECK_VALUE(o.preemphasis >= 0.0 && o.preemphasis <= 1.0,
                      "AudioFeatureOptions.preemphasis: 0 to 1, got ", o.preemphasis);
    TORCH_CHECK_VALUE(std::isfinite(o.mag_power) && o.mag_power > 0.0 && o.mag_power <= 8.0,
                      "AudioFeatureOptions.mag_power: above 0 and at most 8, got ", o.mag_power);
    TORCH_CHECK_VALUE(std::isfinite(o.log_guard_value) && o.log_guard_value > 0.0,
                      "AudioFeatureOptions.log_guard_value: must be > 0, got ", o.log_guard_value);
    length_ = fft_size_ = n_fft;
    TORCH_CHECK_VALUE(shift_ <= length_, "AudioFeatureOptions.frame_shift_ms: ", shift_,
                      " samples is longer than n_fft");
    offset_ = o.exact_pad ? (n_fft - shift_) / 2 : n_fft / 2;
    window_ = torch::zeros({n_fft}, torch::kDouble);
    window_.narrow(0, (n_fft - win) / 2, win).copy_(kaldi_window(o.window, win));
    const double nyquist = 0.5 * double(o.sample_rate);
    const double fmax = o.high_freq > 0.0 ? o.high_freq : nyquist + o.high_freq;
    TORCH_CHECK_VALUE(o.low_freq >= 0.0 && o.low_freq < fmax && fmax <= nyquist,
                      "mel frequencies: need 0 <= low_freq < high_freq <= sample_rate / 2 = ",
                      nyquist, " Hz, got low_freq ", o.low_freq, ", high_freq ", o.high_freq);
    mel_ = slaney_mel_filters(o.num_mel_bins, fft_size_, double(o.sample_rate), o.low_freq, fmax,
                              o.mel_norm == MelNorm::kSlaney);
  } else {
    // torch.stft(center=True): frames of n_fft samples every hop, the first centred on sample 0
    // (reflect padding of n_fft / 2), a periodic hann window of win_length centred in each.
    const int64_t win = length_;
    const int64_t n_fft = o.kind == AudioFeatureKind::kStftLogMel && o.n_fft > 0 ? o.n_fft : win;
    TORCH_CHECK_VALUE(n_fft >= win && n_fft <= (int64_t{1} << 20),
                      "AudioFeatureOptions.n_fft: at least the frame's ", win,
                      " samples and at most 2^20, got ", n_fft);
    length_ = fft_size_ = n_fft;
    TORCH_CHECK_VALUE(shift_ <= length_, "AudioFeatureOptions.frame_shift_ms: ", shift_,
                      " samples is longer than the frame");
    offset_ = n_fft / 2;
    const auto n = torch::arange(win, torch::kDouble);
    window_ = torch::zeros({n_fft}, torch::kDouble);
    window_.narrow(0, (n_fft - win) / 2, win)
        .copy_(0.5 - 0.5 * torch::cos((2.0 * M_PI / double(win)) * n));  // periodic hann
    double fmin = 0.0, fmax = 0.5 * double(o.sample_rate);
    if (o.kind == AudioFeatureKind::kStftLogMel) {
      fmin = o.low_freq;
      fmax = o.high_freq > 0.0 ? o.high_freq : fmax + o.high_freq;
      TORCH_CHECK_VALUE(fmin >= 0.0 && fmin < fmax && fmax <= 0.5 * double(o.sample_rate),
                        "mel frequencies: need 0 <= low_freq < high_freq <= sample_rate / 2 = ",
                        0.5 * double(o.sample_rate), " Hz, got low_freq ", o.low_freq,
                        ", high_freq ", o.high_freq);
    }
    mel_ = slaney_mel_filters(o.num_mel_bins, fft_size_, double(o.sample_rate), fmin, fmax);
  }
  mel_t_ = mel_.t().contiguous();
}

int64_t FeatureExtractor::num_frames(int64_t n) const {
  if (n <= 0) return 0;
  if (options_.kind == AudioFeatureKind::kWhisperLogMel) {
    // torch.stft's reflect padding needs more samples than the pad; the last frame is dropped.
    return n <= offset_ ? 0 : n / shift_;
  }
  if (options_.kind == AudioFeatureKind::kStftLogMel) return n <= offset_ ? 0 : 1 + n / shift_;
  if (options_.kind == AudioFeatureKind::kNemoMel) {
    // NeMo's get_seq_len: one frame fewer than torch.stft returns.
    return std::max<int64_t>(0, floor_div(n + 2 * offset_ - length_, shift_));
  }
  if (options_.snip_edges) return n < length_ ? 0 : 1 + (n - length_) / shift_;
  return (n + shift_ / 2) / shift_;
}

int64_t FeatureExtractor::min_samples() const {
  if (options_.kind == AudioFeatureKind::kWhisperLogMel) return std::max(offset_ + 1, shift_);
  if (options_.kind == AudioFeatureKind::kStftLogMel) return offset_ + 1;
  if (options_.kind == AudioFeatureKind::kNemoMel) {
    return std::max<int64_t>(1, length_ - 2 * offset_ + shift_);
  }
  return options_.snip_edges ? length_ : shift_ - shift_ / 2;
}

std::string FeatureExtractor::describe() const {
  const auto& o = options_;
  std::ostringstream out;
  if (o.kind == AudioFeatureKind::kWhisperLogMel) {
    out << "Whisper log-mel: " << o.num_mel_bins << " Slaney mel bins, n_fft " << length_
        << ", hop " << shift_ << " at " << o.sample_rate << " Hz, periodic hann, centred";
    return out.str();
  }
  const double nyquist = 0.5 * double(o.sample_rate);
  if (o.kind == AudioFeatureKind::kNemoMel) {
    out << "NeMo mel: " << o.num_mel_bins << " mel bins (" << to_string(o.mel_norm) << ") "
        << o.low_freq << "-" << (o.high_freq > 0 ? o.high_freq : nyquist + o.high_freq)
        << " Hz, n_fft " << length_ << ", " << to_string(o.window) << " of "
        << samples_of(double(o.sample_rate), o.frame_length_ms) << ", hop " << shift_ << " at "
        << o.sample_rate << " Hz, " << (o.exact_pad ? "exact pad" : "centred") << ", preemphasis "
        << o.preemphasis << ", |X|^" << o.mag_power;
    if (o.log) out << ", log (" << to_string(o.log_guard) << " " << o.log_guard_value << ")";
    out << ", normalize " << to_string(o.normalize);
    return out.str();
  }
  if (o.kind == AudioFeatureKind::kStftLogMel) {
    out << "STFT log-mel: " << o.num_mel_bins << " Slaney mel bins " << o.low_freq << "-"
        << (o.high_freq > 0 ? o.high_freq : nyquist + o.high_freq) << " Hz, n_fft " << length_
        << ", periodic hann of " << samples_of(double(o.sample_rate), o.frame_length_ms) << ", hop "
        << shift_ << " at " << o.sample_rate << " Hz, centred, natural log";
    return out.str();
  }
  out << "Kaldi fbank: " << o.num_mel_bins << " mel bins " << o.low_freq << "-"
      << (o.high_freq > 0 ? o.high_freq : nyquist + o.high_freq) << " Hz, "
      << format_number(o.frame_length_ms) << " ms frames (" << length_ << " samples, FFT "
      << fft_size_ << ") every " << format_number(o.frame_shift_ms) << " ms (" << shift_
      << " samples) at " << o.sample_rate << " Hz, " << to_string(o.window)
      << " window, preemphasis " << o.preemphasis << ", dc offset "
      << (o.remove_dc_offset ? "removed" : "kept") << ", snip_edges "
      << (o.snip_edges ? "true" : "false") << ", dither " << o.dither
      << (o.int16_scale ? ", int16 scale" : "");
  return out.str();
}

torch::Tensor FeatureExtractor::log_mel(torch::Tensor frames, int64_t first) const {
  const auto& o = options_;
  const int64_t n = frames.size(0);
  if (o.kind == AudioFeatureKind::kFbank) {
    if (o.dither > 0.0) {
      // Noise of frame m from the generator of chunk m / kDitherChunk: independent of batching.
      std::vector<torch::Tensor> noise;
      const int64_t c0 = first / kDitherChunk, c1 = (first + n - 1) / kDitherChunk;
      for (int64_t c = c0; c <= c1; ++c) {
        auto generator = at::make_generator<at::CPUGeneratorImpl>(
            splitmix64(o.dither_seed ^ splitmix64(static_cast<uint64_t>(c))));
        noise.push_back(torch::randn({kDitherChunk, length_}, generator, torch::kDouble));
      }
      frames = frames + o.dither * torch::cat(noise).narrow(0, first - c0 * kDitherChunk, n);
    }
  }
  const bool fbank = o.kind == AudioFeatureKind::kFbank;
  // nemo_mel's pre-emphasis acts on the whole signal (FeatureStream::push), not per frame.
  const auto padded = prepare_frames(frames, window_, fft_size_, fbank && o.remove_dc_offset,
                                     fbank ? o.preemphasis : 0.0);
  // Kaldi's filters leave out the Nyquist bin; Whisper's include it.
  auto power = power_spectrum(torch::fft::rfft(padded, fft_size_, 1),
                              fbank ? fft_size_ / 2 : fft_size_ / 2 + 1);
  if (o.kind == AudioFeatureKind::kNemoMel) {
    if (o.mag_power != 2.0) power = power.pow_(0.5 * o.mag_power);
    auto mel = torch::matmul(power, mel_t_);
    if (!o.log) return mel;
    if (o.log_guard == LogGuard::kAdd) return mel.add_(o.log_guard_value).log_();
    return mel.clamp_min_(o.log_guard_value).log_();
  }
  auto energies = torch::matmul(power, mel_t_);
  if (fbank) return energies.clamp_min_(kFltEpsilon).log_();
  if (o.kind == AudioFeatureKind::kStftLogMel) return energies.clamp_min_(1e-10).log_();
  return energies.clamp_min_(1e-10).log10_();
}

torch::Tensor FeatureExtractor::whisper_normalize(const torch::Tensor& log_mel) {
  const auto clamped = torch::maximum(log_mel, log_mel.max() - 8.0);
  return (clamped + 4.0) / 4.0;
}

// normalize_batch: statistics over the frames, std unbiased (0 for a single frame) plus 1e-5.
torch::Tensor FeatureExtractor::nemo_normalize(const torch::Tensor& frames,
                                               FeatureNormalize normalize) {
  constexpr double kStdFloor = 1e-5;  // NeMo's CONSTANT
  if (normalize == FeatureNormalize::kNone) return frames;
  const bool per_feature = normalize == FeatureNormalize::kPerFeature;
  const int64_t count = per_feature ? frames.size(0) : frames.numel();
  const auto mean = per_feature ? frames.mean(0, true) : frames.mean();
  const auto centred = frames - mean;
  const auto squares = per_feature ? centred.square().sum(0, true) : centred.square().sum();
  const auto std = count > 1 ? (squares / double(count - 1)).sqrt_() : torch::zeros_like(squares);
  return centred / (std + kStdFloor);
}

bool FeatureExtractor::holds_utterance() const {
  return options_.kind == AudioFeatureKind::kWhisperLogMel || options_.fixed_frames > 0 ||
         (options_.kind == AudioFeatureKind::kNemoMel &&
          options_.normalize != FeatureNormalize::kNone);
}

torch::Tensor FeatureExtractor::normalized(torch::Tensor frames) const {
  if (options_.normalize_mean != 0.0) frames = frames - options_.normalize_mean;
  if (options_.normalize_std != 1.0) frames = frames / options_.normalize_std;
  return frames;
}

torch::Tensor FeatureExtractor::utterance(torch::Tensor frames) const {
  if (options_.kind == AudioFeatureKind::kWhisperLogMel) frames = whisper_normalize(frames);
  if (options_.kind == AudioFeatureKind::kNemoMel) {
    frames = nemo_normalize(frames, options_.normalize);
  }
  const int64_t fixed = options_.fixed_frames;
  if (fixed > 0 && frames.size(0) > fixed) frames = frames.narrow(0, 0, fixed);
  if (fixed > 0 && frames.size(0) < fixed) {
    frames = torch::cat(
        {frames, torch::zeros({fixed - frames.size(0), frames.size(1)}, frames.options())});
  }
  return normalized(frames);
}

torch::Tensor FeatureExtractor::operator()(const torch::Tensor& waveform,
                                           const std::string& source) const {
  FeatureStream stream(*this, source);
  const auto body = stream.push(waveform);
  const auto tail = stream.finish();
  return body.size(0) == 0 ? tail : tail.size(0) == 0 ? body : torch::cat({body, tail});
}

FeatureStream::FeatureStream(FeatureExtractor extractor, std::string source)
    : extractor_(std::move(extractor)),
      source_(std::move(source)),
      head_(torch::empty({0}, torch::kDouble)),
      buffer_(torch::empty({0}, torch::kDouble)) {}

torch::Tensor FeatureStream::gather(int64_t begin, int64_t end, int64_t total) const {
  const int64_t length = extractor_.length_, shift = extractor_.shift_;
  auto index = (torch::arange(begin, end, torch::kLong) * shift - extractor_.offset_).unsqueeze(1) +
               torch::arange(length, torch::kLong).unsqueeze(0);
  const auto kind = extractor_.options_.kind;
  const bool centred = kind != AudioFeatureKind::kFbank;
  torch::Tensor outside;  // nemo_mel: torch.stft's zero padding
  if (kind == AudioFeatureKind::kNemoMel) {
    outside = index < 0;
    if (total >= 0) outside = outside.logical_or_(index >= total);
    index = index.clamp(0, total >= 0 ? total - 1 : received_ - 1);
  } else if (centred) {
    // torch's reflect padding: ... x2, x1 | x0, x1, ... (the edge sample once); total > offset.
    index = torch::where(index < 0, -index, index);
    if (total >= 0) index = torch::where(index >= total, 2 * total - 2 - index, index);
  } else if (total < 0) {
    // Kaldi's mirror: ... x1, x0 | x0, x1, ...; only the start is known yet.
    index = torch::where(index < 0, -index - 1, index);
  } else {
    // Kaldi's ExtractWindow loop (s = -s - 1 below 0, s = 2N - 1 - s past the end) until inside:
    // the reflections have period 2N, so a signal shorter than the frame folds as often as needed.
    const auto r = torch::remainder(index, 2 * total);
    index = torch::where(r < total, r, 2 * total - 1 - r);
  }
  const int64_t head_length = head_.size(0);
  const auto position =
      torch::where(index < head_length, index, index - buffer_start_ + head_length);
  TORCH_INTERNAL_ASSERT(index.min().item<int64_t>() >= 0 &&
                            index.max().item<int64_t>() < received_ &&
                            !((index >= head_length) & (index < buffer_start_)).any().item<bool>(),
                        "FeatureStream: a frame needs samples no longer held");
  auto samples = torch::take(torch::cat({head_, buffer_}), position);
  return outside.defined() ? samples.masked_fill_(outside, 0.0) : samples;
}

torch::Tensor FeatureStream::frames(int64_t begin, int64_t end, int64_t total) const {
  const int64_t length = extractor_.length_, shift = extractor_.shift_;
  const int64_t first = begin * shift - extractor_.offset_;
  const int64_t last = (end - 1) * shift - extractor_.offset_ + length;
  if (first >= buffer_start_ && last <= received_) {
    return buffer_.narrow(0, first - buffer_start_, last - first).unfold(0, length, shift);
  }
  return gather(begin, end, total);
}

// Frames [begin, end) as float64 log mel energies: the frames inside the held samples by unfold
// (a view), the mirrored ones at either end by index, in batches of kBatchFrames.
torch::Tensor FeatureStream::emit(int64_t begin, int64_t end, int64_t total) {
  const int64_t shift = extractor_.shift_, offset = extractor_.offset_;
  const int64_t inside_from = std::clamp(ceil_div(buffer_start_ + offset, shift), begin, end);
  const int64_t inside_to =
      std::clamp(floor_div(received_ - extractor_.length_ + offset, shift) + 1, inside_from, end);
  std::vector<torch::Tensor> out;
  for (const auto& [from, to] : {std::pair{begin, inside_from}, std::pair{inside_from, inside_to},
                                 std::pair{inside_to, end}}) {
    for (int64_t m = from; m < to; m += kBatchFrames) {
      const int64_t n = std::min(kBatchFrames, to - m);
      out.push_back(extractor_.log_mel(frames(m, m + n, total), m));
    }
  }
  if (out.empty()) return torch::empty({0, extractor_.num_features()}, torch::kDouble);
  return out.size() == 1 ? out[0] : torch::cat(out);
}

torch::Tensor FeatureStream::push(const torch::Tensor& samples) {
  TORCH_CHECK_VALUE(!finished_, "FeatureStream::push: the stream is finished");
  TORCH_CHECK_VALUE(samples.dim() == 1 && samples.is_floating_point(),
                    "FeatureStream::push: samples must be a 1-D floating-point tensor, got ",
                    samples.scalar_type(), " ", samples.sizes());
  const auto& o = extractor_.options_;
  const int64_t length = extractor_.length_, shift = extractor_.shift_;
  const int64_t offset = extractor_.offset_;
  check_finite_samples(samples, received_, double(o.sample_rate), source_);
  auto x = samples.to(torch::kCPU, torch::kDouble).contiguous();
  if (x.data_ptr() == samples.data_ptr()) x = x.clone();  // held past this call: not the caller's
  if (o.kind == AudioFeatureKind::kFbank && o.int16_scale) x.mul_(32768.0);
  const int64_t n = x.size(0);
  if (o.kind == AudioFeatureKind::kNemoMel && o.preemphasis != 0.0 && n > 0) {
    // y[i] = x[i] - p x[i-1] across blocks; the signal's first sample stays.
    auto previous = torch::empty_like(x);
    previous[0] = received_ > 0 ? last_sample_ : 0.0;
    previous.narrow(0, 1, n - 1).copy_(x.narrow(0, 0, n - 1));
    last_sample_ = x[n - 1].item<double>();
    x = x - o.preemphasis * previous;
  }
  if (head_.size(0) < length) {
    head_ = torch::cat({head_, x.narrow(0, 0, std::min(n, length - head_.size(0)))});
  }
  buffer_ = buffer_.size(0) == 0 ? x : torch::cat({buffer_, x});
  received_ += n;

  // Frame m is complete when it ends within the samples received, and the samples its start
  // mirrors are there too (the centred kinds' reflection reaches sample `offset`).
  const int64_t span = received_ - length + offset;
  int64_t ready = span >= 0 ? span / shift + 1 : 0;
  if (offset > 0 && received_ <= offset) ready = 0;
  // nemo_mel's last STFT frame is not a feature: never emit past the frames N samples give.
  if (o.kind == AudioFeatureKind::kNemoMel) {
    ready = std::min(ready, extractor_.num_frames(received_));
  }
  ready = std::max(ready, next_frame_);
  auto out = emit(next_frame_, ready, -1);
  next_frame_ = ready;

  // Keep what later frames need: from the next frame's start, and the last frame_length
  // samples (the end mirrors them once the stream is finished).
  const int64_t keep_from =
      std::max(buffer_start_, std::min(received_ - length, next_frame_ * shift - offset));
  if (keep_from > buffer_start_) {
    buffer_ = buffer_.narrow(0, keep_from - buffer_start_, received_ - keep_from).clone();
    buffer_start_ = keep_from;
  }
  if (extractor_.holds_utterance()) {
    if (out.size(0) > 0) held_.push_back(out);
    return torch::empty({0, extractor_.num_features()}, torch::kFloat);
  }
  return extractor_.normalized(out).to(torch::kFloat);
}

torch::Tensor FeatureStream::finish() {
  TORCH_CHECK_VALUE(!finished_, "FeatureStream::finish: called twice");
  finished_ = true;
  const auto& o = extractor_.options_;
  if (received_ == 0) throw AudioError(source_ + ": no audio (0 samples)");
  const int64_t total = extractor_.num_frames(received_);
  if (total == 0) {
    std::ostringstream what;
    what << source_ << ": too short: " << received_ << " samples ("
         << 1000.0 * double(received_) / double(o.sample_rate) << " ms at " << o.sample_rate
         << " Hz); one frame needs " << extractor_.min_samples() << " samples";
    if (o.kind == AudioFeatureKind::kNemoMel) {
      what << " (n_fft " << extractor_.length_ << " with zero padding of " << extractor_.offset_
           << ", hop " << extractor_.shift_ << "; NeMo's frames: (N + 2 pad - n_fft) / hop)";
    } else if (o.kind != AudioFeatureKind::kFbank) {
      what << " (n_fft " << extractor_.length_ << " with reflect padding of " << extractor_.offset_
           << ", hop " << extractor_.shift_ << ")";
    } else if (o.snip_edges) {
      what << " (" << format_number(o.frame_length_ms) << " ms frames, snip_edges true)";
    } else {
      what << " (half of a " << format_number(o.frame_shift_ms) << " ms shift, snip_edges false)";
    }
    throw AudioError(what.str());
  }
  TORCH_INTERNAL_ASSERT(next_frame_ <= total, "FeatureStream: emitted frames past the end");
  auto out = emit(next_frame_, total, received_);
  next_frame_ = total;
  if (extractor_.holds_utterance()) {
    held_.push_back(out);
    const auto all = extractor_.utterance(torch::cat(held_));
    held_.clear();
    return all.to(torch::kFloat);
  }
  return extractor_.normalized(out).to(torch::kFloat);
}

}  // namespace attnzoo
