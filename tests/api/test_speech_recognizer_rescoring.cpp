// attnzoo::SpeechRecognizer with decoding.mode attention_rescoring, on WeNet's own U2 and U2++
// experiment folders (tests/models/data/wenet_u2: final.pt and units.txt as WeNet's training
// left them, and WeNet's own decoding results). A YAML written here restates their train.yaml.
// The recognizer's best hypothesis and score on WeNet's feature sequences equal WeNet's attention
// rescoring at each recorded setting (through overrides), and with mode ctc its prefix beam
// search; live audio ends at the offline result under the same chunk mask; configs that cannot
// rescore are refused naming the key.
#include <attnzoo/api/speech_recognizer.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/core/error.h>
#include <attnzoo/io/safetensors.h>
#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace attnzoo {
namespace test_speech_recognizer_rescoring {

using testing::error_of;
using testing::fresh_dir;
using ::testing::HasSubstr;

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

std::vector<int64_t> ids_of(const TranscriptHypothesis& h) {
  std::vector<int64_t> ids;
  for (const auto& token : h.tokens) ids.push_back(token.id);
  return ids;
}

// Every utterance of the fixture's full-context decoding, at every rescoring setting and with
// mode ctc, against WeNet's results.
void expect_wenet_results(const std::string& name) {
  const auto dir = fresh_dir("rescoring_" + name);
  const auto yaml = write_model(dir, name, kBeam + "  mode: attention_rescoring\n");
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
    recognizers.emplace_back(setting,
                             SpeechRecognizer(yaml, with_weights(name, {cw.str(), rw.str()})));
  }
  const SpeechRecognizer ctc(yaml, with_weights(name, {"decoding.mode=ctc"}));
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

TEST(SpeechRecognizerRescoring, U2MatchesWenet) { expect_wenet_results("u2"); }
TEST(SpeechRecognizerRescoring, U2ppMatchesWenet) { expect_wenet_results("u2pp"); }

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
