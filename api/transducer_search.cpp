#include <attnzoo/api/transducer_search.h>

#include <attnzoo/configs/model_family.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace attnzoo {

TransducerSearcher::TransducerSearcher(TransducerImpl& transducer, const ModelConfig& config)
    : nbest_(config.decoding.beam.nbest),
      frame_period_seconds_(model_family(config.family).frame_ms(config) / 1000.0) {
  const auto& d = config.decoding;
  if (d.transducer_search == decoding::TransducerSearch::kGreedy) {
    greedy_.emplace(transducer, d.max_symbols);
  } else {
    TransducerBeamOptions options;
    options.beam_size = d.beam.beam_size;
    options.score_norm = d.score_norm;
    // Room for every kept hypothesis to emit max_symbols tokens on one frame.
    options.max_expansions = d.beam.beam_size * (d.max_symbols + 1);
    beam_.emplace(transducer, options);
  }
}

void TransducerSearcher::advance(const torch::Tensor& encoded) {
  torch::InferenceMode inference;
  if (greedy_) {
    greedy_->advance(encoded);
  } else {
    beam_->advance(encoded);
  }
}

decoding::CtcHypothesis TransducerSearcher::hypothesis(const std::vector<TransducerToken>& tokens,
                                                       double score) const {
  decoding::CtcHypothesis h;
  h.score = score;
  double confidence = 0.0;
  for (const auto& token : tokens) {
    h.tokens.push_back(token.id);
    decoding::TokenTiming timing;
    timing.start_frame = token.frame;
    timing.end_frame = token.frame + std::max<int64_t>(token.duration, 1) - 1;
    timing.start_seconds = static_cast<double>(timing.start_frame) * frame_period_seconds_;
    timing.end_seconds = static_cast<double>(timing.end_frame + 1) * frame_period_seconds_;
    timing.confidence = std::exp(token.log_prob);
    confidence += timing.confidence;
    h.timings.push_back(timing);
  }
  h.confidence = h.tokens.empty() ? 0.0 : confidence / static_cast<double>(h.tokens.size());
  return h;
}

std::vector<decoding::CtcHypothesis> TransducerSearcher::hypotheses() const {
  if (greedy_) return {hypothesis(greedy_->tokens(), greedy_->score())};
  std::vector<decoding::CtcHypothesis> out;
  for (const auto& h : beam_->hypotheses()) {
    if (static_cast<int64_t>(out.size()) == nbest_) break;
    out.push_back(hypothesis(h.tokens, h.score));
  }
  return out;
}

std::vector<int64_t> TransducerSearcher::stable_tokens() const {
  if (beam_) return beam_->stable_tokens();
  std::vector<int64_t> out;
  for (const auto& token : greedy_->tokens()) out.push_back(token.id);
  return out;
}

}  // namespace attnzoo
