// Files to features: the block pipeline (reader -> soxr -> FeatureStream) equals reading,
// resampling and featurising all at once; a long stream goes through in bounded memory; batches
// are padded; a config's features section becomes the options.
#include <attnzoo/api/frontend_options.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/preprocess/audio/features.h>
#include <attnzoo/preprocess/audio/resample.h>
#include "audio_test_util.h"
#include "tools/bench/memory_tracking.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

namespace attnzoo {
namespace test_audio_features {

using ::testing::HasSubstr;
using testing::reference;

std::vector<AudioFeatureOptions> pipelines() {
  AudioFeatureOptions fbank, mirror, whisper;
  mirror.snip_edges = false;
  mirror.window = FrameWindow::kHamming;
  whisper.kind = AudioFeatureKind::kWhisperLogMel;
  return {fbank, mirror, whisper};
}

// Any rate, any channels, any block size: the same features as the whole file at once.
TEST(AudioFeatures, BlocksEqualTheWholeFile) {
  for (const auto& [name, file] : reference().manifest()["stereo"].items()) {
    const auto path = reference().path(file.get<std::string>());
    const auto wave = read_audio(path);
    const auto mono = resample(wave.samples, double(wave.info.sample_rate), 16000.0);
    for (const auto& options : pipelines()) {
      const FeatureExtractor extractor(options);
      SCOPED_TRACE(name + ": " + extractor.describe());
      const auto whole = extractor(mono);
      for (int64_t block : {777, 16384}) {
        AudioReadOptions read;
        read.block_frames = block;
        const auto streamed = audio_file_features(path, extractor, read);
        EXPECT_EQ(streamed.info.sample_rate, wave.info.sample_rate);
        EXPECT_EQ(streamed.samples, mono.size(0));
        EXPECT_TRUE(torch::equal(streamed.features, whole)) << "block " << block;
      }
    }
  }
}

// A deterministic 44.1 kHz test signal, one second at a time: ten seconds of gliding tones and
// noise, made once, repeated at changing levels.
torch::Tensor synthetic_second(int64_t second) {
  static const std::vector<torch::Tensor> pool = [] {
    std::vector<torch::Tensor> seconds;
    for (int64_t s = 0; s < 10; ++s) {
      const auto t = (torch::arange(44100, torch::kDouble) + double(s) * 44100.0) / 44100.0;
      const auto tone = 0.3 * torch::sin(2.0 * M_PI * (200.0 + 150.0 * double(s)) * t);
      const auto noise =
          0.02 * torch::randn({44100}, at::make_generator<at::CPUGeneratorImpl>(s), torch::kDouble);
      seconds.push_back((tone + noise).to(torch::kFloat));
    }
    return seconds;
  }();
  return pool[second % 10] * (1.0f + 0.25f * float(second % 7));
}

// Runs `body` with LibTorch on one thread: ctest runs two tests at once on two cores, and an
// intra-op pool with more threads than free cores spins (the hour below took minutes so).
template <typename Body>
void on_one_thread(Body body) {
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  body();
  torch::set_num_threads(threads);
}

// One hour of 44.1 kHz audio through the streaming pipeline: the tensors it allocates stay
// under 4 MB at any moment (the waveform alone would be 635 MB in float32 at 44.1 kHz), and its
// first minute equals the one-shot features of the first 70 seconds.
TEST(AudioFeatures, AnHourInBoundedMemory) {
  install_cpu_memory_tracking();
  // An hour; ten minutes in a sanitizer build (testing::kSanitized).
  const int64_t seconds = testing::kSanitized ? 600 : 3600;
  const int64_t kept = 6000;  // frames kept to compare: the first minute
  synthetic_second(0);        // the pool, before measuring
  const FeatureExtractor fbank{AudioFeatureOptions{}};
  std::vector<torch::Tensor> first_minute;
  int64_t frames = 0;
  double checksum = 0.0;
  const auto sink = [&](const torch::Tensor& f) {
    if (frames < kept) first_minute.push_back(f.narrow(0, 0, std::min(kept - frames, f.size(0))));
    frames += f.size(0);
    checksum += f.sum().item<double>();
  };
  const auto start = std::chrono::steady_clock::now();
  int64_t peak = 0;
  on_one_thread([&] {
    PeakMemoryScope scope(torch::kCPU);
    Resampler resampler(44100, 16000);
    FeatureStream stream(fbank, "synthetic hour");
    for (int64_t s = 0; s < seconds; ++s) {
      const auto f = stream.push(resampler.process(synthetic_second(s)));
      if (f.size(0) > 0) sink(f);
    }
    sink(stream.push(resampler.flush()));
    const auto tail = stream.finish();
    if (tail.size(0) > 0) sink(tail);
    peak = scope.peak_above_start();
  });
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "%ld s at 44.1 kHz -> %ld frames in %.1f s (%.0fx real time); peak tensor memory "
      "%.2f MB (the first minute of frames kept: %.2f MB)\n",
      long(seconds), long(frames), elapsed, seconds / elapsed, peak / 1e6, kept * 80 * 4 / 1e6);
  EXPECT_EQ(frames, fbank.num_frames(std::llround(seconds * 16000.0)));
  EXPECT_TRUE(std::isfinite(checksum));
  EXPECT_LT(peak, 6'000'000 + kept * 80 * 4);

