// libFuzzer target: the audio frontend on arbitrary bytes, from the container checks through
// libsndfile's decoders, the downmix and libsoxr's resampling to Kaldi fbank (or Whisper's,
// ESPnet's or NeMo's log-mel, by the input's length) computed block by block. Whatever opens must
// decode to at most max_seconds of audio at a rate in range, and its features must have the
// extractor's width, finite values and the frame count of the samples that came out of the
// resampler; whatever is refused must be refused with AudioError. The seed corpus
// (tests/fuzz/corpus/audio/) holds a tiny file of each container and encoding.
#include <attnzoo/preprocess/audio/fbank.h>
#include <attnzoo/preprocess/audio/features.h>
#include <attnzoo/preprocess/audio/read.h>

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>

namespace {

using namespace attnzoo;

// Small limits keep each run fast; the checks are the same at any size.
constexpr double kMaxSeconds = 10.0;

const FeatureExtractor& extractor(size_t choice) {
  static const FeatureExtractor fbank{AudioFeatureOptions{}};
  static const FeatureExtractor mirrored = [] {
    AudioFeatureOptions o;
    o.snip_edges = false;
    o.window = FrameWindow::kHamming;
    o.num_mel_bins = 23;
    o.dither = 1.0;
    return FeatureExtractor(o);
  }();
  static const FeatureExtractor whisper = [] {
    AudioFeatureOptions o;
    o.kind = AudioFeatureKind::kWhisperLogMel;
    return FeatureExtractor(o);
  }();
  static const FeatureExtractor stft = [] {
    AudioFeatureOptions o;
    o.kind = AudioFeatureKind::kStftLogMel;
    o.n_fft = 512;
    o.low_freq = 0.0;
    return FeatureExtractor(o);
  }();
  static const FeatureExtractor nemo = [] {
    AudioFeatureOptions o;
    o.kind = AudioFeatureKind::kNemoMel;
    o.frame_length_ms = 25.0;
    o.normalize = FeatureNormalize::kPerFeature;
    return FeatureExtractor(o);
  }();
  switch (choice % 5) {
    case 0:
      return fbank;
    case 1:
      return mirrored;
    case 2:
      return whisper;
    case 3:
      return stft;
    default:
      return nemo;
  }
}

}  // namespace

// libsndfile 1.2.0 leaks the vorbis_info it allocates when an Ogg Vorbis header fails to parse
// (sf_open returns NULL, leaving nothing of ours to free): a third-party leak, reported once
// here rather than stopping every run.
extern "C" const char* __lsan_default_suppressions() { return "leak:vorbis_info_init\n"; }
extern "C" const char* __lsan_default_options() { return "print_suppressions=0"; }

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  AudioReadOptions options;
  options.max_seconds = kMaxSeconds;
  options.block_frames = 4096;
  const auto& features = extractor(size);
  int64_t frames = 0;
  try {
    auto reader = AudioReader::from_memory(data, size, "fuzz", options);
    const auto& info = reader.info();
    if (info.sample_rate < 1000 || info.sample_rate > 768000 || info.channels < 1 ||
        info.frames < 1) {
      __builtin_trap();
    }
    const auto result = stream_audio_features(reader, features, [&](const torch::Tensor& f) {
      if (f.dim() != 2 || f.size(0) < 1 || f.size(1) != features.num_features() ||
          f.scalar_type() != torch::kFloat || !torch::isfinite(f).all().item<bool>()) {
        __builtin_trap();
      }
      frames += f.size(0);
    });
    if (double(result.info.frames) > kMaxSeconds * double(info.sample_rate) + 1 ||
        frames != features.num_frames(result.samples)) {
      __builtin_trap();
    }
  } catch (const AudioError&) {
    return 0;
  }
  return 0;
}
