// The transducer search a model's `decoding:` section asks for with `head: transducer`: greedy
// (models/transducer.h's TransducerGreedySearch, NeMo's GreedyRNNTInfer and GreedyTDTInfer) or
// beam (models/transducer_beam_search.h, NeMo's strategy beam), over encoder frames given at once
// or block by block, its result in the shape of a CTC search's (decoding::CtcHypothesis), so that
// the recognizer reports both alike: each token's frame is the frame it was emitted at (a TDT
// token spans its duration), its confidence the token's probability there (an empty
// hypothesis's confidence is 0), the score NeMo's.
#pragma once

#include <attnzoo/configs/model_config.h>
#include <attnzoo/decoding/ctc_decoder.h>
#include <attnzoo/models/transducer.h>
#include <attnzoo/models/transducer_beam_search.h>

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace attnzoo {

class TransducerSearcher {
 public:
  // `transducer` (in eval mode) must outlive the searcher; the search and its settings
  // (decoding.transducer_search, max_symbols, beam_size, nbest, score_norm) and the model's frame
  // period come from `config`.
  TransducerSearcher(TransducerImpl& transducer, const ModelConfig& config);

  // encoded: [k, D] (k may be 0), the next encoder frames of one utterance.
  void advance(const torch::Tensor& encoded);
  // The one greedy hypothesis, or the beam's nbest best first.
  std::vector<decoding::CtcHypothesis> hypotheses() const;
  // The tokens no later frame changes: greedy search's every token so far, the beam's
  // hypotheses' common beginning.
  std::vector<int64_t> stable_tokens() const;

 private:
  decoding::CtcHypothesis hypothesis(const std::vector<TransducerToken>& tokens,
                                     double score) const;

  std::optional<TransducerGreedySearch> greedy_;
  std::optional<TransducerBeamSearch> beam_;
  int64_t nbest_;
  double frame_period_seconds_;
};

}  // namespace attnzoo
