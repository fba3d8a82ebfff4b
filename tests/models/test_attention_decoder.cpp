// The attention decoder and attention rescoring against WeNet's own code: the U2 (transformer
// decoder) and U2++ (bitransformer) experiment folders of tests/models/data/wenet_u2/, written by
// WeNet's training code and decoded by WeNet (tools/scripts/make_wenet_u2_fixtures.py names the
// commit). Their final.pt loads into ConformerEncoder with a decoder; then, per utterance:
//   - the encoder output and CTC log-probabilities (full context, and U2++ in chunks of 4);
//   - the decoder's log-probabilities on WeNet's own padded n-best (left to right, right to left);
//   - each n-best hypothesis's rescoring terms and WeNet's pick and score at every setting.
// The decoders were trained a few steps towards chosen hypotheses, so that rescoring picks
// another hypothesis than prefix beam search on several utterances, and the checks at the end
// show that a wrong <sos/eos>, an unreversed right-to-left input, the missing √D scale or
// ctc_weight 0 each change a result.
#include "common/test_util.h"

#include <attnzoo/decoding/attention_rescoring.h>
#include <attnzoo/io/weights_file.h>
#include <attnzoo/models/attention_decoder.h>
#include <attnzoo/models/checkpoint.h>
#include <attnzoo/models/conformer.h>
#include <attnzoo/models/conformer_checkpoint.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace attnzoo {
namespace test_attention_decoder {

using testing::error_of;
using ::testing::HasSubstr;
using testing::max_abs_diff;
using Nbest = std::vector<std::vector<int64_t>>;

const std::string kData = std::string(ATTNZOO_MODELS_DATA_DIR) + "/wenet_u2";

// The two folders' architectures, as their train.yaml say (a later reader of WeNet folders
// derives the same from the YAML).
ConformerEncoderOptions u2_options() {
  return ConformerEncoderOptions(20, ConformerOptions(16, 4, 32, 2, 5))
      .subsampling(Subsampling::kConv2d4)
      .position(ConformerPosition::kRelPosWenet)
      .global_cmvn(true)
      .vocab_size(13)
      .decoder(AttentionDecoderOptions(13, 16).num_heads(4).ffn_dim(32).num_blocks(2));
}

ConformerEncoderOptions u2pp_options() {
  auto blocks =
      ConformerOptions(32, 4, 64, 2, 5).causal_conv(true).conv_norm(ConvNormKind::kLayerNorm);
  return ConformerEncoderOptions(20, blocks)
      .subsampling(Subsampling::kConv2d4)
      .position(ConformerPosition::kRelPosWenet)
      .global_cmvn(true)
      .vocab_size(12)
      .decoder(
          AttentionDecoderOptions(12, 32).num_heads(4).ffn_dim(64).num_blocks(2).right_blocks(1));
}

struct Fixture {
  ConformerEncoder model{nullptr};
  io::TensorDict tensors;  // wenet_outputs.safetensors
  nlohmann::json outputs;  // wenet_outputs.json
};

Fixture load(const std::string& name, const ConformerEncoderOptions& options) {
  const auto dir = kData + "/" + name;
  Fixture f;
  f.model = ConformerEncoder(options);
  const auto weights = io::load_weights_file(dir + "/final.pt");
  const auto mapped = to_conformer_layout(weights.tensors, ConformerCheckpointFormat::kWenet);
  LoadOptions load;
  load.ignore = mapped.ignored;
  load.source = dir + "/final.pt";
  load_state_dict(*f.model, mapped.tensors, load);  // strict: every name accounted for
  f.model->eval();
  f.tensors = io::load_safetensors(dir + "/wenet_outputs.safetensors").tensors;
  std::ifstream in(dir + "/wenet_outputs.json");
  f.outputs = nlohmann::json::parse(in);
  return f;
}

Fixture& u2() {
  static Fixture f = load("u2", u2_options());
  return f;
}

Fixture& u2pp() {
  static Fixture f = load("u2pp", u2pp_options());
  return f;
}

// The encoder's output of one utterance, as WeNet decodes it (batch of 1, chunk_size 0: full).
torch::Tensor encode(Fixture& f, const std::string& utt, int64_t chunk_size) {
  torch::NoGradGuard no_grad;
  const auto feats = f.tensors["feats." + utt].unsqueeze(0);
  return std::get<0>(f.model->forward(feats, {}, chunk_size, -1));
}

void expect_encoder_matches(Fixture& f) {
  torch::NoGradGuard no_grad;
  for (const auto& mode : f.outputs.at("decoding")) {
    const auto chunk = mode.at("decoding_chunk_size").get<int64_t>();
    const std::string suffix = chunk > 0 ? ".chunk" + std::to_string(chunk) : "";
    for (const auto& [utt, result] : mode.at("utterances").items()) {
      const auto encoded = encode(f, utt, std::max<int64_t>(chunk, 0));
      EXPECT_LE(max_abs_diff(encoded, f.tensors["encoder_out." + utt + suffix]), 1e-4)
          << utt << suffix;
      EXPECT_LE(
          max_abs_diff(f.model->ctc_log_probs(encoded), f.tensors["ctc_log_probs." + utt + suffix]),
          1e-4)
          << utt << suffix;
    }
  }
}

TEST(AttentionDecoder, U2EncoderAndCtcMatchWenet) { expect_encoder_matches(u2()); }
TEST(AttentionDecoder, U2ppEncoderAndCtcMatchWenetFullAndChunked) {
  expect_encoder_matches(u2pp());
}

// WeNet's decoder forward on its own padded inputs: log-probabilities at every valid position.
void expect_decoder_matches(Fixture& f, bool right) {
  torch::NoGradGuard no_grad;
  auto& decoder = *f.model->decoder;
  const auto memory = f.tensors["decoder.encoder_out"];
  const auto hyps = f.tensors["decoder.hyps_pad"];
  const auto lengths = f.tensors["decoder.hyps_lens"];
  const auto n = hyps.size(0);
  const auto repeated = memory.expand({n, memory.size(1), memory.size(2)}).contiguous();
  const auto check = [&](TransformerDecoder& direction, const torch::Tensor& tokens,
                         const std::string& expected) {
    const auto ours = torch::log_softmax(direction(tokens, lengths, repeated), -1);
    const auto theirs = f.tensors[expected];
    for (int64_t i = 0; i < n; ++i) {
      const auto valid = lengths[i].item<int64_t>();
      EXPECT_LE(max_abs_diff(ours[i].narrow(0, 0, valid), theirs[i].narrow(0, 0, valid)), 1e-4)
          << expected << " hypothesis " << i;
    }
  };
  check(decoder.left, hyps, "decoder.l2r_log_probs");
  if (right) check(decoder.right, f.tensors["decoder.r_hyps_pad"], "decoder.r2l_log_probs");
}

TEST(AttentionDecoder, U2DecoderMatchesWenet) { expect_decoder_matches(u2(), false); }
TEST(AttentionDecoder, U2ppBothDirectionsMatchWenet) { expect_decoder_matches(u2pp(), true); }

Nbest nbest_of(const nlohmann::json& result) {
  return result.at("ctc_prefix_beam_search").at("nbest").get<Nbest>();
}

// One rescoring case of a fixture: an utterance at one chunking and one setting.
struct RescoringCase {
  std::string utt;
  int64_t chunk = 0;
  torch::Tensor encoded;  // our encoder's output
  Nbest nbest;
  std::vector<double> ctc;  // WeNet's prefix beam search scores of the n-best
  const nlohmann::json* setting = nullptr;
  decoding::AttentionRescoringOptions options;
};

// Every utterance, chunking (in the order of `decoding`) and setting of a fixture.
void for_each_case(Fixture& f, const std::function<void(const RescoringCase&)>& visit) {
  torch::NoGradGuard no_grad;
  for (const auto& mode : f.outputs.at("decoding")) {
    RescoringCase c;
    c.chunk = std::max<int64_t>(mode.at("decoding_chunk_size").get<int64_t>(), 0);
    for (const auto& [utt, result] : mode.at("utterances").items()) {
      c.utt = utt;
      c.encoded = encode(f, utt, c.chunk);
      c.nbest = nbest_of(result);
      c.ctc = result.at("ctc_prefix_beam_search").at("nbest_scores").get<std::vector<double>>();
      for (const auto& setting : result.at("attention_rescoring")) {
        c.setting = &setting;
        c.options = {setting.at("ctc_weight").get<double>(),
                     setting.at("reverse_weight").get<double>()};
        visit(c);
      }
    }
  }
}

// Every case: our terms of each n-best hypothesis, and the pick and score of rescore_nbest,
// against WeNet's. Returns how many picks differ from the prefix best.
int expect_rescoring_matches(Fixture& f) {
  int changed = 0;
  for_each_case(f, [&](const RescoringCase& c) {
    const auto& setting = *c.setting;
    const auto scores = f.model->decoder->score(c.encoded, c.nbest, c.options.reverse_weight);
    const auto& terms = setting.at("nbest_rescored");
    for (size_t i = 0; i < c.nbest.size(); ++i) {
      EXPECT_NEAR(scores.left[i], terms[i].at("l2r").get<double>(), 1e-4) << c.utt << " " << i;
      if (c.options.reverse_weight > 0) {
        EXPECT_NEAR(scores.right[i], terms[i].at("r2l").get<double>(), 1e-4) << c.utt << " " << i;
      }
    }
    const auto rescored = decoding::rescore_nbest(c.ctc, scores.left, scores.right, c.options);
    const auto expected = setting.at("nbest_index").get<size_t>();
    EXPECT_EQ(rescored.best, expected)
        << c.utt << " chunk " << c.chunk << " ctc_weight " << c.options.ctc_weight
        << " reverse_weight " << c.options.reverse_weight;
    EXPECT_EQ(c.nbest[rescored.best], setting.at("tokens").get<std::vector<int64_t>>());
    EXPECT_NEAR(rescored.scores[rescored.best], setting.at("score").get<double>(), 1e-4);
    if (expected != 0) ++changed;
  });
  return changed;
}

TEST(AttentionRescoring, U2PicksAndScoresAsWenet) { EXPECT_GE(expect_rescoring_matches(u2()), 2); }
TEST(AttentionRescoring, U2ppPicksAndScoresAsWenet) {
  EXPECT_GE(expect_rescoring_matches(u2pp()), 2);
}

using Scorer = std::function<DecoderScores(const torch::Tensor&, const Nbest&, double)>;

// The picks of every case of a fixture, with `scorer` giving the attention terms (and ctc_weight
// replaced when ctc_weight_override >= 0).
std::vector<size_t> picks(Fixture& f, const Scorer& scorer, double ctc_weight_override = -1.0) {
  std::vector<size_t> out;
  for_each_case(f, [&](const RescoringCase& c) {
    auto options = c.options;
    if (ctc_weight_override >= 0) options.ctc_weight = ctc_weight_override;
    const auto scores = scorer(c.encoded, c.nbest, options.reverse_weight);
    out.push_back(decoding::rescore_nbest(c.ctc, scores.left, scores.right, options).best);
  });
  return out;
}

// The attention terms computed in the test, with a mistake switched on: `sos` as the start and
// closing token, the right decoder fed the hypothesis unreversed.
DecoderScores scores_with(AttentionDecoderImpl& decoder, const torch::Tensor& memory,
                          const Nbest& nbest, double reverse_weight, int64_t sos,
                          bool reverse_right) {
  const auto n = static_cast<int64_t>(nbest.size());
  const auto one = memory.dim() == 2 ? memory.unsqueeze(0) : memory;
  const auto repeated = one.expand({n, one.size(1), one.size(2)}).contiguous();
  const auto run = [&](TransformerDecoder& direction, bool reversed) {
    size_t longest = 0;
    for (const auto& h : nbest) longest = std::max(longest, h.size());
    auto tokens = torch::full({n, static_cast<int64_t>(longest) + 1}, sos, torch::kLong);
    auto lengths = torch::empty({n}, torch::kLong);
    for (int64_t i = 0; i < n; ++i) {
      auto h = nbest[static_cast<size_t>(i)];
      if (reversed) std::reverse(h.begin(), h.end());
      for (size_t j = 0; j < h.size(); ++j) tokens[i][static_cast<int64_t>(j) + 1] = h[j];
      lengths[i] = static_cast<int64_t>(h.size()) + 1;
    }
    const auto lp = torch::log_softmax(direction(tokens, lengths, repeated), -1);
    std::vector<double> sums;
    for (int64_t i = 0; i < n; ++i) {
      const auto len = lengths[i].item<int64_t>() - 1;
      double sum = lp[i][len][sos].item<double>();
      for (int64_t j = 0; j < len; ++j) sum += lp[i][j][tokens[i][j + 1]].item<double>();
      sums.push_back(sum);
    }
    return sums;
  };
  DecoderScores scores;
  scores.left = run(decoder.left, false);
  if (reverse_weight > 0) scores.right = run(decoder.right, reverse_right);
  return scores;
}

// Each of these mistakes changes at least one pick, so the tests above would catch it.
TEST(AttentionRescoring, CommonMistakesChangeAPick) {
  for (auto* fixture : {&u2(), &u2pp()}) {
    auto& decoder = *fixture->model->decoder;
    const auto sos = decoder.sos_eos();
    const Scorer ours = [&](const torch::Tensor& memory, const Nbest& nbest, double rw) {
      return decoder.score(memory, nbest, rw);
    };
    const auto with = [&](int64_t start, bool reverse_right) -> Scorer {
      return
          [&decoder, start, reverse_right](const torch::Tensor& m, const Nbest& nbest, double rw) {
            return scores_with(decoder, m, nbest, rw, start, reverse_right);
          };
    };
    const auto expected = picks(*fixture, ours);
    const std::string name = decoder.bidirectional() ? "u2pp" : "u2";
    // The test's own scorer without a mistake picks the same.
    EXPECT_EQ(picks(*fixture, with(sos, true)), expected) << name;
    // A wrong <sos/eos> id (the blank's).
    EXPECT_NE(picks(*fixture, with(0, true)), expected) << name;
    // No √D on the embeddings: the same as embeddings divided by √D.
    auto unscaled = std::dynamic_pointer_cast<AttentionDecoderImpl>(decoder.clone());
    {
      torch::NoGradGuard no_grad;
      const double root = std::sqrt(static_cast<double>(decoder.options.dim()));
      unscaled->left->embed->weight.div_(root);
      if (unscaled->bidirectional()) unscaled->right->embed->weight.div_(root);
    }
    EXPECT_NE(picks(*fixture, [&](const torch::Tensor& m, const Nbest& nbest,
                                  double rw) { return unscaled->score(m, nbest, rw); }),
              expected)
        << name;
    if (decoder.bidirectional()) {
      // The right-to-left decoder fed the hypotheses left to right.
      EXPECT_NE(picks(*fixture, with(sos, false)), expected) << name;
    } else {
      // ctc_weight 0 where WeNet used 0.5.
      EXPECT_NE(picks(*fixture, ours, 0.0), expected) << name;
    }
  }
}

TEST(AttentionRescoring, RefusesBadInput) {
  using decoding::DecodingError;
  using decoding::rescore_nbest;
  EXPECT_THAT(error_of<DecodingError>([] { rescore_nbest({}, {}, {}, {}); }),
              HasSubstr("the n-best is empty"));
  EXPECT_THAT(error_of<DecodingError>([] {
                rescore_nbest({-1, -2}, {-1}, {}, {});
              }),
              HasSubstr("left holds 1 scores for 2 hypotheses"));
  EXPECT_THAT(error_of<DecodingError>([] {
                rescore_nbest({-1}, {-1}, {}, {0.5, 0.3});
              }),
              HasSubstr("reverse_weight 0.300000 needs right-to-left scores"));
  EXPECT_THAT(error_of<DecodingError>([] {
                rescore_nbest({-1}, {-1}, {}, {-0.5, 0.0});
              }),
              HasSubstr("ctc_weight must be finite and >= 0"));
  EXPECT_THAT(error_of<DecodingError>([] {
                rescore_nbest({-1}, {-1}, {-1}, {0.5, 1.5});
              }),
              HasSubstr("reverse_weight must be in [0, 1]"));
  // Ties: the first maximum, as WeNet.
  EXPECT_EQ(rescore_nbest({-2, -1, -1}, {-1, -1.5, -1.5}, {}, {1.0, 0.0}).best, 1u);
  auto& decoder = *u2().model->decoder;
  const auto memory = torch::zeros({3, 16});
  EXPECT_THAT(error_of<c10::Error>([&] {
                decoder.score(memory, {{1, 13}});
              }),
              HasSubstr("hypothesis 0 holds token 13, outside [0, 13)"));
  EXPECT_THAT(error_of<c10::Error>([&] { decoder.score(memory, {{1}}, 0.3); }),
              HasSubstr("needs a right-to-left decoder"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                decoder.score(torch::zeros({3, 8}), {{1}});
              }),
              HasSubstr("memory must be [S, D = 16]"));
  EXPECT_TRUE(decoder.score(memory, {}).left.empty());
}

TEST(AttentionDecoder, ParameterCountIsTheBuiltModules) {
  for (const auto& options : {*u2_options().decoder(), *u2pp_options().decoder()}) {
    AttentionDecoder decoder(options);
    int64_t count = 0;
    for (const auto& p : decoder->parameters()) count += p.numel();
    EXPECT_EQ(attention_decoder_parameter_count(options), count);
  }
}

}  // namespace test_attention_decoder
}  // namespace attnzoo
