// attnzoo::SpeechEncoder: the frontend of the config's features section and the Conformer, end to
// end; equal to running the two by hand; errors for what cannot be encoded.
#include <attnzoo/api/speech_encoder.h>
#include "common/test_util.h"

#include <attnzoo/api/frontend_options.h>
#include <attnzoo/configs/registry.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <thread>

namespace attnzoo {
namespace test_speech_encoder {

using testing::error_of;
using testing::write_wav16;

using ::testing::HasSubstr;

// Streaming Conformer with 20 fbank bins at 16 kHz, chunks of 4 (tests/configs/data).
const std::string kYaml =
    std::string(ATTNZOO_CONFIGS_TEST_DATA_DIR) + "/conformer_micro_stream.yaml";

// A chirp with noise, quantised to 16 bits as a WAV file holds it.
torch::Tensor test_signal(double seconds, int64_t rate) {
  torch::manual_seed(3);
  const auto n = static_cast<int64_t>(seconds * static_cast<double>(rate));
  const auto t = torch::arange(n, torch::kDouble) / static_cast<double>(rate);
  auto x = 0.3 * torch::sin(2.0 * M_PI * (200.0 + 300.0 * t) * t) +
           0.05 * torch::randn({n}, torch::kDouble);
  return (x * 32767.0).round() / 32768.0;
}

TEST(SpeechEncoder, EqualsTheFrontendAndTheConformerByHand) {
  const SpeechEncoder encoder(kYaml);
  EXPECT_EQ(encoder.min_feature_frames(), 7);
  const auto signal = test_signal(1.3, 16000);
  const auto got = encoder.encode_waveform(signal.to(torch::kFloat), 16000, "chirp");
  ASSERT_TRUE(got.ok());
  EXPECT_NEAR(got.seconds, 1.3, 1e-9);
  EXPECT_EQ(got.feature_frames, 128);    // (20800 − 400) / 160 + 1
  EXPECT_DOUBLE_EQ(got.frame_ms, 40.0);  // 10 ms features, x4 subsampling
  EXPECT_DOUBLE_EQ(encoder.frame_period_ms(), 40.0);
  // By hand: the same config's frontend and model.
  const auto config = resolve_model_config(kYaml);
  const FeatureExtractor fbank(audio_feature_options(config.features));
  torch::manual_seed(0);
  auto model = build_model(config);
  model.module->eval();
  torch::InferenceMode inference;
  const auto features = fbank(signal.to(torch::kFloat));
  const auto expected = std::get<0>(model.module->as<ConformerEncoderImpl>()->forward(
      features.unsqueeze(0), torch::Tensor(), config.streaming.chunk_size,
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
              HasSubstr("too short: 0.050 s gives 3 feature frames; " +
                        model_config_from_yaml(kYaml).name + " needs at least 7 (about 0.070 s)"));
}

TEST(SpeechEncoder, BadModelsAndOptions) {
  EXPECT_THAT(error_of([] { SpeechEncoder("vit_tiny_patch16_224"); }),
              HasSubstr("is a vit model, which takes images; a speech encoder needs audio"));
  EXPECT_THAT(error_of([] { SpeechEncoder("conformer_torchaudio_base"); }),
              HasSubstr("has no features section"));
  SpeechEncoderOptions bad_dtype;
  bad_dtype.dtype = torch::kChar;
  EXPECT_THAT(error_of([&] { SpeechEncoder(kYaml, bad_dtype); }),
              HasSubstr("SpeechEncoder: dtype must be fp32, bf16 or fp16, got Char"));
  const SpeechEncoder encoder(kYaml);
  EXPECT_THAT(error_of([&] {
                encoder.encode_waveform(torch::zeros({2, 100}), 16000);
              }),
              HasSubstr("samples must be [N] (mono)"));
}

// Several files per forward pass, padded and masked, equal one at a time on the valid frames:
// with the config's chunk mask and with full attention; a bad file in the middle of a batch
// keeps its error and does not disturb the others.
TEST(SpeechEncoder, BatchesEqualOneAtATime) {
  const std::string dir = ::testing::TempDir();
  std::vector<std::string> paths;
  const double lengths[] = {1.0, 0.6, 1.7, 0.35, 1.2};
  for (size_t i = 0; i < 5; ++i) {
    paths.push_back(dir + "/batch" + std::to_string(i) + ".wav");
    write_wav16(paths.back(), test_signal(lengths[i], 16000) * (0.5 + 0.1 * double(i)), 16000);
  }
  paths.insert(paths.begin() + 2, dir + "/missing_in_batch.wav");
  for (const std::string chunk : {"4", "0"}) {
    SCOPED_TRACE("streaming.chunk_size=" + chunk);
    SpeechEncoderOptions one, batched;
    one.overrides = batched.overrides = {"streaming.chunk_size=" + chunk};
    one.batch_size = 1;
    batched.batch_size = 3;
    const auto a = SpeechEncoder(kYaml, one).encode(paths);
    const auto b = SpeechEncoder(kYaml, batched).encode(paths);
    ASSERT_EQ(a.size(), paths.size());
    ASSERT_EQ(b.size(), paths.size());
    for (size_t i = 0; i < paths.size(); ++i) {
      SCOPED_TRACE(paths[i]);
      ASSERT_EQ(a[i].ok(), b[i].ok()) << a[i].error << " / " << b[i].error;
      EXPECT_EQ(a[i].audio, b[i].audio);
      if (!a[i].ok()) {
        EXPECT_EQ(a[i].error, b[i].error);
        continue;
      }
      EXPECT_EQ(a[i].feature_frames, b[i].feature_frames);
      EXPECT_DOUBLE_EQ(a[i].seconds, b[i].seconds);
      ASSERT_EQ(a[i].encoded.sizes(), b[i].encoded.sizes());
      EXPECT_LE((a[i].encoded - b[i].encoded).abs().max().item<double>(), 1e-5);
      EXPECT_LE((a[i].embedding - b[i].embedding).abs().max().item<double>(), 1e-5);
      ASSERT_EQ(a[i].log_probs.sizes(), b[i].log_probs.sizes());
      EXPECT_LE((a[i].log_probs - b[i].log_probs).abs().max().item<double>(), 1e-4);
      EXPECT_GT(b[i].encode_ms, 0.0);
      EXPECT_DOUBLE_EQ(b[i].frame_ms, 40.0);
    }
    EXPECT_FALSE(b[2].ok());
    EXPECT_THAT(b[2].error, HasSubstr("missing_in_batch.wav"));
  }
  SpeechEncoderOptions bad;
  bad.batch_size = 0;
  EXPECT_THAT(error_of([&] { SpeechEncoder(kYaml, bad); }),
              HasSubstr("batch_size must be >= 1, got 0"));
}

// Live audio: pushed in blocks of awkward sizes, the stream's frames equal the offline forward
// under the same chunk mask; at another rate they equal encoding the file (the same resampler).
TEST(SpeechEncoder, StreamEqualsTheOfflineChunkMask) {
  const SpeechEncoder encoder(kYaml);
  const auto signal = test_signal(2.3, 16000).to(torch::kFloat);
  const auto offline = encoder.encode_waveform(signal, 16000);
  ASSERT_TRUE(offline.ok());
  auto stream = encoder.stream(16000);
  EXPECT_EQ(stream.chunk_size(), 4);
  std::vector<torch::Tensor> pieces;
  int64_t at = 0;
  for (const int64_t n : {1, 317, 0, 4000, 160, 9000}) {
    pieces.push_back(stream.push(signal.narrow(0, at, n)));
    at += n;
  }
  EXPECT_GT(stream.frames_emitted(), 0);  // frames come out before the end
  pieces.push_back(stream.push(signal.narrow(0, at, signal.size(0) - at)));
  pieces.push_back(stream.finish());
  const auto streamed = torch::cat(pieces);
  EXPECT_EQ(stream.frames_emitted(), streamed.size(0));
  EXPECT_NEAR(stream.seconds_received(), 2.3, 1e-9);
  ASSERT_EQ(streamed.sizes(), offline.encoded.sizes());
  EXPECT_LE((streamed - offline.encoded).abs().max().item<double>(), 1e-5);
  // The chunk changes the output (a different mask), so the comparison above means something.
  auto other = encoder.stream(16000, /*chunk=*/2);
  auto chunk2 = torch::cat({other.push(signal), other.finish()});
  ASSERT_EQ(chunk2.sizes(), offline.encoded.sizes());
  EXPECT_GT((chunk2 - offline.encoded).abs().max().item<double>(), 1e-3);

  // 8 kHz: resampled as it arrives; equals encoding the file (read and resampled in blocks).
  const std::string path = ::testing::TempDir() + "/stream8k.wav";
  const auto signal8k = test_signal(1.5, 8000).to(torch::kFloat);
  write_wav16(path, signal8k, 8000);
  const auto from_file = encoder.encode(path);
  auto stream8k = encoder.stream(8000, 0, "live8k");
  std::vector<torch::Tensor> parts;
  for (int64_t i = 0; i < signal8k.size(0); i += 1234) {
    parts.push_back(
        stream8k.push(signal8k.narrow(0, i, std::min<int64_t>(1234, signal8k.size(0) - i))));
  }
  parts.push_back(stream8k.finish());
  const auto streamed8k = torch::cat(parts);
  ASSERT_EQ(streamed8k.sizes(), from_file.encoded.sizes());
  EXPECT_LE((streamed8k - from_file.encoded).abs().max().item<double>(), 1e-5);
}

TEST(SpeechEncoder, StreamErrors) {
  const SpeechEncoder encoder(kYaml);
  auto short_stream = encoder.stream(16000, 0, "live");
  short_stream.push(test_signal(0.05, 16000).to(torch::kFloat));
  EXPECT_THAT(error_of([&] { short_stream.finish(); }),
              HasSubstr("live: too short: 0.050 s gives 3 feature frames"));
  EXPECT_THAT(error_of([&] { short_stream.push(torch::zeros({10})); }),
              HasSubstr("push after finish()"));
  auto stream = encoder.stream(16000);
  auto bad = torch::zeros({1000});
  bad[500] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(error_of([&] { stream.push(bad); }), HasSubstr("NaN"));
  EXPECT_THAT(error_of([&] {
                stream.push(torch::zeros({2, 10}));
              }),
              HasSubstr("samples must be [n] (mono)"));
  EXPECT_THAT(error_of([&] { encoder.stream(0); }), HasSubstr("sample_rate must be > 0"));
  SpeechEncoderOptions centred;
  centred.overrides = {"streaming.chunk_size=0", "architecture.causal_conv=false"};
  EXPECT_THAT(error_of([&] { SpeechEncoder(kYaml, centred).stream(16000, 4); }),
              HasSubstr("streaming needs causal_conv"));
  SpeechEncoderOptions no_chunk;
  no_chunk.overrides = {"streaming.chunk_size=0"};
  EXPECT_THAT(error_of([&] { SpeechEncoder(kYaml, no_chunk).stream(16000); }),
              HasSubstr("has no streaming.chunk_size; pass a chunk"));
  SpeechEncoderOptions whisper;
  whisper.overrides = {"features.kind=whisper_log_mel"};
  EXPECT_THAT(error_of([&] { SpeechEncoder(kYaml, whisper).stream(16000); }),
              HasSubstr("cannot stream"));
  // NeMo's log-mel streams without its utterance normalisation, not with it.
  SpeechEncoderOptions nemo;
  nemo.overrides = {"features.kind=nemo_mel", "features.normalize=per_feature"};
  EXPECT_THAT(error_of([&] { SpeechEncoder(kYaml, nemo).stream(16000); }),
              HasSubstr("uses nemo_mel features normalised over the whole utterance"));
  nemo.overrides.back() = "features.normalize=none";
  EXPECT_NO_THROW(SpeechEncoder(kYaml, nemo).stream(16000));
}

// One encoder from 4 threads at once (and a Stream per thread): the results of one thread alone.
// The two halves of encode(), as a server calls them: features read from a file, from its bytes
// in memory or from samples are the same; encode_features of several utterances equals encode()
// of each (a batch, padded and masked).
TEST(SpeechEncoder, FeaturesThenEncodeFeaturesEqualEncode) {
  const SpeechEncoder encoder(kYaml);
  const std::string dir = ::testing::TempDir();
  std::vector<std::string> paths;
  std::vector<SpeechFeatures> utterances;
  for (int i = 0; i < 3; ++i) {
    paths.push_back(dir + "/halves" + std::to_string(i) + ".wav");
    const auto signal = test_signal(0.5 + 0.45 * i, 16000);
    write_wav16(paths.back(), signal, 16000);
    const auto from_file = encoder.features(paths.back());
    std::ifstream in(paths.back(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto from_memory = encoder.features_from_memory(bytes.data(), bytes.size(), "bytes");
    const auto from_samples = encoder.waveform_features(signal.to(torch::kFloat), 16000, "samples");
    EXPECT_EQ(from_file.source, paths.back());
    EXPECT_EQ(from_memory.source, "bytes");
    EXPECT_NEAR(from_file.seconds, 0.5 + 0.45 * i, 1e-9);
    EXPECT_DOUBLE_EQ(from_memory.seconds, from_file.seconds);
    EXPECT_TRUE(torch::equal(from_file.features, from_memory.features));
    EXPECT_TRUE(torch::equal(from_file.features, from_samples.features));
    utterances.push_back(from_file);
  }
  const auto batch = encoder.encode_features(utterances);
  ASSERT_EQ(batch.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(paths[i]);
    const auto alone = encoder.encode(paths[i]);
    EXPECT_EQ(batch[i].audio, paths[i]);
    EXPECT_EQ(batch[i].feature_frames, alone.feature_frames);
    ASSERT_EQ(batch[i].encoded.sizes(), alone.encoded.sizes());
    EXPECT_LE((batch[i].encoded - alone.encoded).abs().max().item<double>(), 1e-5);
    EXPECT_LE((batch[i].log_probs - alone.log_probs).abs().max().item<double>(), 1e-4);
  }
  EXPECT_TRUE(encoder.encode_features({}).empty());
  // Too short, or features of another width: refused before the model runs.
  EXPECT_THAT(error_of([&] { encoder.features_from_memory("RIFF", 4, "four bytes"); }),
              HasSubstr("four bytes"));
  EXPECT_THAT(error_of([&] { encoder.waveform_features(torch::zeros({200}), 16000, "tiny"); }),
              HasSubstr("tiny: too short"));
  SpeechFeatures wrong{"wrong", torch::zeros({50, 7}), 0.5, 0.0};
  EXPECT_THAT(error_of([&] { encoder.encode_features({wrong}); }),
              HasSubstr("wrong: features must be [frames, 20]"));
}

TEST(SpeechEncoder, FourThreadsShareOneEncoder) {
  const SpeechEncoder encoder(kYaml);
  std::vector<torch::Tensor> signals;
  for (int i = 0; i < 4; ++i)
    signals.push_back(test_signal(0.8 + 0.3 * i, 16000).to(torch::kFloat));
  std::vector<torch::Tensor> expected, expected_stream;
  for (const auto& x : signals) {
    expected.push_back(encoder.encode_waveform(x, 16000).encoded);
    auto s = encoder.stream(16000);
    expected_stream.push_back(torch::cat({s.push(x), s.finish()}));
  }
  std::vector<std::string> failures(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (int k = 0; k < 4; ++k) {
          const int i = (t + k) % 4;  // each thread starts at another signal
          const auto got = encoder.encode_waveform(signals[i], 16000).encoded;
          auto s = encoder.stream(16000);
          const auto streamed = torch::cat({s.push(signals[i]), s.finish()});
          if (!torch::equal(got, expected[i]) || !torch::equal(streamed, expected_stream[i])) {
            failures[t] = "thread " + std::to_string(t) + ": signal " + std::to_string(i);
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& f : failures) EXPECT_TRUE(f.empty()) << f;
}

}  // namespace test_speech_encoder
}  // namespace attnzoo
