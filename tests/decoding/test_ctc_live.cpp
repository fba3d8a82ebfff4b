// Results while the frames arrive: CtcGreedySearch fed in blocks gives after every block what
// ctc_greedy_decode gives on the frames so far, to the bit, with tokens that only grow (on
// greedy_cases.json); CtcPrefixBeamSearch::stable_tokens() is the longest common prefix of the
// whole beam, only grows, and begins every hypothesis of that frame and of every later one (on
// beam_cases.json, both beam units); with a margin, the common prefix of the likely hypotheses,
// committed by keep_prefix.
#include "decoding_test_util.h"

#include <attnzoo/decoding/ctc_decoder.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

namespace attnzoo::decoding {
namespace test_ctc_live {

using json = nlohmann::json;
using testing::case_options;
using testing::load_reference;
using Ids = std::vector<int64_t>;

bool is_prefix(const Ids& prefix, const Ids& of) {
  return prefix.size() <= of.size() && std::equal(prefix.begin(), prefix.end(), of.begin());
}

void expect_same(const CtcHypothesis& ours, const CtcHypothesis& whole, const std::string& where) {
  EXPECT_EQ(ours.tokens, whole.tokens) << where;
  EXPECT_EQ(ours.score, whole.score) << where;
  EXPECT_EQ(ours.confidence, whole.confidence) << where;
  ASSERT_EQ(ours.timings.size(), whole.timings.size()) << where;
  for (size_t i = 0; i < ours.timings.size(); ++i) {
    EXPECT_EQ(ours.timings[i].start_frame, whole.timings[i].start_frame) << where;
    EXPECT_EQ(ours.timings[i].end_frame, whole.timings[i].end_frame) << where;
    EXPECT_EQ(ours.timings[i].start_seconds, whole.timings[i].start_seconds) << where;
    EXPECT_EQ(ours.timings[i].end_seconds, whole.timings[i].end_seconds) << where;
    EXPECT_EQ(ours.timings[i].confidence, whole.timings[i].confidence) << where;
  }
}

TEST(CtcGreedySearch, EveryBlockGivesTheGreedyPathOfTheFramesSoFar) {
  const auto cases = load_reference("greedy_cases.json");
  ASSERT_EQ(cases.size(), 10u);
  int compared = 0;
  for (size_t n = 0; n < cases.size(); ++n) {
    const auto& c = cases[n];
    const auto values = c.at("log_probs").get<std::vector<float>>();
    const int64_t frames = c.at("frames").get<int64_t>();
    const int64_t vocab = c.at("vocab").get<int64_t>();
    GreedyOptions o;
    o.blank_id = c.at("blank").get<int64_t>();
    for (const int64_t block : {int64_t{1}, int64_t{3}, int64_t{16}}) {
      const std::string where =
          "greedy case " + std::to_string(n) + ", blocks of " + std::to_string(block);
      CtcGreedySearch search(vocab, o);
      Ids before;
      for (int64_t t = 0; t < frames; t += block) {
        const int64_t k = std::min(block, frames - t);
        search.advance({values.data() + t * vocab, k, vocab});
        ASSERT_EQ(search.frames(), t + k);
        const auto now = search.hypothesis();
        const auto at = where + ", after frame " + std::to_string(t + k);
        expect_same(now, ctc_greedy_decode({values.data(), t + k, vocab}, o), at);
        EXPECT_TRUE(is_prefix(before, now.tokens)) << at;
        before = now.tokens;
        ++compared;
      }
      // The whole utterance is numpy's argmax path.
      EXPECT_EQ(before, c.at("tokens").get<Ids>()) << where;
      EXPECT_NEAR(search.hypothesis().score, c.at("score").get<double>(), 1e-6) << where;
    }
  }
  EXPECT_GT(compared, 800);
}

TEST(CtcGreedySearch, StartsEmptyAndResets) {
  const std::vector<float> frames = {std::log(0.2f), std::log(0.8f), std::log(0.7f),
                                     std::log(0.3f)};
  CtcGreedySearch search(2);
  auto h = search.hypothesis();
  EXPECT_TRUE(h.tokens.empty());
  EXPECT_EQ(h.score, 0.0);
  EXPECT_EQ(h.confidence, 1.0);
  EXPECT_EQ(search.frames(), 0);
  search.advance({nullptr, 0, 2});  // an empty block changes nothing
  EXPECT_EQ(search.frames(), 0);
  search.advance({frames.data(), 2, 2});
  EXPECT_EQ(search.hypothesis().tokens, (Ids{1}));
  search.reset();
  EXPECT_EQ(search.frames(), 0);
  search.advance({frames.data() + 2, 1, 2});
  expect_same(search.hypothesis(), ctc_greedy_decode({frames.data() + 2, 1, 2}), "after reset");
  EXPECT_THROW(search.advance({frames.data(), 1, 3}), DecodingError);
  EXPECT_EQ(search.frames(), 1);
}

// The longest common prefix of the hypotheses when all of the beam is returned (nbest =
// beam_size).
Ids common_prefix(const std::vector<CtcHypothesis>& hypotheses) {
  if (hypotheses.empty()) return {};
  Ids common = hypotheses.front().tokens;
  for (const auto& h : hypotheses) {
    const auto end = std::mismatch(common.begin(), common.end(), h.tokens.begin(), h.tokens.end());
    common.erase(end.first, common.end());
  }
  return common;
}

// stable_tokens() after every block: it grows, it begins every hypothesis then and later, and it
// is all they have in common. Returning the best hypothesis's tokens instead fails here as soon
// as two prefixes of the beam differ in their last token, which nearly every case has.
TEST(CtcPrefixBeamSearch, StableTokensOnlyGrowAndBeginEveryLaterHypothesis) {
  const auto cases = load_reference("beam_cases.json");
  int blocks = 0, grew = 0, behind_the_best = 0;
  for (const auto unit : {BeamUnit::kPrefix, BeamUnit::kPrefixEnding}) {
    for (size_t n = 0; n < cases.size(); n += 3) {
      const auto& c = cases[n];
      const auto values = c.at("log_probs").get<std::vector<float>>();
      const int64_t frames = c.at("frames").get<int64_t>();
      const int64_t vocab = c.at("vocab").get<int64_t>();
      const auto o = case_options(c, unit);
      for (const int64_t block : {int64_t{1}, int64_t{3}, int64_t{16}}) {
        const std::string where = c.at("name").get<std::string>() + ", blocks of " +
                                  std::to_string(block) + ", " + to_string(unit);
        CtcPrefixBeamSearch search(vocab, o);
        EXPECT_TRUE(search.stable_tokens().empty()) << where;
        std::vector<Ids> stable;  // after each block
        for (int64_t t = 0; t < frames; t += block) {
          const int64_t k = std::min(block, frames - t);
          search.advance({values.data() + t * vocab, k, vocab});
          const auto at = where + ", after frame " + std::to_string(t + k);
          const auto now = search.stable_tokens();
          const auto hypotheses = search.hypotheses();
          ASSERT_FALSE(hypotheses.empty()) << at;
          EXPECT_EQ(now, common_prefix(hypotheses)) << at;
          for (const auto& earlier : stable) {
            for (const auto& h : hypotheses) EXPECT_TRUE(is_prefix(earlier, h.tokens)) << at;
          }
          if (!stable.empty()) {
            EXPECT_TRUE(is_prefix(stable.back(), now)) << at;
            if (now.size() > stable.back().size()) ++grew;
          }
          if (now.size() < hypotheses.front().tokens.size()) ++behind_the_best;
          stable.push_back(now);
          ++blocks;
        }
        const auto final_hypotheses = ctc_prefix_beam_search({values.data(), frames, vocab}, o);
        for (const auto& s : stable) {
          for (const auto& h : final_hypotheses) EXPECT_TRUE(is_prefix(s, h.tokens)) << where;
        }
      }
    }
  }
  EXPECT_GT(blocks, 5000);
  EXPECT_GT(grew, 500);             // it does move forward
  EXPECT_GT(behind_the_best, 500);  // and it is not the best hypothesis
}

// stable_tokens(margin): the common prefix of the hypotheses within `margin` (natural log) of the
// best; committed with keep_prefix after every block, as a live recognizer does, it only grows,
// every later hypothesis begins with it, and the best hypothesis of the block survives the
// commit. Counting every prefix of the beam (the margin ignored) makes it equal stable_tokens()
// and fails the "ahead" count; a keep_prefix that kept the others breaks the prefix checks.
TEST(CtcPrefixBeamSearch, StableTokensWithinAMarginAreCommittedByKeepPrefix) {
  const auto cases = load_reference("beam_cases.json");
  int blocks = 0, ahead = 0;
  for (const double margin : {1.0, 4.0}) {
    for (size_t n = 0; n < cases.size(); n += 3) {
      const auto& c = cases[n];
      const auto values = c.at("log_probs").get<std::vector<float>>();
      const int64_t frames = c.at("frames").get<int64_t>();
      const int64_t vocab = c.at("vocab").get<int64_t>();
      const auto o = case_options(c, BeamUnit::kPrefix);  // nbest = beam_size: the whole beam
      const std::string where =
          c.at("name").get<std::string>() + ", margin " + std::to_string(margin);
      CtcPrefixBeamSearch search(vocab, o);
      std::vector<Ids> committed;
      for (int64_t t = 0; t < frames; t += 3) {
        const int64_t k = std::min(int64_t{3}, frames - t);
        search.advance({values.data() + t * vocab, k, vocab});
        const auto at = where + ", after frame " + std::to_string(t + k);
        const auto before = search.hypotheses();
        ASSERT_FALSE(before.empty()) << at;
        std::vector<CtcHypothesis> near;
        for (const auto& h : before) {
          if (h.score >= before.front().score - margin) near.push_back(h);
        }
        const auto now = search.stable_tokens(margin);
        EXPECT_EQ(now, common_prefix(near)) << at;
        EXPECT_EQ(search.stable_tokens(1e6), search.stable_tokens()) << at;
        const auto all_agree = search.stable_tokens();
        EXPECT_TRUE(is_prefix(all_agree, now)) << at;
        if (now.size() > all_agree.size()) ++ahead;
        search.keep_prefix(now);
        const auto after = search.hypotheses();
        ASSERT_FALSE(after.empty()) << at;
        EXPECT_EQ(after.front().tokens, before.front().tokens) << at;
        EXPECT_EQ(after.front().score, before.front().score) << at;
        for (const auto& h : after) EXPECT_TRUE(is_prefix(now, h.tokens)) << at;
        EXPECT_EQ(search.stable_tokens(), common_prefix(after)) << at;
        if (!committed.empty()) {
          EXPECT_TRUE(is_prefix(committed.back(), now)) << at;
        }
        committed.push_back(now);
        ++blocks;
      }
      for (const auto& h : search.hypotheses()) {
        for (const auto& s : committed) EXPECT_TRUE(is_prefix(s, h.tokens)) << where;
      }
    }
  }
  EXPECT_GT(blocks, 1000);
  EXPECT_GT(ahead, 100);  // the margin lets it move ahead of the whole beam's common prefix
}

// keep_prefix refuses tokens no hypothesis begins with, naming how many, and changes nothing.
TEST(CtcPrefixBeamSearch, KeepPrefixOfNoHypothesisIsRefused) {
  const auto cases = load_reference("beam_cases.json");
  const auto& c = cases.front();
  const auto values = c.at("log_probs").get<std::vector<float>>();
  const int64_t vocab = c.at("vocab").get<int64_t>();
  CtcPrefixBeamSearch search(vocab, case_options(c, BeamUnit::kPrefix));
  search.advance({values.data(), c.at("frames").get<int64_t>(), vocab});
  const auto before = search.hypotheses();
  const Ids nowhere(before.front().tokens.size() + 1,
                    c.at("blank").get<int64_t>());  // blanks: never a token of a hypothesis
  try {
    search.keep_prefix(nowhere);
    FAIL() << "keep_prefix accepted tokens no hypothesis begins with";
  } catch (const DecodingError& e) {
    EXPECT_NE(std::string(e.what()).find("no prefix of the beam begins with the " +
                                         std::to_string(nowhere.size()) + " tokens given"),
              std::string::npos)
        << e.what();
  }
  const auto after = search.hypotheses();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].tokens, before[i].tokens);
}

}  // namespace test_ctc_live
}  // namespace attnzoo::decoding
