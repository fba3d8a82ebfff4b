// CTC decoding against outside references: flashlight-text's LexiconFreeDecoder (log_add, a
// ZeroLM: torchaudio's ctc_decoder without lexicon or LM) for BeamUnit::kPrefixEnding at beams
// 1..16; a float64 enumeration of every alignment (tiny T, V) for both beam units without
// pruning, timestamps and confidence included; torch's ctc_loss for the exact log P of any label
// sequence (which validates the forward algorithm used here as the oracle at T = 100); numpy's
// argmax path for greedy. And the options: pruning equivalences and every bad argument named.
#include "decoding_test_util.h"

#include <attnzoo/decoding/ctc_decoder.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace attnzoo::decoding {
namespace test_ctc_decoder {

using ::testing::HasSubstr;
using json = nlohmann::json;
using testing::case_options;
using testing::load_reference;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Case {
  std::vector<float> values;
  int64_t frames = 0;
  int64_t vocab = 0;
  int64_t blank = 0;
  CtcLogProbs view() const { return {values.data(), frames, vocab}; }
};

Case case_of(const json& c) {
  Case out;
  out.values = c.at("log_probs").get<std::vector<float>>();
  out.frames = c.at("frames").get<int64_t>();
  out.vocab = c.at("vocab").get<int64_t>();
  out.blank = c.at("blank").get<int64_t>();
  return out;
}

double log_add(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double hi = std::max(a, b);
  return hi + std::log1p(std::exp(std::min(a, b) - hi));
}

// log P(labels): the CTC forward algorithm over the blank-interleaved labels, in float64
// (Graves et al. 2006, eq. 6-8). Checked against torch's ctc_loss below.
double exact_log_prob(const Case& c, const std::vector<int64_t>& labels) {
  std::vector<int64_t> ext{c.blank};
  for (const auto l : labels) {
    ext.push_back(l);
    ext.push_back(c.blank);
  }
  const size_t s_count = ext.size();
  std::vector<double> alpha(s_count, kNegInf), next(s_count);
  const auto y = [&](int64_t t, int64_t k) { return double{c.values[t * c.vocab + k]}; };
  alpha[0] = y(0, ext[0]);
  if (s_count > 1) alpha[1] = y(0, ext[1]);
  for (int64_t t = 1; t < c.frames; ++t) {
    for (size_t s = 0; s < s_count; ++s) {
      double a = alpha[s];
      if (s >= 1) a = log_add(a, alpha[s - 1]);
      if (s >= 2 && ext[s] != c.blank && ext[s] != ext[s - 2]) a = log_add(a, alpha[s - 2]);
      next[s] = a + y(t, ext[s]);
    }
    alpha.swap(next);
  }
  return s_count > 1 ? log_add(alpha[s_count - 1], alpha[s_count - 2]) : alpha[0];
}

std::vector<int64_t> tokens_of(const json& j) { return j.at("tokens").get<std::vector<int64_t>>(); }

TEST(CtcForwardOracle, MatchesTorchCtcLoss) {
  const auto cases = load_reference("beam_cases.json");
  double worst = 0.0;
  int checked = 0;
  for (const auto& c : cases) {
    const auto x = case_of(c);
    for (const auto& h : c.at("flashlight")) {
      const double ours = exact_log_prob(x, tokens_of(h));
      const double torch_value = h.at("exact").get<double>();
      worst = std::max(worst, std::abs(ours - torch_value));
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
  EXPECT_LT(worst, 1e-9) << "over " << checked << " label sequences";
}

TEST(CtcPrefixBeamSearch, MatchesFlashlightWithPrefixEndingBeam) {
  const auto cases = load_reference("beam_cases.json");
  double worst = 0.0;
  size_t hypotheses = 0;
  for (const auto& c : cases) {
    const auto x = case_of(c);
    const auto ours = ctc_prefix_beam_search(x.view(), case_options(c, BeamUnit::kPrefixEnding));
    const auto& theirs = c.at("flashlight");
    const std::string name = c.at("name");
    ASSERT_EQ(ours.size(), theirs.size()) << name;
    for (size_t r = 0; r < ours.size(); ++r) {
      EXPECT_EQ(ours[r].tokens, tokens_of(theirs[r])) << name << " hypothesis " << r;
      const double diff = std::abs(ours[r].score - theirs[r].at("score").get<double>());
      EXPECT_LT(diff, 1e-4) << name << " hypothesis " << r;
      worst = std::max(worst, diff);
      ++hypotheses;
    }
  }
  EXPECT_GT(hypotheses, 1000u);
  std::cout << "flashlight-text parity: " << cases.size() << " cases, " << hypotheses
            << " hypotheses, largest score difference " << worst << "\n";
}

// Every beam hypothesis sums a subset of its alignments: never above the exact log P (torch's
// ctc_loss, through the forward algorithm above), sorted best first, each label sequence once.
// Both beam units; with pruning they differ from each other and from the exact sum, which is why
// only the bound is asserted here (the exact values are checked without pruning below, and
// kPrefixEnding's pruned values against flashlight-text above).
TEST(CtcPrefixBeamSearch, ScoresAreBoundedByTheExactSum) {
  const auto cases = load_reference("beam_cases.json");
  for (const auto unit : {BeamUnit::kPrefix, BeamUnit::kPrefixEnding}) {
    for (const auto& c : cases) {
      const auto x = case_of(c);
      const auto ours = ctc_prefix_beam_search(x.view(), case_options(c, unit));
      const std::string name = c.at("name");
      ASSERT_FALSE(ours.empty()) << name;
      for (size_t r = 0; r < ours.size(); ++r) {
        EXPECT_LE(ours[r].score, exact_log_prob(x, ours[r].tokens) + 1e-9) << name << " " << r;
        EXPECT_EQ(ours[r].timings.size(), ours[r].tokens.size()) << name;
        if (r > 0) {
          EXPECT_GE(ours[r - 1].score, ours[r].score) << name;
        }
        for (size_t q = 0; q < r; ++q) EXPECT_NE(ours[q].tokens, ours[r].tokens) << name;
      }
    }
  }
}

// Without pruning both beam units are exact: every label sequence of nonzero probability, in
// the enumeration's order, with its log P, its best alignment's runs and their peak posteriors.
TEST(CtcPrefixBeamSearch, IsExactWithoutPruning) {
  const auto cases = load_reference("oracle_cases.json");
  for (const auto unit : {BeamUnit::kPrefix, BeamUnit::kPrefixEnding}) {
    for (const auto& c : cases) {
      const auto x = case_of(c);
      const auto& prefixes = c.at("prefixes");
      PrefixBeamSearchOptions o;
      o.beam_size = 2 * static_cast<int64_t>(prefixes.size()) + 2;
      o.nbest = o.beam_size;
      o.blank_id = x.blank;
      o.beam_unit = unit;
      o.frame_period_seconds = 0.03;
      const auto ours = ctc_prefix_beam_search(x.view(), o);
      const std::string name = c.at("name");
      ASSERT_EQ(ours.size(), prefixes.size()) << name;
      for (size_t r = 0; r < ours.size(); ++r) {
        const auto& want = prefixes[r];
        ASSERT_EQ(ours[r].tokens, tokens_of(want)) << name << " " << r;
        EXPECT_NEAR(ours[r].score, want.at("score").get<double>(), 1e-9) << name;
        const auto& runs = want.at("best_runs");
        ASSERT_EQ(ours[r].timings.size(), runs.size()) << name;
        double confidence = 0.0;
        for (size_t i = 0; i < runs.size(); ++i) {
          const auto& timing = ours[r].timings[i];
          const int64_t start = runs[i].at("start"), end = runs[i].at("end");
          EXPECT_EQ(timing.start_frame, start) << name << " token " << i;
          EXPECT_EQ(timing.end_frame, end) << name << " token " << i;
          EXPECT_DOUBLE_EQ(timing.start_seconds, 0.03 * static_cast<double>(start));
          EXPECT_DOUBLE_EQ(timing.end_seconds, 0.03 * static_cast<double>(end + 1));
          double peak = kNegInf;
          for (int64_t t = start; t <= end; ++t) {
            peak = std::max(peak, double{x.values[t * x.vocab + ours[r].tokens[i]]});
          }
          EXPECT_NEAR(timing.confidence, std::exp(peak), 1e-12);
          confidence += std::exp(peak);
        }
        if (!runs.empty()) {
          EXPECT_NEAR(ours[r].confidence, confidence / static_cast<double>(runs.size()), 1e-12);
        }
      }
    }
  }
}

TEST(CtcGreedy, MatchesNumpyArgmaxPath) {
  const auto cases = load_reference("greedy_cases.json");
  for (const auto& c : cases) {
    const auto x = case_of(c);
    GreedyOptions o;
    o.blank_id = x.blank;
    o.frame_period_seconds = 0.04;
    const auto h = ctc_greedy_decode(x.view(), o);
    EXPECT_EQ(h.tokens, tokens_of(c));
    EXPECT_NEAR(h.score, c.at("score").get<double>(), 1e-9);
    const auto& runs = c.at("runs");
    ASSERT_EQ(h.timings.size(), runs.size());
    for (size_t i = 0; i < runs.size(); ++i) {
      EXPECT_EQ(h.timings[i].start_frame, runs[i].at("start").get<int64_t>());
      EXPECT_EQ(h.timings[i].end_frame, runs[i].at("end").get<int64_t>());
    }
    if (h.tokens.empty()) {
      double blank = 0.0;
      for (int64_t t = 0; t < x.frames; ++t)
        blank += std::exp(double{x.values[t * x.vocab + x.blank]});
      EXPECT_NEAR(h.confidence, blank / static_cast<double>(x.frames), 1e-12);
    }
  }
}

// One token per frame left (top-1, a tiny top-p, a min log-prob of 0): one alignment survives,
// the argmax path, so the beam's only hypothesis is the greedy one with the best path's score.
TEST(CtcPrefixBeamSearch, KeepingOneTokenPerFrameIsGreedy) {
  const auto cases = load_reference("greedy_cases.json");
  for (const auto& c : cases) {
    const auto x = case_of(c);
    GreedyOptions g;
    g.blank_id = x.blank;
    const auto greedy = ctc_greedy_decode(x.view(), g);
    for (int variant = 0; variant < 3; ++variant) {
      PrefixBeamSearchOptions o;
      o.blank_id = x.blank;
      o.beam_size = 4;
      o.nbest = 4;
      if (variant == 0) o.token_top_k = 1;
      if (variant == 1) o.token_top_p = 1e-9;
      if (variant == 2) o.token_min_log_prob = 0.0;
      const auto beam = ctc_prefix_beam_search(x.view(), o);
      ASSERT_EQ(beam.size(), 1u) << "variant " << variant;
      EXPECT_EQ(beam[0].tokens, greedy.tokens);
      EXPECT_NEAR(beam[0].score, greedy.score, 1e-9);
    }
  }
}

// Pruning a token at a frame is the same as giving it probability 0 there (-inf).
TEST(CtcPrefixBeamSearch, PerFramePruningEqualsZeroProbability) {
  const auto cases = load_reference("beam_cases.json");
  int checked = 0;
  for (const auto& c : cases) {
    if (c.at("beam").get<int64_t>() != 5 || c.at("top_k").get<int64_t>() != 0) continue;
    const auto x = case_of(c);
    for (const double top_p : {0.5, 0.9}) {
      const double min_log_prob = -3.0;
      Case pruned = x;
      for (int64_t t = 0; t < x.frames; ++t) {
        float* row = pruned.values.data() + t * x.vocab;
        std::vector<int64_t> order(static_cast<size_t>(x.vocab));
        for (int64_t k = 0; k < x.vocab; ++k) order[static_cast<size_t>(k)] = k;
        std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          return x.values[t * x.vocab + a] > x.values[t * x.vocab + b];
        });
        // The kept tokens are the most likely ones up to the first that fails a rule.
        double mass = 0.0;
        bool open = true;
        for (size_t i = 0; i < order.size(); ++i) {
          const double lp = x.values[t * x.vocab + order[i]];
          if (i > 0 && (mass >= top_p || lp < min_log_prob)) open = false;
          if (open) {
            mass += std::exp(lp);
          } else {
            row[order[i]] = -std::numeric_limits<float>::infinity();
          }
        }
      }
      PrefixBeamSearchOptions o;
      o.blank_id = x.blank;
      o.beam_size = 5;
      o.nbest = 5;
      const auto reference = ctc_prefix_beam_search(pruned.view(), o);
      o.token_top_p = top_p;
      o.token_min_log_prob = min_log_prob;
      const auto ours = ctc_prefix_beam_search(x.view(), o);
      ASSERT_EQ(ours.size(), reference.size());
      for (size_t r = 0; r < ours.size(); ++r) {
        EXPECT_EQ(ours[r].tokens, reference[r].tokens);
        EXPECT_DOUBLE_EQ(ours[r].score, reference[r].score);
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
}

// The message of the DecodingError that f throws (a test failure when it throws none).
template <typename F>
std::string decoding_error(F&& f) {
  try {
    f();
  } catch (const DecodingError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a DecodingError";
  return {};
}

std::string beam_error(const CtcLogProbs& x, const PrefixBeamSearchOptions& o) {
  return decoding_error([&] { ctc_prefix_beam_search(x, o); });
}

std::string greedy_error(const CtcLogProbs& x, const GreedyOptions& o) {
  return decoding_error([&] { ctc_greedy_decode(x, o); });
}

TEST(CtcDecoding, BadArgumentsAreNamed) {
  std::vector<float> values(3 * 4, std::log(0.25f));
  const CtcLogProbs x{values.data(), 3, 4};
  const auto with = [](auto edit) {
    PrefixBeamSearchOptions o;
    o.beam_size = 2;
    o.nbest = 1;
    edit(o);
    return o;
  };
  EXPECT_THAT(beam_error(x, with([](auto& o) { o.beam_size = 0; })), HasSubstr("beam_size"));
  EXPECT_THAT(beam_error(x, with([](auto& o) { o.nbest = 0; })), HasSubstr("nbest"));
  EXPECT_THAT(beam_error(x, with([](auto& o) { o.nbest = 3; })), HasSubstr("nbest"));
  EXPECT_THAT(beam_error(x, with([](auto& o) { o.blank_id = 4; })), HasSubstr("blank_id"));
  EXPECT_THAT(beam_error(x, with([](auto& o) { o.blank_id = -1; })), HasSubstr("blank_id"));
  EXPECT_THAT(beam_error(x, with([](auto& o) { o.token_top_k = -1; })), HasSubstr("token_top_k"));
  EXPECT_THAT(beam_error(x, with([](auto& o) { o.token_top_p = 0.0; })), HasSubstr("token_top_p"));
  EXPECT_THAT(beam_error(x, with([](auto& o) { o.token_top_p = 1.5; })), HasSubstr("token_top_p"));
  EXPECT_THAT(beam_error(x, with([](auto& o) { o.token_min_log_prob = std::nan(""); })),
              HasSubstr("token_min_log_prob"));
  EXPECT_THAT(beam_error(x, with([](auto& o) { o.frame_period_seconds = 0.0; })),
              HasSubstr("frame_period_seconds"));
  EXPECT_THAT(beam_error({values.data(), 0, 4}, with([](auto&) {})), HasSubstr("frames (T)"));
  EXPECT_THAT(beam_error({values.data(), 3, 0}, with([](auto&) {})), HasSubstr("vocab (V)"));
  EXPECT_THAT(beam_error({nullptr, 3, 4}, with([](auto&) {})), HasSubstr("data is null"));
  EXPECT_THAT(greedy_error({values.data(), 0, 4}, {}), HasSubstr("frames (T)"));
  GreedyOptions bad_blank;
  bad_blank.blank_id = 9;
  EXPECT_THAT(greedy_error(x, bad_blank), HasSubstr("blank_id"));

  values[2 * 4 + 3] = std::nanf("");
  EXPECT_THAT(beam_error(x, with([](auto&) {})), HasSubstr("NaN at frame 2, token 3"));
  EXPECT_THAT(greedy_error(x, {}), HasSubstr("NaN at frame 2, token 3"));
  values[2 * 4 + 3] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(beam_error(x, with([](auto&) {})), HasSubstr("+inf at frame 2, token 3"));
}

// A frame where every token has probability 0 leaves no alignment, hence no hypothesis.
TEST(CtcPrefixBeamSearch, ImpossibleFrameGivesNoHypothesis) {
  std::vector<float> values(3 * 2, std::log(0.5f));
  values[2] = values[3] = -std::numeric_limits<float>::infinity();
  PrefixBeamSearchOptions o;
  o.beam_size = 3;
  EXPECT_TRUE(ctc_prefix_beam_search({values.data(), 3, 2}, o).empty());
}

}  // namespace test_ctc_decoder
}  // namespace attnzoo::decoding
