#include <attnzoo/api/transducer_search.h>

#include <attnzoo/configs/model_family.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace attnzoo {

TransducerSearcher::TransducerSearcher(TransducerImpl& transducer, const ModelConfig& config)
    : search_(transducer, config.decoding.max_symbols),
      frame_period_seconds_(model_family(config.family).frame_ms(config) / 1000.0) {}

void TransducerSearcher::advance(const torch::Tensor& encoded) {
  torch::InferenceMode inference;
  search_.advance(encoded);
}

std::vector<decoding::CtcHypothesis> TransducerSearcher::hypotheses() const {
  decoding::CtcHypothesis h;
  h.score = search_.score();
  double confidence = 0.0;
  for (const auto& token : search_.tokens()) {
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
  return {h};
}

std::vector<int64_t> TransducerSearcher::stable_tokens() const {
  std::vector<int64_t> out;
  for (const auto& token : search_.tokens()) out.push_back(token.id);
  return out;
}

}  // namespace attnzoo
