// attnzoo::SpeechRecognizer with decoding.mode attention_rescoring, on WeNet's own U2 and U2++
// experiment folders (tests/models/data/wenet_u2: final.pt and units.txt as WeNet's training
// left them, and WeNet's own decoding results). A YAML written here restates their train.yaml.
// The recognizer's best hypothesis and score on WeNet's feature sequences equal WeNet's attention
// rescoring at each recorded setting (through overrides), and with mode ctc its prefix beam
// search; live audio ends at the offline result under the same chunk mask; configs that cannot
// rescore are refused naming the key.
#include <attnzoo/api/speech_recognizer.h>
#include <attnzoo/configs/model_source.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/core/error.h>
#include <attnzoo/io/safetensors.h>
#include "common/test_util.h"
#include "transcript_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace attnzoo {
namespace test_speech_recognizer_rescoring {

using testing::error_of;
using testing::fresh_dir;
using ::testing::HasSubstr;
using testing::ids_of;

const std::string kData = std::string(ATTNZOO_MODELS_DATA_DIR) + "/wenet_u2";

// The folder's architecture in attnzoo's keys; `decoding` is the decoding section's body.
std::string write_model(const std::string& dir, const std::string& name,
                        const std::string& decoding, bool with_decoder = true) {
  const bool u2pp = name == "u2pp";
  std::ostringstream yaml;
  yaml << "name: wenet_" << name << "\n"
       << "family: conformer\n"
       << "architecture:\n"
       << "  input_dim: 20\n"
       << "  encoder_dim: " << (u2pp ? 32 : 16) << "\n"
       << "  num_layers: 2\n"
       << "  num_heads: 4\n"
       << "  ffn_dim: " << (u2pp ? 64 : 32) << "\n"
       << "  depthwise_conv_kernel_size: 5\n"
       << "  conv_norm: " << (u2pp ? "layer_norm" : "batch_norm") << "\n"
       << "  causal_conv: " << (u2pp ? "true" : "false") << "\n"
       << "  subsampling: conv2d4\n"
       << "  position: rel_pos_wenet\n"
       << "  global_cmvn: true\n"
       << "  vocab_size: " << (u2pp ? 12 : 13) << "\n";
  if (with_decoder) {
    yaml << "  decoder:\n"
         << "    kind: " << (u2pp ? "bitransformer" : "transformer") << "\n"
         << "    num_heads: 4\n"
         << "    ffn_dim: " << (u2pp ? 64 : 32) << "\n"
         << "    num_blocks: 2\n"
         << (u2pp ? "    right_blocks: 1\n" : "");
  }
  yaml << "features: {kind: fbank, num_mel_bins: 20}\n"
       << "checkpoint: {format: wenet}\n"
       << "decoding:\n"
       << "  units: " << kData << "/" << name << "/units.txt\n"
       << decoding;
  const auto path = dir + "/wenet_" + name + (with_decoder ? "" : "_ctc") + ".yaml";
  std::ofstream(path) << yaml.str();
  return path;
}

// WeNet's prefix beam search: beam 4, the 4 most likely tokens of each frame.
const std::string kBeam = "  beam_size: 4\n  token_top_k: 4\n";

SpeechRecognizerOptions with_weights(const std::string& name,
                                     const std::vector<std::string>& overrides = {}) {
  SpeechRecognizerOptions options;
  options.encoder.weights = kData + "/" + name + "/final.pt";
  options.encoder.overrides = overrides;
  return options;
}

// Every utterance of the fixture `name`'s full-context decoding, at every rescoring setting and
// with mode ctc, against WeNet's results: `model` with `options` (weights, overrides) and the
// settings' overrides.
void expect_wenet_results(const std::string& name, const std::string& model,
                          const SpeechRecognizerOptions& options) {
  const auto with = [&](const std::vector<std::string>& more) {
    auto o = options;
    o.encoder.overrides.insert(o.encoder.overrides.end(), more.begin(), more.end());
    return o;
  };
  std::ifstream in(kData + "/" + name + "/wenet_outputs.json");
  const auto outputs = nlohmann::json::parse(in);
  const auto tensors = io::load_safetensors(kData + "/" + name + "/wenet_outputs.safetensors");
  const auto& full = outputs.at("decoding").at(0);
  ASSERT_EQ(full.at("decoding_chunk_size").get<int64_t>(), -1);
  // One recognizer per setting, and one with mode ctc.
  std::vector<std::pair<nlohmann::json, SpeechRecognizer>> recognizers;
  for (const auto& setting : full.at("utterances").begin()->at("attention_rescoring")) {
    std::ostringstream cw, rw;
    cw << "decoding.ctc_weight=" << setting.at("ctc_weight").get<double>();
    rw << "decoding.reverse_weight=" << setting.at("reverse_weight").get<double>();
    recognizers.emplace_back(setting, SpeechRecognizer(model, with({cw.str(), rw.str()})));
  }
  const SpeechRecognizer ctc(model, with({"decoding.mode=ctc"}));
  int differ = 0;
  for (const auto& [utt, result] : full.at("utterances").items()) {
    SpeechFeatures features;
    features.source = utt;
    features.features = tensors.tensors["feats." + utt];
    features.seconds = static_cast<double>(features.features.size(0)) / 100.0;
    const auto encoded = ctc.encoder().encode_features({features}).at(0);
    ASSERT_TRUE(encoded.ok()) << encoded.error;
    const auto& prefix = result.at("ctc_prefix_beam_search");
    const auto plain = ctc.decode(encoded);
    EXPECT_EQ(ids_of(plain.best()), prefix.at("tokens").get<std::vector<int64_t>>()) << utt;
    EXPECT_NEAR(plain.best().score, prefix.at("score").get<double>(), 1e-4) << utt;
    size_t s = 0;
    for (const auto& setting : result.at("attention_rescoring")) {
      const auto& [recorded, recognizer] = recognizers.at(s++);
      ASSERT_EQ(recorded.at("ctc_weight"), setting.at("ctc_weight"));
      const auto rescored = recognizer.decode(encoded);
      ASSERT_TRUE(rescored.ok()) << rescored.error;
      EXPECT_EQ(ids_of(rescored.best()), setting.at("tokens").get<std::vector<int64_t>>())
          << utt << " ctc_weight " << setting.at("ctc_weight") << " reverse_weight "
          << setting.at("reverse_weight");
      EXPECT_NEAR(rescored.best().score, setting.at("score").get<double>(), 1e-4) << utt;
      EXPECT_EQ(rescored.hypotheses.size(), 1u);  // decoding.nbest 1 of the 4 ranked
      differ += ids_of(rescored.best()) != ids_of(plain.best());
    }
  }
  EXPECT_GE(differ, 2);  // rescoring changed the answer, so the comparison above means something
}

// The YAML above (written by hand) with the folder's weights.
void expect_yaml_matches_wenet(const std::string& name) {
  const auto dir = fresh_dir("rescoring_" + name);
  const auto yaml = write_model(dir, name, kBeam + "  mode: attention_rescoring\n");
  expect_wenet_results(name, yaml, with_weights(name));
}

TEST(SpeechRecognizerRescoring, U2MatchesWenet) { expect_yaml_matches_wenet("u2"); }
TEST(SpeechRecognizerRescoring, U2ppMatchesWenet) { expect_yaml_matches_wenet("u2pp"); }

// The folders as WeNet left them, read as models (configs/wenet_source.cpp): only the search's
// size (WeNet's runtime defaults to a beam of 10; the fixtures were decoded with 4) and the full
// context (U2++ was trained with dynamic chunks, so the folder streams in chunks of 16) changed.
TEST(WenetFolder, RunsAsItIsWithWenetsResults) {
  for (const std::string name : {"u2", "u2pp"}) {
    SCOPED_TRACE(name);
    SpeechRecognizerOptions options;
    options.encoder.overrides = {"decoding.beam_size=4", "decoding.token_top_k=4"};
    if (name == "u2pp") options.encoder.overrides.push_back("streaming.chunk_size=0");
    expect_wenet_results(name, kData + "/" + name, options);
  }
}

TEST(WenetFolder, DescribesWhatRuns) {
  const auto u2pp = describe_model_source(kData + "/u2pp");
  for (const char* line :
       {"family: conformer", "encoder_dim: 32", "conv_norm: layer_norm", "causal_conv: true",
        "subsampling: conv2d4", "position: rel_pos_wenet", "global_cmvn: true", "vocab_size: 12",
        "kind: bitransformer", "right_blocks: 1", "num_mel_bins: 20", "chunk_size: 16",
        "mode: attention_rescoring", "ctc_weight: 0.5", "format: wenet"}) {
    EXPECT_THAT(u2pp, HasSubstr(line));
  }
  EXPECT_THAT(u2pp, HasSubstr("u2pp/final.pt"));
  EXPECT_THAT(u2pp, HasSubstr("u2pp/units.txt"));
  const auto u2 = describe_model_source(kData + "/u2");
  EXPECT_THAT(u2, HasSubstr("kind: transformer"));
  EXPECT_THAT(u2, HasSubstr("conv_norm: batch_norm"));
  EXPECT_THAT(u2, ::testing::Not(HasSubstr("streaming:")));
  // attnzoo's own training configs are called train.yaml too: not a WeNet folder.
  const auto ours = fresh_dir("wenet_not_ours");
  std::ofstream(ours + "/train.yaml") << "model: vit_digits\ndata: {kind: image_folder}\n";
  EXPECT_FALSE(is_model_source(ours));
}

// A copy of the u2 folder with train.yaml edited by `edit` (a line replaced or added).
std::string edited_folder(const std::string& dir, const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  for (const char* file : {"final.pt", "units.txt", "global_cmvn"}) {
    fs::copy_file(kData + "/u2/" + file, dir + "/" + file, fs::copy_options::overwrite_existing);
  }
  EXPECT_TRUE(testing::copy_edited(kData + "/u2/train.yaml", dir + "/train.yaml", from, to))
      << from;
  return dir;
}

TEST(WenetFolder, WhatItCannotHonourIsRefusedNamingFileKeyAndValue) {
  const auto root = fresh_dir("wenet_refused");
  const auto check = [&](const std::string& name, const std::string& from, const std::string& to,
                         const std::string& expected) {
    const auto dir = edited_folder(root + "/" + name, from, to);
    const auto message = error_of<Error>([&] { resolve_model_config(dir, {}); });
    EXPECT_THAT(message, HasSubstr(dir + "/train.yaml")) << name;
    EXPECT_THAT(message, HasSubstr(expected)) << name;
  };
  check("activation", "  activation_type: swish", "  activation_type: relu",
        "encoder_conf.activation_type: 'relu' is not supported");
  check("input_layer", "  input_layer: conv2d\n", "  input_layer: linear\n",
        "encoder_conf.input_layer: 'linear' is not supported");
  check("unknown_key", "  use_cnn_module: true", "  use_cnn_module: true\n  moe_experts: 8",
        "encoder_conf.moe_experts: is an option attnzoo does not implement (value '8')");
  check("decoder", "decoder: transformer", "decoder: transducer",
        "decoder: 'transducer' is not supported");
  check("encoder", "encoder: conformer", "encoder: squeezeformer",
        "encoder: 'squeezeformer' is not supported");
  // The checkpoint: final.pt, else the only .pt, else the list.
  namespace fs = std::filesystem;
  const auto two = edited_folder(root + "/two", "", "");
  fs::rename(two + "/final.pt", two + "/epoch_3.pt");
  fs::copy_file(two + "/epoch_3.pt", two + "/epoch_4.pt");
  EXPECT_THAT(error_of<Error>([&] { resolve_model_config(two, {}); }),
              HasSubstr("no final.pt, and 2 other .pt files (epoch_3.pt, epoch_4.pt)"));
  fs::remove(two + "/epoch_4.pt");
  EXPECT_THAT(describe_model_source(two), HasSubstr("two/epoch_3.pt"));
}

// The n-best, ranked by the rescoring score, and live audio rescored once at the end: equal to
// the offline decode of the same audio under the same chunk mask.
TEST(SpeechRecognizerRescoring, NbestIsRankedAndLiveAudioEndsAtTheOfflineResult) {
  const auto dir = fresh_dir("rescoring_live");
  const auto yaml = write_model(
      dir, "u2pp", kBeam + "  nbest: 3\n  mode: attention_rescoring\n  reverse_weight: 0.3\n");
  const SpeechRecognizer chunked(yaml, with_weights("u2pp", {"streaming.chunk_size=4"}));
  torch::manual_seed(5);
  const auto t = torch::arange(0, 24000, torch::kFloat) / 16000.0;
  const auto signal =
      0.3 * torch::sin(2 * M_PI * (200 + 300 * t) * t) + 0.05 * torch::randn({24000});
  const auto offline = chunked.transcribe_waveform(signal, 16000, "chirp");
  ASSERT_EQ(offline.hypotheses.size(), 3u);
  for (size_t i = 1; i < offline.hypotheses.size(); ++i) {
    EXPECT_GE(offline.hypotheses[i - 1].score, offline.hypotheses[i].score);
  }
  const SpeechRecognizer full(yaml, with_weights("u2pp"));
  auto live = full.stream(16000, 4, "live");
  for (int64_t at = 0; at < signal.size(0); at += 1234) {
    live.push(signal.narrow(0, at, std::min<int64_t>(1234, signal.size(0) - at)));
  }
  const auto final_result = live.finish();
  ASSERT_EQ(final_result.hypotheses.size(), offline.hypotheses.size());
  for (size_t i = 0; i < offline.hypotheses.size(); ++i) {
    EXPECT_EQ(ids_of(final_result.hypotheses[i]), ids_of(offline.hypotheses[i])) << i;
    EXPECT_NEAR(final_result.hypotheses[i].score, offline.hypotheses[i].score, 1e-3) << i;
  }
}

TEST(SpeechRecognizerRescoring, ConfigsThatCannotRescoreAreRefusedNamingTheKey) {
  const auto dir = fresh_dir("rescoring_refused");
  // A transformer decoder has no right-to-left direction.
  const auto u2 =
      write_model(dir, "u2", kBeam + "  mode: attention_rescoring\n  reverse_weight: 0.3\n");
  EXPECT_THAT(error_of<Error>([&] { resolve_model_config(u2, {}); }),
              HasSubstr("decoding.reverse_weight"));
  EXPECT_THAT(error_of<Error>([&] { resolve_model_config(u2, {}); }),
              HasSubstr("needs a right-to-left decoder"));
  // Greedy search has no n-best to rescore.
  const auto greedy = write_model(dir, "u2", "  search: greedy\n  mode: attention_rescoring\n");
  EXPECT_THAT(error_of<Error>([&] { resolve_model_config(greedy, {}); }),
              HasSubstr("attention_rescoring ranks the n-best of search: prefix_beam"));
  // No decoder.
  const auto no_decoder = write_model(dir, "u2", kBeam, /*with_decoder=*/false);
  EXPECT_THAT(error_of<Error>(
                  [&] { resolve_model_config(no_decoder, {"decoding.mode=attention_rescoring"}); }),
              HasSubstr("needs an attention decoder (architecture.decoder)"));
  const auto plain = write_model(dir, "u2", kBeam);
  EXPECT_THAT(error_of<Error>([&] { resolve_model_config(plain, {"decoding.mode=beam"}); }),
              HasSubstr("decoding.mode"));
  // right_blocks with a transformer decoder.
  EXPECT_THAT(error_of<Error>(
                  [&] { resolve_model_config(plain, {"architecture.decoder.right_blocks=2"}); }),
              HasSubstr("a right-to-left decoder goes with kind: bitransformer"));
}

}  // namespace test_speech_recognizer_rescoring
}  // namespace attnzoo
