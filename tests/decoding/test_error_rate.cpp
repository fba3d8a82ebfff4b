// Word and character error rates against jiwer 4.0.0 (process_words / process_characters with
// their default transforms, tests/decoding/make_reference.py): on every pair and every corpus of
// error_rate_cases.json, the same error total and rate (to 1e-12), counts consistent with both
// lengths; the empty-reference rule of error_rate.h; hand cases where a substitution must not be
// counted as a deletion and an insertion.
#include <attnzoo/decoding/error_rate.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace attnzoo::decoding {
namespace test_error_rate {

using json = nlohmann::json;

json load() {
  std::ifstream in(std::string(ATTNZOO_DECODING_REFERENCE_DIR) + "/error_rate_cases.json");
  EXPECT_TRUE(in) << "error_rate_cases.json missing: run ctest (decoding.make_reference writes it)";
  return json::parse(in);
}

int64_t count(const json& counts, const char* name) { return counts.at(name).get<int64_t>(); }

// Ours against jiwer's counts of the same texts: the same total of errors and the same rate; the
// hits, substitutions and deletions make the reference, the hits, substitutions and insertions
// the hypothesis (jiwer's S, D and I may split the same total otherwise among equal-cost
// alignments).
void expect_as_jiwer(const EditCounts& ours, const json& theirs, double rate,
                     int64_t reference_length, int64_t hypothesis_length,
                     const std::string& where) {
  const int64_t errors =
      count(theirs, "substitutions") + count(theirs, "deletions") + count(theirs, "insertions");
  EXPECT_EQ(ours.errors(), errors) << where;
  EXPECT_EQ(ours.substitutions + ours.deletions + ours.insertions, errors) << where;
  EXPECT_EQ(ours.reference_length(),
            count(theirs, "hits") + count(theirs, "substitutions") + count(theirs, "deletions"))
      << where;
  EXPECT_EQ(ours.reference_length(), reference_length) << where;
  EXPECT_EQ(ours.hits + ours.substitutions + ours.insertions, hypothesis_length) << where;
  EXPECT_EQ(count(theirs, "hits") + count(theirs, "substitutions") + count(theirs, "insertions"),
            hypothesis_length)
      << where;
  EXPECT_GE(ours.hits, 0);
  EXPECT_GE(ours.substitutions, 0);
  EXPECT_GE(ours.deletions, 0);
  EXPECT_GE(ours.insertions, 0);
  EXPECT_NEAR(ours.rate(), rate, 1e-12) << where;
}

size_t length(const std::vector<std::string>& tokens) { return tokens.size(); }

TEST(ErrorRate, PairsMatchJiwer) {
  const auto cases = load().at("pairs");
  ASSERT_GE(cases.size(), 50u);
  int with_errors = 0;
  for (size_t n = 0; n < cases.size(); ++n) {
    const auto& c = cases[n];
    const auto reference = c.at("reference").get<std::string>();
    const auto hypothesis = c.at("hypothesis").get<std::string>();
    const std::string where =
        "pair " + std::to_string(n) + ": '" + reference + "' / '" + hypothesis + "'";
    const auto words = word_errors(reference, hypothesis);
    expect_as_jiwer(words, c.at("words"), c.at("wer").get<double>(),
                    static_cast<int64_t>(length(words_of(reference))),
                    static_cast<int64_t>(length(words_of(hypothesis))), where + " (words)");
    const auto characters = character_errors(reference, hypothesis);
    expect_as_jiwer(characters, c.at("characters"), c.at("cer").get<double>(),
                    static_cast<int64_t>(length(characters_of(reference))),
                    static_cast<int64_t>(length(characters_of(hypothesis))),
                    where + " (characters)");
    if (words.errors() > 0) ++with_errors;
  }
  EXPECT_GT(with_errors, 30);
}

// A corpus's rate is its summed errors over its summed reference length, not a mean of rates.
TEST(ErrorRate, CorporaMatchJiwer) {
  const auto corpora = load().at("corpora");
  ASSERT_GE(corpora.size(), 4u);
  for (size_t n = 0; n < corpora.size(); ++n) {
    const auto& c = corpora[n];
    const auto references = c.at("references").get<std::vector<std::string>>();
    const auto hypotheses = c.at("hypotheses").get<std::vector<std::string>>();
    ASSERT_EQ(references.size(), hypotheses.size());
    EditCounts words, characters;
    int64_t reference_words = 0, hypothesis_words = 0;
    int64_t reference_characters = 0, hypothesis_characters = 0;
    for (size_t i = 0; i < references.size(); ++i) {
      words += word_errors(references[i], hypotheses[i]);
      characters += character_errors(references[i], hypotheses[i]);
      reference_words += static_cast<int64_t>(words_of(references[i]).size());
      hypothesis_words += static_cast<int64_t>(words_of(hypotheses[i]).size());
      reference_characters += static_cast<int64_t>(characters_of(references[i]).size());
      hypothesis_characters += static_cast<int64_t>(characters_of(hypotheses[i]).size());
    }
    const std::string where = "corpus " + std::to_string(n);
    expect_as_jiwer(words, c.at("words"), c.at("wer").get<double>(), reference_words,
                    hypothesis_words, where + " (words)");
    expect_as_jiwer(characters, c.at("characters"), c.at("cer").get<double>(), reference_characters,
                    hypothesis_characters, where + " (characters)");
  }
}

// jiwer's wer for an empty reference is its number of insertions (cer likewise); error_rate.h
// gives 0 when the hypothesis is empty too, +inf otherwise. The counts agree.
TEST(ErrorRate, EmptyReference) {
  const auto cases = load().at("empty_references");
  ASSERT_EQ(cases.size(), 3u);
  for (const auto& c : cases) {
    const auto reference = c.at("reference").get<std::string>();
    const auto hypothesis = c.at("hypothesis").get<std::string>();
    const auto words = word_errors(reference, hypothesis);
    const auto characters = character_errors(reference, hypothesis);
    EXPECT_EQ(words.reference_length(), 0);
    EXPECT_EQ(characters.reference_length(), 0);
    EXPECT_EQ(words.insertions, count(c.at("words"), "insertions"));
    EXPECT_EQ(characters.insertions, count(c.at("characters"), "insertions"));
    EXPECT_EQ(c.at("wer").get<double>(), static_cast<double>(words.insertions));
    EXPECT_EQ(c.at("cer").get<double>(), static_cast<double>(characters.insertions));
    const double inf = std::numeric_limits<double>::infinity();
    EXPECT_EQ(words.rate(), words.errors() == 0 ? 0.0 : inf) << reference << "/" << hypothesis;
    EXPECT_EQ(characters.rate(), characters.errors() == 0 ? 0.0 : inf);
  }
  EXPECT_EQ(word_errors("", "").rate(), 0.0);
  EXPECT_EQ(word_errors("  ", " \t ").rate(), 0.0);
  EXPECT_TRUE(std::isinf(word_errors("", "a").rate()));
  EXPECT_EQ(EditCounts{}.rate(), 0.0);
}

// A changed word is one substitution (cost 1), not a deletion and an insertion (cost 2), and the
// counts of a known alignment are exact.
TEST(ErrorRate, SubstitutionIsOneError) {
  const auto s = word_errors("the cat sat", "the dog sat");
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.substitutions, 1);
  EXPECT_EQ(s.deletions, 0);
  EXPECT_EQ(s.insertions, 0);
  EXPECT_DOUBLE_EQ(s.rate(), 1.0 / 3.0);
  const auto shifted = word_errors("a b c d", "b c d e");  // a deletion and an insertion, not 4 S
  EXPECT_EQ(shifted.errors(), 2);
  EXPECT_EQ(shifted.hits + shifted.substitutions, 3);
  const auto deleted = word_errors("a b c", "a c");
  EXPECT_EQ(deleted.deletions, 1);
  EXPECT_EQ(deleted.errors(), 1);
  const auto inserted = word_errors("a c", "a b c");
  EXPECT_EQ(inserted.insertions, 1);
  EXPECT_EQ(inserted.errors(), 1);
  EXPECT_EQ(inserted.reference_length(), 2);
  const auto all_wrong = word_errors("a", "b c d");  // more errors than reference words
  EXPECT_EQ(all_wrong.errors(), 3);
  EXPECT_DOUBLE_EQ(all_wrong.rate(), 3.0);
  // Characters: UTF-8 characters, the spaces between words included, the ends stripped.
  const auto c = character_errors(" 你好 世界 ", "你好世届");
  EXPECT_EQ(c.reference_length(), 5);
  EXPECT_EQ(c.deletions, 1);
  EXPECT_EQ(c.substitutions, 1);
  EXPECT_EQ(c.errors(), 2);
}

