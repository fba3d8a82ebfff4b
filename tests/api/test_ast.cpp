// The Audio Spectrogram Transformer (family ast) against transformers' ASTForAudioClassification
// and ASTFeatureExtractor (tests/api/make_ast_reference.py: random weights, a synthetic clip), and
// through AudioClassifier on a WAV file.
#include <attnzoo/api/audio_classifier.h>
#include <attnzoo/api/frontend_options.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/preprocess/audio/fbank.h>
#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sndfile.h>
#include <torch/torch.h>

#include <string>

namespace attnzoo {
namespace test_ast {
using testing::max_abs_diff;

const std::string kReference = ATTNZOO_API_REFERENCE_DIR;
const std::string kYaml = std::string(ATTNZOO_API_TEST_DATA_DIR) + "/ast_micro.yaml";

ZooModel reference_model() {
  auto model = create_model_from_yaml(kYaml);
  const auto loaded = load_weights(model, kReference + "/ast.weights.safetensors");
  EXPECT_EQ(loaded.layout, "hf");
  EXPECT_TRUE(loaded.notes.empty());  // the YAML's eps is AST's
  model.module->eval();
  return model;
}

TEST(AST, MatchesTransformersASTForAudioClassification) {
  const auto io = io::load_safetensors(kReference + "/ast.io.safetensors");
  auto model = reference_model();
  torch::NoGradGuard no_grad;
  const auto& features = io.tensors["features"];  // [2, 64, 32]: time x mel bins
  const auto outputs = model.forward({features});
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[0].first, "encoded");  // class and distillation tokens, then 2 x 5 patches
  EXPECT_EQ(outputs[0].second.sizes(), io.tensors["hidden"].sizes());
  EXPECT_LE(max_abs_diff(outputs[0].second, io.tensors["hidden"]), 1e-4);
  EXPECT_EQ(outputs[1].first, "class_logits");
  EXPECT_LE(max_abs_diff(outputs[1].second, io.tensors["logits"]), 1e-4);
  EXPECT_LE(max_abs_diff(model.classify({features}), io.tensors["logits"]), 1e-4);
}

TEST(AST, TheZoosFeaturesMatchASTFeatureExtractor) {
  const auto ref = io::load_safetensors(kReference + "/ast_features.io.safetensors");
  const auto config = model_config("ast_audioset");
  const FeatureExtractor extractor(audio_feature_options(config.features));
  const auto& waveform = ref.tensors["waveform"];  // 1.3 s at 16 kHz: 128 frames, then padding
  const auto features = extractor(waveform);
  ASSERT_EQ(features.sizes(), ref.tensors["features"].sizes());
  EXPECT_LE(max_abs_diff(features, ref.tensors["features"]), 1e-3);

  // A clip longer than 1024 frames keeps its first 1024, normalised alike.
  auto unfixed_options = audio_feature_options(config.features);
  unfixed_options.fixed_frames = 0;
  const FeatureExtractor unfixed(unfixed_options);
  const auto long_clip = waveform.repeat({10});  // 13 s
  const auto all = unfixed(long_clip);
  ASSERT_GT(all.size(0), 1024);
  const auto cut = extractor(long_clip);
  ASSERT_EQ(cut.size(0), 1024);
  EXPECT_LE(max_abs_diff(cut, all.narrow(0, 0, 1024)), 0.0);
}

TEST(AST, AudioClassifierRunsItOnAWav) {
  const auto ref = io::load_safetensors(kReference + "/ast_features.io.safetensors");
  const auto& waveform = ref.tensors["waveform"];
  const std::string wav = ::testing::TempDir() + "/ast_clip.wav";
  SF_INFO info{};
  info.samplerate = 16000;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  SNDFILE* file = sf_open(wav.c_str(), SFM_WRITE, &info);
  ASSERT_NE(file, nullptr) << sf_strerror(nullptr);
  const auto samples = waveform.contiguous();
  ASSERT_EQ(sf_writef_float(file, samples.data_ptr<float>(), samples.size(0)), samples.size(0));
  sf_close(file);

  AudioClassifierOptions options;
  options.weights = kReference + "/ast.weights.safetensors";
  const AudioClassifier classifier(kYaml, options);
  const auto top = classifier.classify(wav, 5);
  ASSERT_EQ(top.size(), 5u);

  // The family on the frontend's features of the same samples: the same ranking.
  auto model = reference_model();
  const FeatureExtractor extractor(audio_feature_options(model.config.features));
  torch::NoGradGuard no_grad;
  const auto probabilities =
      torch::softmax(model.classify({extractor(waveform).unsqueeze(0)})[0].to(torch::kDouble), 0);
  const auto order = std::get<1>(probabilities.sort(0, /*descending=*/true));
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(top[static_cast<size_t>(i)].index, order[i].item<int64_t>());
    EXPECT_NEAR(top[static_cast<size_t>(i)].probability, probabilities[order[i]].item<double>(),
                1e-6);
  }
  // A batch of files gives the same as one at a time.
  const auto batch = classifier.classify(std::vector<std::string>{wav, wav}, 5);
  ASSERT_EQ(batch.size(), 2u);
  ASSERT_TRUE(batch[1].ok()) << batch[1].error;
  EXPECT_NEAR(batch[1].top[0].probability, top[0].probability, 1e-6);
}

TEST(AST, RefusesWhatItCannotTake) {
  const auto config = model_config_from_yaml(kYaml);
  const auto& family = model_family(config.family);
  EXPECT_EQ(family.input_kind(), InputKind::kAudioFeatures);
  EXPECT_THROW(family.check_input(config, {torch::zeros({1, 63, 32})}, "x: "), InputError);
  EXPECT_THROW(family.check_stream(config, {torch::zeros({1, 64, 32})}), InputError);
  SpeechEncoderOptions streaming;
  streaming.stream_chunk = 4;
  EXPECT_THROW(SpeechEncoder(kYaml, streaming), c10::Error);
  EXPECT_THROW(model_config_from_yaml(kYaml, {"features.frames=50"}), ConfigError);
}

}  // namespace test_ast
}  // namespace attnzoo
