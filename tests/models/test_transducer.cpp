// The transducer head (models/transducer.h) on its own: its greedy search gives the same tokens,
// frames and durations (and the score, within rounding) whether the encoder frames come at once
// or in blocks of any size (the prediction network's state, and a TDT duration that runs past a
// block's end, carry over), never emits more than max_symbols tokens on a frame, and its
// prediction network reads the blank as a zero input whatever the embedding's row holds. Against
// NeMo's own greedy searches: tests/api/test_nemo_file.cpp.
#include <attnzoo/models/transducer.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/test_util.h"

#include <map>
#include <vector>

namespace attnzoo {
namespace test_transducer {

using testing::error_of;
using ::testing::HasSubstr;

// A transducer whose outputs depend on both the frame and the tokens so far: weights scaled up,
// the blank's bias chosen so that blanks and tokens both occur.
Transducer make(const std::vector<int64_t>& durations, uint64_t seed) {
  torch::manual_seed(seed);
  Transducer t(
      TransducerOptions(9, 8).pred_hidden(6).pred_layers(2).joint_hidden(7).durations(durations));
  torch::NoGradGuard no_grad;
  for (auto& p : t->parameters()) p.mul_(3.0);
  t->out->bias.zero_();
  t->out->bias[t->blank_id()] = 1.0;
  if (!durations.empty()) t->out->bias[t->options.vocab_size()] = 1.5;  // duration 0 first
  t->eval();
  return t;
}

struct Result {
  std::vector<TransducerToken> tokens;
  double score = 0.0;
};

Result decode(Transducer& t, const torch::Tensor& encoded, const std::vector<int64_t>& blocks) {
  TransducerGreedySearch search(*t, 4);
  int64_t at = 0;
  for (size_t i = 0; at < encoded.size(0); ++i) {
    const int64_t n = std::min(blocks[i % blocks.size()], encoded.size(0) - at);
    search.advance(encoded.slice(0, at, at + n));
    search.advance(encoded.slice(0, at + n, at + n));  // an empty block changes nothing
    at += n;
  }
  EXPECT_EQ(search.frames(), encoded.size(0));
  return {search.tokens(), search.score()};
}

TEST(Transducer, GreedyInBlocksEqualsAtOnce) {
  for (const auto& durations : {std::vector<int64_t>{}, std::vector<int64_t>{0, 1, 2, 4}}) {
    SCOPED_TRACE(durations.empty() ? "rnn-t" : "tdt");
    auto t = make(durations, 11);
    const auto encoded = 2.0 * torch::randn({60, 8});
    const auto whole = decode(t, encoded, {60});
    ASSERT_GE(whole.tokens.size(), 20u) << "too few tokens to tell much";
    std::map<int64_t, int64_t> per_frame;
    bool repeated = false;
    for (const auto& token : whole.tokens) {
      EXPECT_NE(token.id, t->blank_id());
      repeated |= ++per_frame[token.frame] > 1;
      EXPECT_LE(per_frame[token.frame], 4) << "max_symbols";
    }
    EXPECT_TRUE(repeated) << "several tokens on a frame must occur";
    for (const auto& blocks : {std::vector<int64_t>{1}, {3, 1, 7}, {2, 5}}) {
      const auto parts = decode(t, encoded, blocks);
      ASSERT_EQ(parts.tokens.size(), whole.tokens.size());
      for (size_t i = 0; i < whole.tokens.size(); ++i) {
        EXPECT_EQ(parts.tokens[i].id, whole.tokens[i].id) << i;
        EXPECT_EQ(parts.tokens[i].frame, whole.tokens[i].frame) << i;
        EXPECT_EQ(parts.tokens[i].duration, whole.tokens[i].duration) << i;
        // The encoder projection of a block rounds as a GEMM of that many rows does.
        EXPECT_NEAR(parts.tokens[i].log_prob, whole.tokens[i].log_prob, 1e-5) << i;
      }
      EXPECT_NEAR(parts.score, whole.score, 1e-4);
    }
  }
}

TEST(Transducer, BlankIsAZeroInputToThePredictionNetwork) {
  auto t = make({}, 5);
  torch::NoGradGuard no_grad;
  t->embed->weight[t->blank_id()].fill_(7.0);
  const auto [g, state] = t->predict(torch::tensor({t->blank_id()}), {});
  const auto [expected, hc] = t->lstm->forward(torch::zeros({1, 1, 6}));
  EXPECT_TRUE(torch::allclose(g, expected.squeeze(0)));
  EXPECT_EQ(state.h.sizes(), (std::vector<int64_t>{2, 1, 6}));
}

TEST(Transducer, RefusesBadOptionsAndInput) {
  EXPECT_THAT(error_of<c10::Error>([] { Transducer(TransducerOptions(1, 8)); }),
              HasSubstr("vocab_size must be >= 2"));
  EXPECT_THAT(error_of<c10::Error>([] { Transducer(TransducerOptions(5, 8).activation("gelu")); }),
              HasSubstr("activation 'gelu' is not supported"));
  EXPECT_THAT(error_of<c10::Error>([] { Transducer(TransducerOptions(5, 8).durations({2})); }),
              HasSubstr("at least two durations"));
  auto t = make({}, 1);
  EXPECT_THAT(error_of<c10::Error>([&] { TransducerGreedySearch(*t, 0); }),
              HasSubstr("max_symbols must be > 0"));
  TransducerGreedySearch search(*t, 3);
  EXPECT_THAT(error_of<c10::Error>([&] {
                search.advance(torch::zeros({4, 5}));
              }),
              HasSubstr("encoded must be [k, D = 8], got [4, 5]"));
}

}  // namespace test_transducer
}  // namespace attnzoo
