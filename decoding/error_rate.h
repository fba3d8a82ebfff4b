// Word and character error rates, as jiwer (the Python package speech papers report with) defines
// them: the reference and the hypothesis are sequences of words (or characters), the hypothesis
// is aligned to the reference with the fewest substitutions S, deletions D and insertions I (the
// Levenshtein distance, unit costs), and the error rate of a corpus is sum(S + D + I) /
// sum(reference length), summed over the utterances before dividing (jiwer.wer / jiwer.cer on
// lists).
//
// Words: the text split at white space (jiwer's default transform for wer: runs of spaces are one,
// ends stripped). Characters: the UTF-8 characters of the text with its ends stripped, spaces
// between words included (jiwer's default for cer). Where they differ: jiwer splits words at
// spaces only (a single tab stays inside a word) and strips Unicode white space at the ends;
// these split at every ASCII white-space character and strip those. On text whose words are
// separated by spaces, the counts' totals and so the rates are jiwer's (tested); how the total
// splits into S, D and I may differ between equally short alignments.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnzoo::decoding {

struct EditCounts {
  int64_t hits = 0;
  int64_t substitutions = 0;
  int64_t deletions = 0;   // reference tokens the hypothesis lacks
  int64_t insertions = 0;  // hypothesis tokens the reference lacks

  int64_t errors() const { return substitutions + deletions + insertions; }
  int64_t reference_length() const { return hits + substitutions + deletions; }
  // errors / reference_length; for an empty reference, 0 without errors and +inf with some.
  double rate() const;
  EditCounts& operator+=(const EditCounts& other);
};

// A minimum-cost alignment's counts. Among alignments of equal cost the backtrace prefers a match
// or substitution, then a deletion, then an insertion (the total, and so the rate, is the same
// for all of them).
EditCounts align_tokens(const std::vector<std::string>& reference,
                        const std::vector<std::string>& hypothesis);

std::vector<std::string> words_of(std::string_view text);
std::vector<std::string> characters_of(std::string_view text);

inline EditCounts word_errors(std::string_view reference, std::string_view hypothesis) {
  return align_tokens(words_of(reference), words_of(hypothesis));
}
inline EditCounts character_errors(std::string_view reference, std::string_view hypothesis) {
  return align_tokens(characters_of(reference), characters_of(hypothesis));
}

}  // namespace attnzoo::decoding
