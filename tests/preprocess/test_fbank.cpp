// Kaldi fbank and Whisper log-mel against their references: kaldi-native-fbank and
// torchaudio.compliance.kaldi.fbank on espeak-ng speech (two voices; loud, quiet, clipped and
// noisy), tones, white noise and silence for ten option sets (make_audio_reference.py), each
// within half a float32 ulp of the float64 computation, the stereo 22.05 and 44.1 kHz files through
// our downmix and resampler, openai-whisper's log_mel_spectrogram, ESPnet's STFT log-mel against
// torchaudio's MelSpectrogram; then streaming equals one-shot, dither, and the errors of a
// waveform too short, empty or not finite.
#include <attnzoo/preprocess/audio/fbank.h>
#include <attnzoo/preprocess/audio/features.h>
#include <attnzoo/preprocess/audio/read.h>
#include <attnzoo/preprocess/audio/resample.h>
#include "audio_test_util.h"
#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace attnzoo {
namespace test_fbank {
using testing::error_of;

using ::testing::HasSubstr;
using testing::max_abs_diff;
using testing::reference;

torch::Tensor signal(const std::string& name) {
  return read_audio(reference().path(reference().manifest()["signals"][name].get<std::string>()))
      .samples;
}

// Compares ours with both references for every option set on `signals` (name -> 16 kHz
// waveform) using the reference tensors in `file`; prints one line per case. Returns the largest
// difference between the two references themselves.
double check_fbank_parity(const std::map<std::string, torch::Tensor>& signals,
                          const std::string& file) {
  const auto& refs = reference().tensors(file);
  double between = 0.0;
  std::printf("%-22s %-18s %6s  %-22s %-22s %s\n", "set", "signal", "frames",
              "max|ours-knf| (knf's)", "max|ours-ta| (ta's)", "max|ours-float64|");
  for (const auto& [set, values] : reference().manifest()["sets"].items()) {
    const FeatureExtractor fbank(testing::fbank_options(values));
    for (const auto& [name, x] : signals) {
      SCOPED_TRACE(set + " / " + name);
      const auto ours = fbank(x, name);
      const auto& oracle = refs[set + "/" + name + "/float64"];
      if (ours.sizes() != oracle.sizes()) {
        ADD_FAILURE() << "frames: ours " << ours.sizes() << ", reference " << oracle.sizes();
        continue;
      }
      const auto knf = testing::parity(ours, refs[set + "/" + name + "/knf"], oracle);
      const auto ta = testing::parity(ours, refs[set + "/" + name + "/torchaudio"], oracle);
      const double exact = max_abs_diff(ours, oracle);
      std::printf("%-22s %-18s %6ld  %.2e (%.1e) %3ld>  %.2e (%.1e) %3ld>  %.2e\n", set.c_str(),
                  name.c_str(), long(ours.size(0)), knf.max, knf.reference_max, long(knf.over),
                  ta.max, ta.reference_max, long(ta.over), exact);
      EXPECT_TRUE(knf.ok) << "kaldi-native-fbank: max " << knf.max << ", its own error "
                          << knf.reference_max;
      EXPECT_TRUE(ta.ok) << "torchaudio: max " << ta.max << ", its own error " << ta.reference_max;
      // Ours is the float64 computation, in float32: its only error is the float32 rounding of
      // the logs, half a float32 ulp of each value (9.5e-7 for values in [16, 32)); 1e-9 covers
      // the two float64 computations' own difference where a value sits on a rounding boundary.
      // So every difference from a reference is that reference's own error, and the elements
      // above 1e-3 are the ill-conditioned bins where its float32 arithmetic fails.
      EXPECT_LE(exact, 1e-5);
      const auto rounded = oracle.to(torch::kFloat);
      const auto half_ulp =
          0.5 *
          (torch::nextafter(rounded.abs(), torch::full_like(rounded, INFINITY)) - rounded.abs())
              .to(torch::kDouble);
      const auto excess = (ours.to(torch::kDouble) - oracle).abs() - half_ulp;
      EXPECT_LE(excess.max().item<double>(), 1e-9) << "more than half a float32 ulp from float64";
      between = std::max(between, max_abs_diff(refs[set + "/" + name + "/knf"],
                                               refs[set + "/" + name + "/torchaudio"]));
    }
  }
  std::printf("max |knf - torchaudio| over all cases: %.2e\n", between);
  return between;
}

TEST(Fbank, MatchesKaldiNativeFbankAndTorchaudio) {
  std::map<std::string, torch::Tensor> signals;
  for (const auto& [name, file] : reference().manifest()["signals"].items())
    signals[name] = signal(name);
  const double between = check_fbank_parity(signals, "fbank.safetensors");
  // Why the rule above and not a plain max <= 1e-3 from each reference: the two references
  // differ from each other by more than 2e-3 in some element, so no features at all lie within
  // 1e-3 of both. Should they ever agree that closely, tighten the rule to the plain bound.
  EXPECT_GT(between, 2e-3) << "the references now agree within 2e-3: assert max <= 1e-3 instead";
}

// Silence is all zeros: every mel energy is 0 and every feature Kaldi's floor, ln(FLT_EPSILON).
TEST(Fbank, SilenceIsTheLogFloor) {
  const FeatureExtractor fbank{AudioFeatureOptions{}};
  const auto features = fbank(torch::zeros({16000}));
  EXPECT_EQ(features.size(0), 98);
  EXPECT_TRUE(
      torch::all(features == static_cast<float>(std::log(1.1920928955078125e-07))).item<bool>());
}

// The stereo files at 22.05 and 44.1 kHz go through our reader (downmix) and resampler; the
// references are computed by the fixture script on the mono 16 kHz signal we produced.
TEST(Fbank, ResampledStereoMatchesReferencesOnOurSignal) {
  const auto python = testing::python();
  ASSERT_FALSE(python.empty()) << "ATTNZOO_PYTHON is not set (run the tests through ctest)";
  testing::Scratch scratch;
  const FeatureExtractor fbank{AudioFeatureOptions{}};
  std::map<std::string, torch::Tensor> signals;
  io::TensorDict tensors;
  for (const auto& [name, file] : reference().manifest()["stereo"].items()) {
    const auto path = reference().path(file.get<std::string>());
    const auto wave = read_audio(path);
    ASSERT_EQ(wave.info.channels, 2);
    const auto mono = resample(wave.samples, double(wave.info.sample_rate), 16000.0);
    EXPECT_EQ(mono.size(0),
              std::llround(double(wave.samples.size(0)) * 16000.0 / wave.info.sample_rate));
    signals[name] = mono;
    tensors.insert(name, mono);
    // The file's streaming path (blocks through soxr's streaming API) gives the same features.
    AudioReadOptions blocks;
    blocks.block_frames = 3001;
    const auto streamed = audio_file_features(path, fbank, blocks);
    EXPECT_TRUE(torch::equal(streamed.features, fbank(mono))) << name;
  }
  const auto in = scratch.path("signals.safetensors"), out = scratch.path("reference.safetensors");
  io::save_safetensors(in, tensors);
  const std::string command =
      python + " " + ATTNZOO_AUDIO_REFERENCE_SCRIPT + " --signals " + in + " " + out;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const auto refs = io::load_safetensors(out).tensors;
  std::printf("%-22s %-18s %6s  %-22s %-22s\n", "set", "signal", "frames", "max|ours-knf| (knf's)",
              "max|ours-ta| (ta's)");
  for (const auto& [set, values] : reference().manifest()["sets"].items()) {
    const FeatureExtractor extractor(testing::fbank_options(values));
    for (const auto& [name, x] : signals) {
      SCOPED_TRACE(set + " / " + name);
      const auto ours = extractor(x);
      const auto& oracle = refs[set + "/" + name + "/float64"];
      const auto knf = testing::parity(ours, refs[set + "/" + name + "/knf"], oracle);
      const auto ta = testing::parity(ours, refs[set + "/" + name + "/torchaudio"], oracle);
      std::printf("%-22s %-18s %6ld  %.2e (%.1e) %3ld>  %.2e (%.1e) %3ld>\n", set.c_str(),
                  name.c_str(), long(ours.size(0)), knf.max, knf.reference_max, long(knf.over),
                  ta.max, ta.reference_max, long(ta.over));
      EXPECT_TRUE(knf.ok) << knf.max;
      EXPECT_TRUE(ta.ok) << ta.max;
      EXPECT_LE(max_abs_diff(ours, oracle), 1e-5);
    }
  }
}

TEST(WhisperLogMel, MatchesOpenaiWhisperAndTheNumpyTranscription) {
  const auto& refs = reference().tensors("whisper.safetensors");
  std::printf("%-28s %-28s %6s %s\n", "case", "reference", "frames", "max |ours - reference|");
  for (const auto& [key, c] : reference().manifest()["whisper"].items()) {
    SCOPED_TRACE(key);
    AudioFeatureOptions o;
    o.kind = AudioFeatureKind::kWhisperLogMel;
    o.sample_rate = c["sample_rate"].get<int64_t>();
    o.num_mel_bins = c["num_mel_bins"].get<int64_t>();
    o.frame_length_ms = c["frame_length_ms"].get<double>();
    o.frame_shift_ms = c["frame_shift_ms"].get<double>();
    const auto ours = FeatureExtractor(o)(signal(c["signal"].get<std::string>()));
    const auto& theirs = refs[key];
    ASSERT_EQ(ours.sizes(), theirs.sizes());
    const double max = max_abs_diff(ours, theirs);
    std::printf("%-28s %-28s %6ld %.2e\n", key.c_str(), c["reference"].get<std::string>().c_str(),
                long(ours.size(0)), max);
    EXPECT_LE(max, 1e-3);
  }
}

// ESPnet's default frontend against torchaudio's MelSpectrogram (the same computation), as ESPnet
// runs it in float32 and in float64.
TEST(StftLogMel, MatchesTorchaudiosMelSpectrogram) {
  const auto& refs = reference().tensors("stft.safetensors");
  ASSERT_FALSE(reference().manifest()["stft"].empty());
  for (const auto& [key, c] : reference().manifest()["stft"].items()) {
    SCOPED_TRACE(key);
    AudioFeatureOptions o;
    o.kind = AudioFeatureKind::kStftLogMel;
    o.sample_rate = c["sample_rate"].get<int64_t>();
    o.num_mel_bins = c["num_mel_bins"].get<int64_t>();
    o.n_fft = c["n_fft"].get<int64_t>();
    o.frame_length_ms = c["frame_length_ms"].get<double>();
    o.frame_shift_ms = c["frame_shift_ms"].get<double>();
    o.low_freq = c["low_freq"].get<double>();
    o.high_freq = c["high_freq"].get<double>();
    const FeatureExtractor extractor(o);
    const auto x = signal(c["signal"].get<std::string>());
    const auto ours = extractor(x);
    EXPECT_EQ(ours.size(0), 1 + x.size(0) / extractor.frame_shift());
    for (const auto& [suffix, tolerance] : {std::pair{"/torchaudio", 2e-3}, {"/float64", 1e-5}}) {
      const auto& theirs = refs[key + suffix];
      ASSERT_EQ(ours.sizes(), theirs.sizes()) << suffix;
      EXPECT_LE(max_abs_diff(ours, theirs), tolerance) << suffix;
    }
  }
}

// Kaldi's and librosa's filters as the references compute them, on their own.
TEST(MelFilters, ShapesAndRefusals) {
  const auto kaldi = kaldi_mel_banks(80, 512, 16000, 20, 0);
  EXPECT_EQ(kaldi.sizes(), (std::vector<int64_t>{80, 256}));
  // Every filter covers an FFT bin; above the lowest ones (narrower than an FFT bin) each peaks
  // within an FFT bin of its centre (above 0.75).
  const auto peaks = std::get<0>(kaldi.max(1));
  EXPECT_TRUE((peaks > 0).all().item<bool>());
  EXPECT_TRUE((peaks.narrow(0, 40, 40) > 0.75).all().item<bool>());
  const auto slaney = slaney_mel_filters(80, 400, 16000, 0, 8000);
  EXPECT_EQ(slaney.sizes(), (std::vector<int64_t>{80, 201}));
  // Slaney normalisation: each triangle's area in Hz is 1 (2 / width · width / 2).
  const auto area = slaney.sum(1) * (16000.0 / 400.0);
  EXPECT_LT((area - 1.0).abs().max().item<double>(), 0.1);
  EXPECT_THAT([] { kaldi_mel_banks(200, 256, 16000, 20, 0); },
              ::testing::ThrowsMessage<c10::ValueError>(HasSubstr("covers no FFT bin")));
  EXPECT_THAT([] { kaldi_mel_banks(80, 512, 16000, 20, 9000); },
              ::testing::ThrowsMessage<c10::ValueError>(HasSubstr("high_freq <= sample_rate / 2")));
  EXPECT_THAT([] { kaldi_mel_banks(80, 512, 16000, 7000, -2000); },
              ::testing::ThrowsMessage<c10::ValueError>(HasSubstr("low_freq < high_freq")));
}

// Every option set, Whisper and ESPnet's STFT log-mel, pushed in random blocks (down to one
// sample), equal the one-shot features exactly.
TEST(FeatureStream, BlocksEqualOneShot) {
  const auto speech = signal("speech_16k").narrow(0, 0, 16000 + 123);
  std::vector<AudioFeatureOptions> all;
  for (const auto& [set, values] : reference().manifest()["sets"].items()) {
    all.push_back(testing::fbank_options(values));
  }
  AudioFeatureOptions whisper;
  whisper.kind = AudioFeatureKind::kWhisperLogMel;
  all.push_back(whisper);
  AudioFeatureOptions stft;
  stft.kind = AudioFeatureKind::kStftLogMel;
  stft.n_fft = 512;
  stft.low_freq = 0.0;
  all.push_back(stft);
  AudioFeatureOptions dithered;
  dithered.dither = 1.0;
  dithered.dither_seed = 7;
  all.push_back(dithered);
  std::mt19937_64 rng(6);
  for (const auto& options : all) {
    const FeatureExtractor extractor(options);
    SCOPED_TRACE(extractor.describe());
    const auto whole = extractor(speech);
    for (int64_t max_block : {1, 97, 400, 5000}) {
      const auto streamed = testing::stream_in_blocks(extractor, speech, max_block, rng).features;
      ASSERT_EQ(streamed.sizes(), whole.sizes()) << "blocks up to " << max_block;
      EXPECT_TRUE(torch::equal(streamed, whole))
          << "blocks up to " << max_block << ": max diff " << max_abs_diff(streamed, whole);
    }
  }
}

// Frames are emitted as soon as they are complete (fbank), not held to the end.
TEST(FeatureStream, EmitsFramesAsTheyComplete) {
  FeatureStream stream{FeatureExtractor{AudioFeatureOptions{}}};
  EXPECT_EQ(stream.push(torch::rand({399}) - 0.5).size(0), 0);
  EXPECT_EQ(stream.push(torch::rand({1}) - 0.5).size(0), 1);  // 400 samples: frame 0
  EXPECT_EQ(stream.push(torch::rand({1600}) - 0.5).size(0), 10);
  EXPECT_EQ(stream.finish().size(0), 0);
  EXPECT_EQ(stream.frames_emitted(), 11);
}

// Kaldi's frame counts, and the mirrored edges of snip_edges=false on signals shorter than one
// frame (Kaldi folds them as often as needed; torchaudio cannot, kaldi-native-fbank agrees).
TEST(Fbank, FrameCounts) {
  AudioFeatureOptions o;
  const FeatureExtractor snip(o);
  EXPECT_EQ(snip.frame_length(), 400);
  EXPECT_EQ(snip.frame_shift(), 160);
  EXPECT_EQ(snip.fft_size(), 512);
  EXPECT_EQ(snip.num_frames(399), 0);
  EXPECT_EQ(snip.num_frames(400), 1);
  EXPECT_EQ(snip.num_frames(16000), 98);
  o.snip_edges = false;
  const FeatureExtractor mirror(o);
  EXPECT_EQ(mirror.num_frames(79), 0);
  EXPECT_EQ(mirror.num_frames(80), 1);
  EXPECT_EQ(mirror.num_frames(16000), 100);
  const auto short_signal = torch::linspace(-0.5, 0.5, 100);
  const auto features = mirror(short_signal);
  EXPECT_EQ(features.size(0), 1);
  EXPECT_TRUE(torch::isfinite(features).all().item<bool>());
  AudioFeatureOptions w;
  w.kind = AudioFeatureKind::kWhisperLogMel;
  const FeatureExtractor whisper(w);
  EXPECT_EQ(whisper.num_frames(200), 0);  // reflect padding of 200 needs 201 samples
  EXPECT_EQ(whisper.num_frames(201), 1);
  EXPECT_EQ(whisper.num_frames(16000), 100);
}

// Dither is Gaussian noise of the given deviation in int16 units, reproducible from its seed.
TEST(Fbank, DitherIsSeeded) {
  AudioFeatureOptions o;
  o.dither = 1.0;
  o.dither_seed = 1;
  const auto silence = torch::zeros({8000});
  const auto a = FeatureExtractor(o)(silence), b = FeatureExtractor(o)(silence);
  EXPECT_TRUE(torch::equal(a, b));
  o.dither_seed = 2;
  const auto c = FeatureExtractor(o)(silence);
  EXPECT_FALSE(torch::equal(a, c));
  // Noise of variance 1: the log energies sit far above the floor (ln FLT_EPSILON = -15.9, even
  // in the lowest bins, which pre-emphasis attenuates 30-fold), and the two seeds agree on
  // average.
  EXPECT_GT(a.min().item<double>(), -12.0);
  EXPECT_NEAR(a.mean().item<double>(), c.mean().item<double>(), 0.05);
  o.dither = 0.0;
  EXPECT_TRUE(torch::equal(FeatureExtractor(o)(silence),
                           torch::full_like(a, float(std::log(1.1920928955078125e-07)))));
}

TEST(Fbank, RefusesWaveformsItCannotFeaturise) {
  const FeatureExtractor fbank{AudioFeatureOptions{}};
  EXPECT_EQ(error_of<AudioError>([&] { fbank(torch::zeros({0}), "a.wav"); }),
            "a.wav: no audio (0 samples)");
  EXPECT_EQ(error_of<AudioError>([&] { fbank(torch::zeros({399}), "b.wav"); }),
            "b.wav: too short: 399 samples (24.9375 ms at 16000 Hz); one frame needs 400 "
            "samples (25 ms frames, snip_edges true)");
  AudioFeatureOptions mirror;
  mirror.snip_edges = false;
  EXPECT_EQ(error_of<AudioError>([&] { FeatureExtractor{mirror}(torch::zeros({50}), "c.wav"); }),
            "c.wav: too short: 50 samples (3.125 ms at 16000 Hz); one frame needs 80 samples "
            "(half of a 10 ms shift, snip_edges false)");
  AudioFeatureOptions whisper;
  whisper.kind = AudioFeatureKind::kWhisperLogMel;
  EXPECT_EQ(error_of<AudioError>([&] { FeatureExtractor{whisper}(torch::zeros({200}), "d.wav"); }),
            "d.wav: too short: 200 samples (12.5 ms at 16000 Hz); one frame needs 201 samples "
            "(n_fft 400 with reflect padding of 200, hop 160)");
  auto bad = torch::zeros({1000});
  bad[500] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(error_of<AudioError>([&] { fbank(bad, "e.wav"); }),
            "e.wav: NaN or infinite sample at sample 500 (0.03125 s)");
  bad[500] = 0.0f;
  bad[999] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(error_of<AudioError>([&] { waveform_features(bad, 8000, fbank, "f.wav"); }),
            "f.wav: NaN or infinite sample at sample 999 (0.124875 s)");
}

TEST(Fbank, RefusesBadOptions) {
  const auto refused = [](const std::function<void(AudioFeatureOptions&)>& change) {
    AudioFeatureOptions o;
    change(o);
    try {
      FeatureExtractor extractor(o);
    } catch (const c10::ValueError& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("(no error)");
  };
  EXPECT_THAT(refused([](auto& o) { o.frame_length_ms = 0.1; }),
              HasSubstr("frame_length_ms: 0.1 ms at 16000 Hz is 1 samples; a frame needs at "
                        "least 2"));
  EXPECT_THAT(refused([](auto& o) { o.frame_shift_ms = 30; }),
              HasSubstr("frame_shift_ms: 30 ms at 16000 Hz is 480 samples"));
  EXPECT_THAT(refused([](auto& o) { o.dither = -1; }), HasSubstr("dither: must be >= 0"));
  EXPECT_THAT(refused([](auto& o) { o.sample_rate = 0; }), HasSubstr("sample_rate"));
  EXPECT_THAT(refused([](auto& o) { o.high_freq = 8001; }), HasSubstr("high_freq"));
  EXPECT_THAT([] { parse_frame_window("hann"); },
              ::testing::ThrowsMessage<c10::ValueError>(HasSubstr("window 'hann'")));
}

}  // namespace test_fbank
}  // namespace attnzoo
