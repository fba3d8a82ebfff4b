// The transducer's beam search (models/transducer_beam_search.h) on its own: fed the encoder
// frames in blocks of any size it keeps the same hypotheses as fed them at once (RNN-T and TDT);
// its stable tokens begin every hypothesis and only grow; a model that keeps emitting on a frame
// (where NeMo's search runs unbounded) ends each frame at max_expansions; bad options are refused
// by name. Against NeMo's own beam search: tests/api/test_nemo_file.cpp.
#include <attnzoo/models/transducer_beam_search.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/confident_transducer.h"
#include "common/test_util.h"

#include <vector>

namespace attnzoo {
namespace test_transducer_beam_search {

using testing::error_of;
using ::testing::HasSubstr;

// A transducer with random weights, scaled up, the blank's bias `blank_bias`.
Transducer make(const std::vector<int64_t>& durations, uint64_t seed, double blank_bias) {
  torch::manual_seed(seed);
  Transducer t(
      TransducerOptions(9, 8).pred_hidden(8).pred_layers(2).joint_hidden(8).durations(durations));
  torch::NoGradGuard no_grad;
  for (auto& p : t->parameters()) p.mul_(3.0);
  t->out->bias.zero_();
  t->out->bias[t->blank_id()] = blank_bias;
  t->eval();
  return t;
}

// A transducer as confident as a trained one on frames(): token k's evidence is the frame's k-th
// value (common/confident_transducer.h).
Transducer make_confident(const std::vector<int64_t>& durations) {
  auto t = make(durations, 21, 0.0);
  testing::make_confident(*t, torch::eye(8), 12.0);
  return t;
}

// n frames [n, 8] of small noise, 40% of them with one token's evidence (3 at its index).
torch::Tensor frames(int64_t n) {
  auto x = 0.3 * torch::randn({n, 8});
  const auto evidence = torch::rand({n}) < 0.4;
  const auto token = torch::randint(8, {n});
  for (int64_t f = 0; f < n; ++f) {
    if (evidence[f].item<bool>()) x[f][token[f].item<int64_t>()] += 3.0;
  }
  return x;
}

std::vector<int64_t> ids(const TransducerBeamHypothesis& h) {
  std::vector<int64_t> out;
  for (const auto& token : h.tokens) out.push_back(token.id);
  return out;
}

bool begins_with(const std::vector<int64_t>& all, const std::vector<int64_t>& prefix) {
  return prefix.size() <= all.size() && std::equal(prefix.begin(), prefix.end(), all.begin());
}

struct Run {
  std::vector<TransducerBeamHypothesis> hypotheses;
  int64_t bounded_frames = 0;
};

// The search fed `encoded` in blocks of the given sizes (cycled); after each block the stable
// tokens begin every hypothesis and extend the last block's.
Run decode(Transducer& t, const torch::Tensor& encoded, const std::vector<int64_t>& blocks,
           TransducerBeamOptions options) {
  torch::NoGradGuard no_grad;
  TransducerBeamSearch search(*t, options);
  std::vector<int64_t> stable;
  int64_t at = 0;
  for (size_t i = 0; at < encoded.size(0); ++i) {
    const int64_t n = std::min(blocks[i % blocks.size()], encoded.size(0) - at);
    search.advance(encoded.slice(0, at, at + n));
    at += n;
    const auto now = search.stable_tokens();
    EXPECT_TRUE(begins_with(now, stable)) << "stable tokens changed after frame " << at;
    for (const auto& h : search.hypotheses()) EXPECT_TRUE(begins_with(ids(h), now));
    stable = now;
  }
  EXPECT_EQ(search.frames(), encoded.size(0));
  return {search.hypotheses(), search.bounded_frames()};
}

TEST(TransducerBeamSearch, InBlocksEqualsAtOnce) {
  for (const auto& durations : {std::vector<int64_t>{}, std::vector<int64_t>{0, 1, 2, 4}}) {
    SCOPED_TRACE(durations.empty() ? "rnn-t" : "tdt");
    auto t = make_confident(durations);
    torch::manual_seed(3);
    const auto encoded = frames(100);
    TransducerBeamOptions options;
    options.beam_size = 3;
    const auto whole = decode(t, encoded, {100}, options);
    EXPECT_EQ(whole.bounded_frames, 0) << "the model must be confident enough for the search";
    ASSERT_GE(whole.hypotheses.size(), 3u);
    ASSERT_GE(whole.hypotheses[0].tokens.size(), 10u) << "too few tokens to tell much";
    // Best first: by score / (tokens + 1).
    for (size_t h = 1; h < whole.hypotheses.size(); ++h) {
      const auto rank = [](const TransducerBeamHypothesis& x) {
        return x.score / static_cast<double>(x.tokens.size() + 1);
      };
      EXPECT_GE(rank(whole.hypotheses[h - 1]), rank(whole.hypotheses[h]));
    }
    for (const auto& blocks : {std::vector<int64_t>{1}, {3, 1, 7}, {2, 5}}) {
      const auto parts = decode(t, encoded, blocks, options);
      ASSERT_EQ(parts.hypotheses.size(), whole.hypotheses.size());
      for (size_t h = 0; h < whole.hypotheses.size(); ++h) {
        const auto& a = parts.hypotheses[h];
        const auto& b = whole.hypotheses[h];
        ASSERT_EQ(ids(a), ids(b)) << "hypothesis " << h;
        for (size_t i = 0; i < a.tokens.size(); ++i) {
          EXPECT_EQ(a.tokens[i].frame, b.tokens[i].frame);
          EXPECT_EQ(a.tokens[i].duration, b.tokens[i].duration);
        }
        // The encoder projection of a block rounds as a GEMM of that many rows does.
        EXPECT_NEAR(a.score, b.score, 1e-4) << "hypothesis " << h;
      }
    }
  }
}

TEST(TransducerBeamSearch, AFrameThatKeepsEmittingEndsAtMaxExpansions) {
  for (const auto& durations : {std::vector<int64_t>{}, std::vector<int64_t>{0, 1}}) {
    SCOPED_TRACE(durations.empty() ? "rnn-t" : "tdt");
    auto t = make(durations, 5, -40.0);  // the blank never wins
    if (!durations.empty()) {
      torch::NoGradGuard no_grad;
      t->out->bias[t->options.vocab_size()] = 40.0;  // nor does a duration other than 0
    }
    const auto encoded = torch::randn({6, 8});
    TransducerBeamOptions options;
    options.beam_size = 2;
    options.max_expansions = 30;
    const auto run = decode(t, encoded, {6}, options);
    EXPECT_EQ(run.bounded_frames, 6);
    ASSERT_EQ(run.hypotheses.size(), 2u);
    for (const auto& h : run.hypotheses) EXPECT_LE(h.tokens.size(), 6u * 30u);
  }
}

TEST(TransducerBeamSearch, RefusesBadOptionsAndInput) {
  auto t = make({}, 1, 1.0);
  TransducerBeamOptions options;
  options.beam_size = 0;
  EXPECT_THAT(error_of<c10::Error>([&] { TransducerBeamSearch(*t, options); }),
              HasSubstr("beam_size must be > 0"));
  options.beam_size = 4;
  options.max_expansions = 3;
  EXPECT_THAT(error_of<c10::Error>([&] { TransducerBeamSearch(*t, options); }),
              HasSubstr("max_expansions must be >= beam_size 4, got 3"));
  Transducer two(TransducerOptions(2, 8));
  EXPECT_THAT(error_of<c10::Error>([&] { TransducerBeamSearch(*two, {}); }),
              HasSubstr("at least two tokens besides the blank"));
  TransducerBeamSearch search(*t, {});
  EXPECT_THAT(error_of<c10::Error>([&] {
                search.advance(torch::zeros({4, 5}));
              }),
              HasSubstr("encoded must be [k, D = 8], got [4, 5]"));
}

}  // namespace test_transducer_beam_search
}  // namespace attnzoo
