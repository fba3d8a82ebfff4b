// attnzoo::AudioClassifier: the config's frontend, the Conformer and its classification head end
// to end, equal to running them by hand; batches equal single files; labels from the config;
// errors for what is not an audio classifier; one classifier used from 4 threads at once.
#include <attnzoo/api/audio_classifier.h>
#include "common/test_util.h"

#include <attnzoo/api/frontend_options.h>
#include <attnzoo/configs/registry.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sndfile.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <thread>
#include <vector>

namespace attnzoo {
namespace test_audio_classifier {
using testing::error_of;

using ::testing::HasSubstr;

const std::string kYaml =
    std::string(ATTNZOO_API_TEST_DATA_DIR) + "/conformer_micro_classifier.yaml";

// A tone with noise, `seconds` long at `rate`, as 16-bit samples in [-1, 1].
torch::Tensor tone(double seconds, int64_t rate, double hz, int64_t seed) {
  torch::manual_seed(seed);
  const auto n = static_cast<int64_t>(seconds * static_cast<double>(rate));
  const auto t = torch::arange(n, torch::kDouble) / static_cast<double>(rate);
  const auto x = 0.3 * torch::sin(2.0 * M_PI * hz * t) + 0.05 * torch::randn({n}, torch::kDouble);
  return ((x * 32767.0).round() / 32768.0).to(torch::kFloat);
}

void write_wav(const std::string& path, const torch::Tensor& samples, int rate) {
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(file, nullptr) << sf_strerror(nullptr);
  const auto data = samples.contiguous();
  sf_write_float(file, data.data_ptr<float>(), data.size(0));
  sf_close(file);
}

// softmax(head(encoder(fbank(samples)))) with the same random weights (seed 0).
torch::Tensor probabilities_by_hand(const torch::Tensor& samples) {
  const auto config = resolve_model_config(kYaml);
  const FeatureExtractor fbank(audio_feature_options(config.features));
  torch::manual_seed(0);
  auto model = build_model(config);
  model.module->eval();
  torch::InferenceMode inference;
  const auto features = fbank(samples).unsqueeze(0);
  const auto lengths = torch::full({1}, features.size(1), torch::kLong);
  const auto [encoded, out_lengths] =
      model.module->as<ConformerEncoderImpl>()->forward(features, lengths);
  return torch::softmax(
      model.module->as<ConformerEncoderImpl>()->classify(encoded, out_lengths)[0].to(
          torch::kDouble),
      -1);
}

TEST(AudioClassifier, EqualsTheFrontendTheEncoderAndTheHeadByHand) {
  const AudioClassifier classifier(kYaml);
  EXPECT_EQ(classifier.labels(), (std::vector<std::string>{"hiss", "chirp", "hum"}));
  EXPECT_EQ(classifier.config().name, "conformer_micro_classifier");
  const auto samples = tone(0.9, 16000, 440.0, 1);
  const auto expected = probabilities_by_hand(samples);
  const auto top = classifier.classify(samples, 16000, 3);
  ASSERT_EQ(top.size(), 3u);
  double total = 0.0;
  for (size_t i = 0; i < top.size(); ++i) {
    EXPECT_NEAR(top[i].probability, expected[top[i].index].item<double>(), 1e-5);
    EXPECT_EQ(top[i].label, classifier.labels()[static_cast<size_t>(top[i].index)]);
    if (i > 0) {
      EXPECT_GE(top[i - 1].probability, top[i].probability);
    }
    total += top[i].probability;
  }
  EXPECT_NEAR(total, 1.0, 1e-9);
  // The file, through libsndfile, gives the same; topk is clamped to the classes.
  const std::string path = ::testing::TempDir() + "/tone440.wav";
  write_wav(path, samples, 16000);
  const auto from_file = classifier.classify(path, 10);
  ASSERT_EQ(from_file.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(from_file[i].index, top[i].index);
    EXPECT_NEAR(from_file[i].probability, top[i].probability, 1e-6);
  }
}

TEST(AudioClassifier, BatchesEqualOneFileAtATimeAndKeepEachFilesError) {
  AudioClassifierOptions batched;
  batched.batch_size = 3;
  const AudioClassifier by_batch(kYaml, batched);
  AudioClassifierOptions single;
  single.batch_size = 1;
  const AudioClassifier one_by_one(kYaml, single);
  const std::string dir = ::testing::TempDir();
  std::vector<std::string> paths;
  const double seconds[] = {0.5, 1.3, 0.8, 1.0};
  for (int i = 0; i < 4; ++i) {
    paths.push_back(dir + "/clip" + std::to_string(i) + ".wav");
    write_wav(paths.back(), tone(seconds[i], 16000, 200.0 + 150.0 * i, 10 + i), 16000);
  }
  std::ofstream(dir + "/not_audio.wav") << "no RIFF here";
  paths.insert(paths.begin() + 2, dir + "/not_audio.wav");
  const auto a = by_batch.classify(paths, 3);
  const auto b = one_by_one.classify(paths, 3);
  ASSERT_EQ(a.size(), paths.size());
  ASSERT_EQ(b.size(), paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    EXPECT_EQ(a[i].audio, paths[i]);
    if (i == 2) {
      EXPECT_FALSE(a[i].ok());
      EXPECT_THAT(a[i].error, HasSubstr("not_audio.wav"));
      EXPECT_FALSE(b[i].ok());
      continue;
    }
    ASSERT_TRUE(a[i].ok()) << a[i].error;
    ASSERT_TRUE(b[i].ok()) << b[i].error;
    EXPECT_GT(a[i].seconds, 0.4);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(a[i].top[k].index, b[i].top[k].index) << paths[i];
      EXPECT_NEAR(a[i].top[k].probability, b[i].top[k].probability, 1e-5) << paths[i];
    }
  }
  // The clips differ, so equal predictions are not an accident of a constant model.
  EXPECT_GT(std::abs(a[0].top[0].probability - a[1].top[0].probability) +
                std::abs(a[0].top[1].probability - a[1].top[1].probability),
            1e-4);
}

// One classifier from 4 threads at once, each starting at another clip: the serial results.
TEST(AudioClassifier, FourThreadsAtOnceGiveTheSerialResults) {
  const AudioClassifier classifier(kYaml, AudioClassifierOptions{});
  const std::string dir = testing::fresh_dir("audio_classifier_threads");
  std::vector<std::string> paths;
  for (int i = 0; i < 4; ++i) {
    paths.push_back(dir + "/clip" + std::to_string(i) + ".wav");
    write_wav(paths.back(), tone(0.6 + 0.2 * i, 16000, 250.0 + 120.0 * i, 40 + i), 16000);
  }
  std::vector<std::vector<Prediction>> serial;
  for (const auto& path : paths) serial.push_back(classifier.classify(path, 3));
  std::vector<std::vector<std::vector<Prediction>>> parallel(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (size_t i = 0; i < paths.size(); ++i) {
          parallel[t].push_back(classifier.classify(paths[(i + t) % paths.size()], 3));
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (size_t t = 0; t < 4; ++t) {
    ASSERT_EQ(parallel[t].size(), 3 * paths.size());
    for (size_t n = 0; n < parallel[t].size(); ++n) {
      const auto& expected = serial[(n % paths.size() + t) % paths.size()];
      const auto& got = parallel[t][n];
      ASSERT_EQ(got.size(), expected.size());
      for (size_t k = 0; k < expected.size(); ++k) {
        EXPECT_EQ(got[k].index, expected[k].index) << "thread " << t << " call " << n;
        EXPECT_NEAR(got[k].probability, expected[k].probability, 1e-6)
            << "thread " << t << " call " << n;
      }
    }
  }
}

TEST(AudioClassifier, RefusesWhatIsNotAnAudioClassifier) {
  EXPECT_THAT(
      error_of([] {
        AudioClassifier(std::string(ATTNZOO_API_TEST_DATA_DIR) + "/vit_micro_classifier.yaml");
      }),
      HasSubstr("which takes images; an audio classifier needs audio"));
  const auto with = [](const std::string& override_text) {
    AudioClassifierOptions o;
    o.overrides = {override_text};
    return o;
  };
  EXPECT_THAT(error_of([&] { AudioClassifier(kYaml, with("architecture.num_classes=0")); }),
              HasSubstr("no classification head (architecture.num_classes is 0)"));
  EXPECT_THAT(error_of([&] { AudioClassifier(kYaml, with("architecture.num_classes=4")); }),
              HasSubstr("3 labels for a model of 4 classes"));
  const AudioClassifier classifier(kYaml);
  EXPECT_THAT(error_of([&] { classifier.classify(tone(0.5, 16000, 300.0, 2), 16000, 0); }),
              HasSubstr("topk must be >= 1"));
  EXPECT_THAT(error_of([&] { classifier.classify(std::string("no/such/file.wav")); }),
              HasSubstr("no/such/file.wav"));
  EXPECT_TRUE(is_audio_classifier(classifier.config()));
  EXPECT_FALSE(is_audio_classifier(resolve_model_config("conformer_s")));
}

}  // namespace test_audio_classifier
}  // namespace attnzoo