  std::vector<torch::Tensor> seventy;
  for (int64_t s = 0; s < 70; ++s) seventy.push_back(synthetic_second(s));
  const auto one_shot = fbank(resample(torch::cat(seventy), 44100, 16000));
  EXPECT_TRUE(torch::equal(torch::cat(first_minute), one_shot.narrow(0, 0, kept)));
}

// The file path too: a 10-minute 8 kHz WAV featurised with the frames dropped as they come.
TEST(AudioFeatures, FileReadInBoundedMemory) {
  install_cpu_memory_tracking();
  testing::Scratch scratch;
  const auto path = scratch.path("ten_minutes.wav");
  {
    SF_INFO info{};
    info.samplerate = 8000;
    info.channels = 2;
    info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
    SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
    ASSERT_NE(file, nullptr);
    for (int64_t s = 0; s < 600; ++s) {
      const auto x = resample(synthetic_second(s), 44100, 8000);
      const auto stereo = torch::stack({x, x * 0.5f}, 1).contiguous();
      sf_writef_float(file, stereo.data_ptr<float>(), stereo.size(0));
    }
    sf_close(file);
  }
  const FeatureExtractor fbank{AudioFeatureOptions{}};
  int64_t frames = 0, peak = 0;
  AudioFeatures result;
  on_one_thread([&] {
    PeakMemoryScope scope(torch::kCPU);
    auto reader = AudioReader::open(path);
    result =
        stream_audio_features(reader, fbank, [&](const torch::Tensor& f) { frames += f.size(0); });
    peak = scope.peak_above_start();
  });
  std::printf(
      "10 min at 8 kHz stereo -> %ld frames; peak tensor memory %.2f MB (the waveform "
      "at 16 kHz in float64 would be %.1f MB)\n",
      long(frames), peak / 1e6, 600 * 16000 * 8 / 1e6);
  EXPECT_EQ(result.samples, 600 * 16000);
  EXPECT_EQ(frames, fbank.num_frames(600 * 16000));
  EXPECT_LT(peak, 6'000'000);
}

TEST(AudioFeatures, PadsBatches) {
  const auto a = torch::rand({5, 3}), b = torch::rand({2, 3});
  const auto batch = pad_features({a, b});
  EXPECT_EQ(batch.features.sizes(), (std::vector<int64_t>{2, 5, 3}));
  EXPECT_EQ(batch.lengths.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(batch.lengths, torch::tensor({5, 2}, torch::kLong)));
  EXPECT_TRUE(torch::equal(batch.features[0], a));
  EXPECT_TRUE(torch::equal(batch.features[1].narrow(0, 0, 2), b));
  EXPECT_TRUE(torch::all(batch.features[1].narrow(0, 2, 3) == 0).item<bool>());
  EXPECT_THAT(
      [&] {
        pad_features({a, torch::rand({2, 4})});
      },
      ::testing::ThrowsMessage<c10::ValueError>(HasSubstr("utterance 1 is [2, 4]")));
}

// The zoo's speech configs carry their features; a model without them says so.
TEST(AudioFeatures, OptionsFromConfig) {
  const auto config = model_config("wenet_conformer_librispeech");
  const auto options = audio_feature_options(config.features);
  EXPECT_EQ(options.kind, AudioFeatureKind::kFbank);
  EXPECT_EQ(options.sample_rate, 16000);
  EXPECT_EQ(options.num_mel_bins, 80);
  EXPECT_EQ(options.window, FrameWindow::kPovey);
  EXPECT_EQ(options.dither, 0.0);
  EXPECT_TRUE(options.int16_scale);
  const FeatureExtractor extractor(options);
  EXPECT_EQ(extractor.frame_length(), 400);
  const std::optional<AudioFeatureOptions> none;
  EXPECT_THAT([&] { audio_feature_options(none); },
              ::testing::ThrowsMessage<c10::ValueError>(HasSubstr("no features section")));
}

}  // namespace test_audio_features
}  // namespace attnzoo
