// The CTC search a model's `decoding:` section asks for (greedy or prefix beam search, with its
// options, the table's blank and the model's frame period), run over log-probabilities given at
// once or block by block. What SpeechRecognizer decodes with, and CTC training's evaluation.
//
// A CTC head may emit tokens that make no text: the attention decoder's <sos/eos>, which WeNet's
// and ESPnet's heads keep as their last output. The searcher takes them out of its hypotheses
// (tokens and timings), and hypotheses left with the same tokens are one: their probabilities
// summed (the score log-added), the best alignment's times kept, ranked again by score. A
// hypothesis's confidence is the mean of its remaining tokens' (the blank's mean posterior when
// none remain).
#pragma once

#include <attnzoo/configs/model_config.h>
#include <attnzoo/decoding/attention_rescoring.h>
#include <attnzoo/decoding/ctc_decoder.h>
#include <attnzoo/decoding/units.h>
#include <attnzoo/models/attention_decoder.h>

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace attnzoo {

struct CtcSearchSettings {
  decoding::CtcSearch search = decoding::CtcSearch::kPrefixBeam;
  decoding::PrefixBeamSearchOptions beam;
  decoding::GreedyOptions greedy;
  int64_t vocab = 0;
  int64_t textless_id = -1;    // the table's <sos/eos>, or -1
  double stable_margin = 0.0;  // DecodingConfig::stable_margin
};

// The config's decoding section with the blank of `units` and the model's frame period; with
// mode attention_rescoring, beam_size hypotheses returned (the n-best the decoder ranks).
CtcSearchSettings ctc_search_settings(const ModelConfig& config, const decoding::Units& units);

class CtcSearcher {
 public:
  explicit CtcSearcher(const CtcSearchSettings& settings);
  ~CtcSearcher();
  CtcSearcher(CtcSearcher&&) noexcept;
  CtcSearcher& operator=(CtcSearcher&&) noexcept;

  // log_probs: [k, vocab] (k may be 0), any float dtype and device (read as float32 on the CPU).
  void advance(const torch::Tensor& log_probs);
  // Best first; greedy search gives one.
  std::vector<decoding::CtcHypothesis> hypotheses() const;
  // The tokens no later frame can change, without the textless token: greedy search's whole best
  // path, which only grows; or the beam's common prefix (CtcPrefixBeamSearch::stable_tokens)
  // over the hypotheses within the settings' stable_margin of the best, the others then dropped
  // from the beam (so the hypotheses after this call all begin with what it returned).
  std::vector<int64_t> stable_tokens();

 private:
  int64_t textless_id_ = -1;
  double stable_margin_ = 0.0;
  std::vector<int64_t> committed_;  // the beam's tokens stable_tokens() gave last
  std::unique_ptr<decoding::CtcGreedySearch> greedy_;
  std::unique_ptr<decoding::CtcPrefixBeamSearch> beam_;
};

// Attention rescoring of an n-best: `found` (prefix beam search's hypotheses, best first) ranked
// again by decoding::rescore_nbest with the decoders' scores of each (AttentionDecoderImpl::
// score, in the same order), each given its rescoring score; the first `keep` of them. Among
// equal scores the earlier hypothesis stays first, as WeNet picks the first maximum.
std::vector<decoding::CtcHypothesis> rank_by_rescoring(
    const std::vector<decoding::CtcHypothesis>& found, const DecoderScores& scores,
    const decoding::AttentionRescoringOptions& options, size_t keep);

}  // namespace attnzoo
