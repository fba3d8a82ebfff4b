#include <attnzoo/decoding/attention_rescoring.h>

#include <cmath>
#include <string>

namespace attnzoo::decoding {

const char* to_string(DecodingMode mode) {
  switch (mode) {
    case DecodingMode::kCtc:
      return "ctc";
    case DecodingMode::kAttentionRescoring:
      return "attention_rescoring";
  }
  return "?";
}

RescoredNbest rescore_nbest(const std::vector<double>& ctc_scores, const std::vector<double>& left,
                            const std::vector<double>& right,
                            const AttentionRescoringOptions& options) {
  const auto fail = [](const std::string& message) {
    throw DecodingError("attention rescoring: " + message);
  };
  const double ctc_weight = options.ctc_weight, reverse_weight = options.reverse_weight;
  if (!std::isfinite(ctc_weight) || ctc_weight < 0.0) {
    fail("ctc_weight must be finite and >= 0, got " + std::to_string(ctc_weight));
  }
  if (!std::isfinite(reverse_weight) || reverse_weight < 0.0 || reverse_weight > 1.0) {
    fail("reverse_weight must be in [0, 1], got " + std::to_string(reverse_weight));
  }
  if (ctc_scores.empty()) fail("the n-best is empty");
  if (left.size() != ctc_scores.size()) {
    fail("left holds " + std::to_string(left.size()) + " scores for " +
         std::to_string(ctc_scores.size()) + " hypotheses");
  }
  if (reverse_weight > 0.0 && right.size() != ctc_scores.size()) {
    fail("reverse_weight " + std::to_string(reverse_weight) + " needs right-to-left scores, got " +
         std::to_string(right.size()) + " for " + std::to_string(ctc_scores.size()) +
         " hypotheses");
  }
  RescoredNbest out;
  out.scores.reserve(ctc_scores.size());
  for (std::size_t i = 0; i < ctc_scores.size(); ++i) {
    double attention = left[i];
    if (reverse_weight > 0.0) {
      attention = (1.0 - reverse_weight) * left[i] + reverse_weight * right[i];
    }
    const double score = attention + ctc_weight * ctc_scores[i];
    if (std::isnan(score)) fail("hypothesis " + std::to_string(i) + " scores NaN");
    out.scores.push_back(score);
    if (score > out.scores[out.best]) out.best = i;
  }
  return out;
}

}  // namespace attnzoo::decoding
