// NeMo's log-mel frontend (features kind nemo_mel) against NeMo's own FilterbankFeatures
// (make_nemo_mel_reference.py runs the pinned nemo_toolkit's module): six option sets (the
// FastConformer ASR and streaming configs, and every other choice of window, normalisation, mel
// norm, magnitude power, log guard, padding and no log) on speech of two voices, loud, quiet,
// clipped and noisy speech, white noise, tones and silence. Then the frame counts, and features
// pushed in blocks.
#include <attnzoo/preprocess/audio/fbank.h>
#include <attnzoo/preprocess/audio/read.h>
#include "audio_test_util.h"
#include "common/reference_files.h"
#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>

namespace attnzoo {
namespace test_nemo_mel {
using testing::error_of;
using ::testing::HasSubstr;
using testing::max_abs_diff;

const testing::ReferenceFiles& nemo_reference() {
  static const testing::ReferenceFiles files(ATTNZOO_NEMO_MEL_REFERENCE_DIR, "nemo_mel");
  return files;
}

// A case's option set, in AudioFeatureOptions' field names.
AudioFeatureOptions nemo_options(const nlohmann::json& o) {
  AudioFeatureOptions options;
  options.kind = parse_audio_feature_kind(o["kind"].get<std::string>());
  options.sample_rate = o["sample_rate"].get<int64_t>();
  options.num_mel_bins = o["num_mel_bins"].get<int64_t>();
  options.frame_length_ms = o["frame_length_ms"].get<double>();
  options.frame_shift_ms = o["frame_shift_ms"].get<double>();
  options.window = parse_frame_window(o["window"].get<std::string>());
  options.n_fft = o["n_fft"].get<int64_t>();
  options.preemphasis = o["preemphasis"].get<double>();
  options.low_freq = o["low_freq"].get<double>();
  options.high_freq = o["high_freq"].get<double>();
  options.mel_norm =
      o["mel_norm"].get<std::string>() == "slaney" ? MelNorm::kSlaney : MelNorm::kNone;
  options.mag_power = o["mag_power"].get<double>();
  options.log = o["log"].get<bool>();
  options.log_guard =
      o["log_guard"].get<std::string>() == "add" ? LogGuard::kAdd : LogGuard::kClamp;
  options.log_guard_value = o["log_guard_value"].get<double>();
  const auto normalize = o["normalize"].get<std::string>();
  options.normalize = normalize == "per_feature"    ? FeatureNormalize::kPerFeature
                      : normalize == "all_features" ? FeatureNormalize::kAllFeatures
                                                    : FeatureNormalize::kNone;
  options.exact_pad = o["exact_pad"].get<bool>();
  return options;
}

torch::Tensor signal(const std::string& name) {
  return read_audio(nemo_reference().manifest()["signals"][name].get<std::string>()).samples;
}

// NeMo runs in float32; ours is the float64 computation rounded once. The rule, as for the Kaldi
// fbank (audio_test_util.h's parity, at 1e-4): every element within 1e-4 of NeMo's plus twice
// NeMo's own error against its float64 oracle, and within 2e-6 of that oracle. Linear
// features (log false) are compared relative to max(1, |value|). The table shows, per case and
// signal, the largest differences and how many elements are over 1e-4 from NeMo's float32.
TEST(NemoMel, MatchesNemosPreprocessor) {
  const auto& refs = nemo_reference().tensors("nemo_mel.safetensors");
  const auto& cases = nemo_reference().manifest()["cases"];
  ASSERT_GE(cases.size(), 6u);
  std::printf("%-22s %-16s %6s  %-26s %s\n", "case", "signal", "frames",
              "max|ours-NeMo| (NeMo's own)", "max|ours-float64|");
  std::set<std::string> kinds_of_normalize;
  for (const auto& [name, c] : cases.items()) {
    const auto options = nemo_options(c["options"]);
    kinds_of_normalize.insert(to_string(options.normalize));
    const FeatureExtractor extractor(options);
    for (const auto& [signal_name, path] : nemo_reference().manifest()["signals"].items()) {
      SCOPED_TRACE(name + " / " + signal_name);
      const auto ours = extractor(signal(signal_name), signal_name).to(torch::kDouble);
      const auto nemo = refs[name + "/" + signal_name + "/nemo"].to(torch::kDouble);
      const auto& oracle = refs[name + "/" + signal_name + "/float64"];
      ASSERT_EQ(ours.sizes(), oracle.sizes());
      const auto scale = options.log ? torch::ones_like(oracle) : oracle.abs().clamp_min(1.0);
      const auto d = (ours - nemo).abs() / scale;
      const auto own = (nemo - oracle).abs() / scale;
      const auto exact = ((ours - oracle).abs() / scale).max().item<double>();
      std::printf("%-22s %-16s %6ld  %.2e (%.2e) %5ld>1e-4  %.2e\n", name.c_str(),
                  signal_name.c_str(), long(ours.size(0)), d.max().item<double>(),
                  own.max().item<double>(), long((d > 1e-4).sum().item<int64_t>()), exact);
      EXPECT_TRUE((d <= 1e-4 + 2.0 * own).all().item<bool>())
          << "ours vs NeMo: max " << d.max().item<double>() << ", NeMo's own error "
          << own.max().item<double>();
      EXPECT_LE(exact, 2e-6);  // float32 rounding of the float64 result: half an ulp below 32
    }
  }
  EXPECT_EQ(kinds_of_normalize, (std::set<std::string>{"per_feature", "all_features", "none"}));
}

// NeMo's valid frames: one fewer than torch.stft gives, N / hop centred with an even n_fft, and
// N / hop - 1 with exact_pad; the features of a signal one sample short of a frame are an error
// naming the numbers.
TEST(NemoMel, FrameCounts) {
  AudioFeatureOptions o;
  o.kind = AudioFeatureKind::kNemoMel;
  o.frame_length_ms = 25.0;
  const FeatureExtractor centred(o);
  EXPECT_EQ(centred.fft_size(), 512);  // the next power of two above 400 samples
  EXPECT_EQ(centred.num_frames(159), 0);
  EXPECT_EQ(centred.num_frames(160), 1);
  EXPECT_EQ(centred.num_frames(16000), 100);
  EXPECT_EQ(centred.num_frames(16159), 100);
  EXPECT_EQ(centred.min_samples(), 160);
  EXPECT_EQ(centred(torch::rand({160}) - 0.5).size(0), 1);
  EXPECT_THAT(error_of([&] { centred(torch::rand({159}) - 0.5, "short.wav"); }),
              HasSubstr("short.wav: too short: 159 samples"));
  o.exact_pad = true;
  o.n_fft = 400;
  const FeatureExtractor exact(o);
  EXPECT_EQ(exact.num_frames(16000), 99);
  EXPECT_EQ(exact.min_samples(), 320);
  o.frame_shift_ms = 10.0625;  // 161 samples
  EXPECT_THAT(error_of([&] { FeatureExtractor{o}; }), HasSubstr("exact_pad needs an even hop"));
  o = AudioFeatureOptions{};
  o.kind = AudioFeatureKind::kNemoMel;
  o.log_guard_value = 0.0;
  EXPECT_THAT(error_of([&] { FeatureExtractor{o}; }), HasSubstr("log_guard_value: must be > 0"));
}

// Blocks of random sizes (down to one sample) give the one-shot features exactly: the
// pre-emphasis carries across blocks, and the end's zero padding and dropped frame wait for
// finish(). With per_feature normalisation everything comes from finish().
TEST(NemoMel, BlocksEqualOneShot) {
  const auto speech = signal("speech_16k").narrow(0, 0, 16000 + 123);
  std::mt19937_64 rng(11);
  for (const auto& [name, c] : nemo_reference().manifest()["cases"].items()) {
    const FeatureExtractor extractor(nemo_options(c["options"]));
    SCOPED_TRACE(name + ": " + extractor.describe());
    const auto whole = extractor(speech);
    for (int64_t max_block : {1, 97, 5000}) {
      const auto [streamed, early] = testing::stream_in_blocks(extractor, speech, max_block, rng);
      ASSERT_EQ(streamed.sizes(), whole.sizes()) << "blocks up to " << max_block;
      EXPECT_TRUE(torch::equal(streamed, whole))
          << "blocks up to " << max_block << ": max diff " << max_abs_diff(streamed, whole);
      if (extractor.streams()) {
        EXPECT_GT(early, whole.size(0) - 5) << "frames held back";
      } else {
        EXPECT_EQ(early, 0);
      }
    }
  }
}

}  // namespace test_nemo_mel
}  // namespace attnzoo
