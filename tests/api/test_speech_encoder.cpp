// attnzoo::SpeechEncoder: the frontend of the config's features section and the Conformer, end to
// end; equal to running the two by hand; errors for what cannot be encoded.
#include "api/speech_encoder.h"

#include "configs/registry.h"
#include "preprocess/audio_from_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <fstream>

namespace attnzoo {
namespace {

using ::testing::HasSubstr;

// Streaming Conformer with 20 fbank bins at 16 kHz, chunks of 4 (tests/configs/data).
const std::string kYaml =
    std::string(ATTNZOO_CONFIGS_TEST_DATA_DIR) + "/conformer_micro_stream.yaml";

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// A chirp with noise, quantised to 16 bits as a WAV file holds it.
torch::Tensor test_signal(double seconds, int64_t rate) {
  torch::manual_seed(3);
  const auto n = static_cast<int64_t>(seconds * static_cast<double>(rate));
  const auto t = torch::arange(n, torch::kDouble) / static_cast<double>(rate);
  auto x = 0.3 * torch::sin(2.0 * M_PI * (200.0 + 300.0 * t) * t) +
           0.05 * torch::randn({n}, torch::kDouble);
  return (x * 32767.0).round() / 32768.0;
}

void write_wav16(const std::string& path, const torch::Tensor& samples, int32_t rate) {
  std::ofstream out(path, std::ios::binary);
  const auto n = static_cast<uint32_t>(samples.size(0));
  const auto put32 = [&](uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  const auto put16 = [&](uint16_t v) { out.write(reinterpret_cast<const char*>(&v), 2); };
  out.write("RIFF", 4);
  put32(36 + 2 * n);
  out.write("WAVEfmt ", 8);
  put32(16);
  put16(1);  // PCM
  put16(1);  // mono
  put32(static_cast<uint32_t>(rate));
  put32(static_cast<uint32_t>(rate) * 2);
  put16(2);
  put16(16);
  out.write("data", 4);
  put32(2 * n);
  const auto pcm = (samples * 32768.0).round().clamp(-32768, 32767).to(torch::kShort).contiguous();
  out.write(reinterpret_cast<const char*>(pcm.data_ptr<int16_t>()), 2 * n);
}

TEST(SpeechEncoder, EqualsTheFrontendAndTheConformerByHand) {
  const SpeechEncoder encoder(kYaml);
  EXPECT_EQ(encoder.min_feature_frames(), 7);
  const auto signal = test_signal(1.3, 16000);
  const auto got = encoder.encode_waveform(signal.to(torch::kFloat), 16000, "chirp");
  ASSERT_TRUE(got.ok());
  EXPECT_NEAR(got.seconds, 1.3, 1e-9);
  EXPECT_EQ(got.feature_frames, 128);  // (20800 − 400) / 160 + 1
  // By hand: the same config's frontend and model.
  const auto config = resolve_model_config(kYaml);
  const FeatureExtractor fbank(audio_feature_options(config.features));
  torch::manual_seed(0);
  auto model = build_model(config);
  model.module->eval();
  torch::InferenceMode inference;
  const auto features = fbank(signal.to(torch::kFloat));
  const auto expected = std::get<0>(model.conformer->forward(features.unsqueeze(0), torch::Tensor(),
                                                             config.streaming.chunk_size,
                                                             config.streaming.num_left_chunks))[0];
  ASSERT_EQ(got.encoded.sizes(), expected.sizes());
  EXPECT_LE((got.encoded - expected).abs().max().item<double>(), 1e-5);
  EXPECT_LE((got.embedding - expected.mean(0)).abs().max().item<double>(), 1e-5);
  ASSERT_TRUE(got.log_probs.defined());
  EXPECT_EQ(got.log_probs.sizes().vec(), (std::vector<int64_t>{expected.size(0), 7}));
  EXPECT_LE((got.log_probs.exp().sum(-1) - 1.0).abs().max().item<double>(), 1e-5);
}

TEST(SpeechEncoder, FilesAtOtherRatesAndListsWithBadFiles) {
  const SpeechEncoder encoder(kYaml);
  const std::string dir = ::testing::TempDir();
  const auto signal = test_signal(1.0, 16000);
  write_wav16(dir + "/speech16k.wav", signal, 16000);
  write_wav16(dir + "/speech8k.wav", test_signal(1.0, 8000), 8000);
  std::ofstream(dir + "/text.wav") << "not audio at all";
  write_wav16(dir + "/short.wav", test_signal(0.05, 16000), 16000);
  const auto from_file = encoder.encode(dir + "/speech16k.wav");
  const auto from_memory = encoder.encode_waveform(signal.to(torch::kFloat), 16000);
  EXPECT_LE((from_file.encoded - from_memory.encoded).abs().max().item<double>(), 1e-5);
  const auto results = encoder.encode(
      std::vector<std::string>{dir + "/speech16k.wav", dir + "/missing.wav", dir + "/speech8k.wav",
                               dir + "/text.wav", dir + "/short.wav"});
  ASSERT_EQ(results.size(), 5u);
  EXPECT_TRUE(results[0].ok()) << results[0].error;
  EXPECT_TRUE(results[2].ok()) << results[2].error;  // resampled to 16 kHz
  EXPECT_NEAR(results[2].seconds, 1.0, 1e-3);
  for (size_t i : {size_t{1}, size_t{3}, size_t{4}}) {
    EXPECT_FALSE(results[i].ok());
    EXPECT_THAT(results[i].error, HasSubstr(results[i].audio));
  }
  // 0.05 s: 3 frames of 25 ms every 10 ms, the x4 subsampling needs 7.
  EXPECT_THAT(results[4].error,
              HasSubstr("too short: 0.050 s gives 3 feature frames; subsampling conv2d4 needs at "
                        "least 7 (about 0.070 s)"));
}

TEST(SpeechEncoder, BadModelsAndOptions) {
  EXPECT_THAT(error_of([] { SpeechEncoder("vit_tiny_patch16_224"); }),
              HasSubstr("is a vit model; a speech encoder needs family conformer"));
  EXPECT_THAT(error_of([] { SpeechEncoder("conformer_torchaudio_base"); }),
              HasSubstr("has no features section"));
  SpeechEncoderOptions bad_dtype;
  bad_dtype.dtype = "int8";
  EXPECT_THAT(error_of([&] { SpeechEncoder(kYaml, bad_dtype); }),
              HasSubstr("dtype must be fp32, bf16 or fp16, got 'int8'"));
  const SpeechEncoder encoder(kYaml);
  EXPECT_THAT(error_of([&] {
                encoder.encode_waveform(torch::zeros({2, 100}), 16000);
              }),
              HasSubstr("samples must be [N] (mono)"));
}

}  // namespace
}  // namespace attnzoo