TEST(ErrorRate, SumsCounts) {
  EditCounts a{1, 2, 3, 4};
  a += EditCounts{10, 20, 30, 40};
  EXPECT_EQ(a.hits, 11);
  EXPECT_EQ(a.substitutions, 22);
  EXPECT_EQ(a.deletions, 33);
  EXPECT_EQ(a.insertions, 44);
  EXPECT_EQ(a.errors(), 99);
  EXPECT_EQ(a.reference_length(), 66);
  EXPECT_DOUBLE_EQ(a.rate(), 1.5);
}

TEST(ErrorRate, SplitsWordsAndCharacters) {
  EXPECT_EQ(words_of("  a  bb\tc\n"), (std::vector<std::string>{"a", "bb", "c"}));
  EXPECT_TRUE(words_of(" \t ").empty());
  EXPECT_EQ(characters_of(" a b "), (std::vector<std::string>{"a", " ", "b"}));
  EXPECT_EQ(characters_of("a  b"), (std::vector<std::string>{"a", " ", " ", "b"}));
  EXPECT_EQ(characters_of("你好🙂"), (std::vector<std::string>{"你", "好", "🙂"}));
  // A malformed or cut sequence is a character of its own; nothing is read past the end.
  EXPECT_EQ(characters_of("ab\xE4"), (std::vector<std::string>{"a", "b", "\xE4"}));
  EXPECT_EQ(characters_of("a\xF0\x9F"), (std::vector<std::string>{"a", "\xF0\x9F"}));
  EXPECT_EQ(characters_of("\x80"
                          "a"),
            (std::vector<std::string>{"\x80", "a"}));
}

}  // namespace test_error_rate
}  // namespace attnzoo::decoding
