// The transducer search a model's `decoding:` section asks for with `head: transducer`: greedy
// (models/transducer.h's TransducerGreedySearch, NeMo's GreedyRNNTInfer and GreedyTDTInfer) over
// encoder frames given at once or block by block, its result in the shape of a CTC search's
// (decoding::CtcHypothesis), so that the recognizer reports both alike: each token's frame is
// the frame it was emitted at (a TDT token spans its duration), its confidence the token's
// probability there (an empty hypothesis's confidence is 0), the score NeMo's greedy score.
#pragma once

#include <attnzoo/configs/model_config.h>
#include <attnzoo/decoding/ctc_decoder.h>
#include <attnzoo/models/transducer.h>

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace attnzoo {

class TransducerSearcher {
 public:
  // `transducer` (in eval mode) must outlive the searcher; decoding.max_symbols and the model's
  // frame period come from `config`.
  TransducerSearcher(TransducerImpl& transducer, const ModelConfig& config);

  // encoded: [k, D] (k may be 0), the next encoder frames of one utterance.
  void advance(const torch::Tensor& encoded);
  // The one greedy hypothesis.
  std::vector<decoding::CtcHypothesis> hypotheses() const;
  // Greedy search only appends: every token so far.
  std::vector<int64_t> stable_tokens() const;

 private:
  TransducerGreedySearch search_;
  double frame_period_seconds_;
};

}  // namespace attnzoo
