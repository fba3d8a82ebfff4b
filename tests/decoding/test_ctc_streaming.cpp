// CtcPrefixBeamSearch, the prefix beam search over frames that arrive in blocks: after every
// block its n-best equals ctc_prefix_beam_search of the frames so far, whatever the block sizes
// (tokens, scores, timings, confidences), for both beam units on the reference cases of
// decoding.make_reference; reset starts over; bad blocks are refused by name and leave the
// search as it was.
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
namespace test_ctc_streaming {

using ::testing::HasSubstr;

void expect_same(const std::vector<CtcHypothesis>& ours, const std::vector<CtcHypothesis>& whole,
                 const std::string& where) {
  ASSERT_EQ(ours.size(), whole.size()) << where;
  for (size_t r = 0; r < ours.size(); ++r) {
    EXPECT_EQ(ours[r].tokens, whole[r].tokens) << where << " hypothesis " << r;
    EXPECT_EQ(ours[r].score, whole[r].score) << where << " hypothesis " << r;
    EXPECT_EQ(ours[r].confidence, whole[r].confidence) << where << " hypothesis " << r;
    ASSERT_EQ(ours[r].timings.size(), whole[r].timings.size()) << where;
    for (size_t i = 0; i < ours[r].timings.size(); ++i) {
      EXPECT_EQ(ours[r].timings[i].start_frame, whole[r].timings[i].start_frame) << where;
      EXPECT_EQ(ours[r].timings[i].end_frame, whole[r].timings[i].end_frame) << where;
      EXPECT_EQ(ours[r].timings[i].end_seconds, whole[r].timings[i].end_seconds) << where;
      EXPECT_EQ(ours[r].timings[i].confidence, whole[r].timings[i].confidence) << where;
    }
  }
}

TEST(CtcStreaming, EveryBlockGivesTheSearchOfTheFramesSoFar) {
  const auto cases = testing::load_reference("beam_cases.json");
  int compared = 0;
  for (const auto unit : {BeamUnit::kPrefix, BeamUnit::kPrefixEnding}) {
    for (size_t n = 0; n < cases.size(); n += 7) {  // every 7th case: all sizes, seeds, beams
      const auto& c = cases[n];
      const auto values = c.at("log_probs").get<std::vector<float>>();
      const int64_t frames = c.at("frames").get<int64_t>();
      const int64_t vocab = c.at("vocab").get<int64_t>();
      const auto o = testing::case_options(c, unit);
      for (const int64_t block : {int64_t{1}, int64_t{3}, int64_t{16}}) {
        const std::string where = c.at("name").get<std::string>() + ", blocks of " +
                                  std::to_string(block) +
                                  (unit == BeamUnit::kPrefix ? ", prefix" : ", prefix_ending");
        CtcPrefixBeamSearch search(vocab, o);
        for (int64_t t = 0; t < frames; t += block) {
          const int64_t k = std::min(block, frames - t);
          search.advance({values.data() + t * vocab, k, vocab});
          ASSERT_EQ(search.frames(), t + k);
          expect_same(search.hypotheses(), ctc_prefix_beam_search({values.data(), t + k, vocab}, o),
                      where + ", after frame " + std::to_string(t + k));
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 500);
}

TEST(CtcStreaming, BeforeAnyFrameTheEmptyHypothesisIsCertain) {
  CtcPrefixBeamSearch search(5);
  const auto hypotheses = search.hypotheses();
  ASSERT_EQ(hypotheses.size(), 1u);
  EXPECT_TRUE(hypotheses[0].tokens.empty());
  EXPECT_EQ(hypotheses[0].score, 0.0);
  EXPECT_EQ(search.frames(), 0);
  search.advance({nullptr, 0, 5});  // an empty block changes nothing
  EXPECT_EQ(search.frames(), 0);
}

TEST(CtcStreaming, ResetStartsTheNextUtterance) {
  const std::vector<float> first = {std::log(0.1f), std::log(0.9f), std::log(0.9f), std::log(0.1f)};
  const std::vector<float> second = {std::log(0.2f), std::log(0.8f)};
  PrefixBeamSearchOptions o;
  o.beam_size = 4;
  o.nbest = 2;
  CtcPrefixBeamSearch search(2, o);
  search.advance({first.data(), 2, 2});
  search.reset();
  search.advance({second.data(), 1, 2});
  expect_same(search.hypotheses(), ctc_prefix_beam_search({second.data(), 1, 2}, o), "reset");
}

TEST(CtcStreaming, BadBlocksAreRefusedAndChangeNothing) {
  std::vector<float> values(4 * 3, std::log(1.0f / 3.0f));
  CtcPrefixBeamSearch search(3);
  search.advance({values.data(), 2, 3});
  const auto before = search.hypotheses();
  const auto error = [&](const CtcLogProbs& block) -> std::string {
    try {
      search.advance(block);
    } catch (const DecodingError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_THAT(error({values.data(), 2, 4}), HasSubstr("vocab (V) 4 differs from the decoder's 3"));
  EXPECT_THAT(error({values.data(), -1, 3}), HasSubstr("must not be negative"));
  EXPECT_THAT(error({nullptr, 1, 3}), HasSubstr("data is null"));
  values[1 * 3 + 2] = std::numeric_limits<float>::quiet_NaN();
  // The block's second row is frame 3 of the utterance, after the two frames already taken.
  EXPECT_THAT(error({values.data(), 2, 3}), HasSubstr("NaN at frame 3, token 2"));
  EXPECT_EQ(search.frames(), 2);
  expect_same(search.hypotheses(), before, "after the refused blocks");
  PrefixBeamSearchOptions past_the_vocab;
  past_the_vocab.blank_id = 3;
  std::string message = "(no error)";
  try {
    CtcPrefixBeamSearch bad(3, past_the_vocab);
  } catch (const DecodingError& e) {
    message = e.what();
  }
  EXPECT_THAT(message, HasSubstr("blank_id: expected a token id in [0, 3), got 3"));
}

}  // namespace test_ctc_streaming
}  // namespace attnzoo::decoding
