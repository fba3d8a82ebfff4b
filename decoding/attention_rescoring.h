// Attention rescoring (WeNet's U2 and U2++ decoding, Zhang et al. 2021, arXiv 2012.05481): the
// n-best of CTC prefix beam search ranked again with an attention decoder's log-probabilities
// of each whole hypothesis. For hypothesis i, with left_i and right_i the left-to-right and
// right-to-left decoders' Σ log p over its tokens and the closing <eos>
// (models/attention_decoder.h), and ctc_i its prefix beam search score log P(tokens):
//
//   score_i = (1 − reverse_weight)·left_i + reverse_weight·right_i + ctc_weight·ctc_i
//
// (right_i is not needed when reverse_weight is 0). The best is the first maximum, as WeNet's
// runtime and its Python decoding pick it; no length normalisation.
#pragma once

#include <attnzoo/decoding/error.h>

#include <cstddef>
#include <vector>

namespace attnzoo::decoding {

// What a recognizer does with the CTC head's outputs: "ctc" (the CTC search's result) or
// "attention_rescoring" (prefix beam search's n-best ranked again with the attention decoder).
enum class DecodingMode { kCtc, kAttentionRescoring };
const char* to_string(DecodingMode mode);

struct AttentionRescoringOptions {
  double ctc_weight = 0.5;      // WeNet's runtime default
  double reverse_weight = 0.0;  // > 0 needs a right-to-left decoder (U2++)
};

struct RescoredNbest {
  std::vector<double> scores;  // score_i, in the n-best's order
  std::size_t best = 0;        // the index of the first maximum
};

// Throws DecodingError naming the argument: sizes that differ from ctc_scores', right empty with
// reverse_weight > 0, an empty n-best, a weight outside its range (ctc_weight >= 0, reverse_weight
// in [0, 1]) or not finite, a NaN score.
RescoredNbest rescore_nbest(const std::vector<double>& ctc_scores, const std::vector<double>& left,
                            const std::vector<double>& right,
                            const AttentionRescoringOptions& options);

}  // namespace attnzoo::decoding
