// Beam search over a transducer (models/transducer.h), NeMo's `strategy: beam`: BeamRNNTInfer's
// and BeamTDTInfer's search_type "default", the frame-synchronous search of Graves 2012 as ESPnet
// and NeMo write it, frame by frame and resumable.
//
// RNN-T, at each frame: the hypotheses carried in are expanded best first. Expanding one scores
// the joint of the frame and its prediction output (log-softmax over the tokens and the blank);
// its blank extension is kept for the next frame, and its beam_k best token extensions go back
// among the hypotheses to expand on this frame. The frame ends once at least `beam` kept
// hypotheses score above every hypothesis still to expand, and all those carry on (possibly more
// than `beam`); duplicates are not merged.
//
// TDT, at each frame: the hypotheses whose last token's duration ends on it are expanded best
// first. The tokens and the durations are normalised separately; the beam_k best (token,
// duration) pairs out of the beam_k best tokens and the beam best durations extend the
// hypothesis, a duration 0 on this frame, any other on a later one; the blank extends it by each
// of the beam best non-zero durations (the smallest non-zero one when 0 is the only one).
// Hypotheses with the same tokens ending on the same frame are merged (their probabilities
// summed). The frame ends as RNN-T's does, or, once nothing is left to expand on it, with the
// `beam` best hypotheses carried on.
//
// beam = min(beam_size, tokens) and beam_k = min(beam, tokens − 1), the tokens without the blank.
// Scores are NeMo's: the sums of the log-probabilities, in double for RNN-T and in float for TDT
// (as NeMo adds them), ranked in the end by score / (tokens + 1) with score_norm. A frame that
// has expanded max_expansions hypotheses ends there with its `beam` best kept hypotheses: NeMo's
// loop has no such bound and, on a model that keeps emitting on one frame, runs on unbounded.
#pragma once

#include <attnzoo/models/transducer.h>

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace attnzoo {

struct TransducerBeamOptions {
  int64_t beam_size = 4;
  // Rank the final hypotheses by score / (tokens + 1) (NeMo's beam.score_norm) instead of score.
  bool score_norm = true;
  // The most hypotheses one frame expands (at least beam_size).
  int64_t max_expansions = 1000;
};

struct TransducerBeamHypothesis {
  std::vector<TransducerToken> tokens;  // log_prob: the token's in its expansion
  double score = 0.0;
};

class TransducerBeamSearch {
 public:
  // `transducer` (in eval mode) must outlive the search.
  TransducerBeamSearch(TransducerImpl& transducer, TransducerBeamOptions options);

  // encoded: [k, D] (k may be 0), the next frames of one utterance.
  void advance(const torch::Tensor& encoded);
  // The hypotheses kept after the frames so far, best first (NeMo's sort_nbest).
  std::vector<TransducerBeamHypothesis> hypotheses() const;
  // The tokens every kept hypothesis begins with: no later frame changes them.
  std::vector<int64_t> stable_tokens() const;
  int64_t frames() const { return frames_; }  // encoder frames given so far
  // The frames that max_expansions ended (where NeMo's search would have gone on).
  int64_t bounded_frames() const { return bounded_frames_; }

 private:
  // A hypothesis's tokens, shared with the hypotheses it was extended from.
  struct Tokens;
  // The prediction network after a hypothesis's last token, computed when first needed; held
  // only by the hypotheses that end with that token, so that its tensors go with them.
  struct Prediction;
  struct Hypothesis {
    double score;
    std::shared_ptr<const Tokens> tokens;  // null: none yet
    std::shared_ptr<Prediction> prediction;
    int64_t last_frame;  // TDT: the frame the hypothesis is expanded on next
  };

  void advance_rnnt(const torch::Tensor& frame, int64_t t);
  void advance_tdt(const torch::Tensor& frame, int64_t t);
  // `h` extended by `token`: its tokens and its prediction, to compute from h's.
  Hypothesis extend(Hypothesis& h, double score, const TransducerToken& token, int64_t last_frame);
  // The joint's logits for `frame` [1, joint_hidden] and h's prediction, as floats on the CPU.
  torch::Tensor logits(const torch::Tensor& frame, Hypothesis& h);
  // Takes the best hypothesis out of `hyps` (the first of equals).
  static Hypothesis pop_best(std::vector<Hypothesis>& hyps);
  // Whether `beam_` kept hypotheses score above every one in `hyps`; if so, only they stay kept,
  // ascending by score (NeMo's order).
  bool enough_kept(const std::vector<Hypothesis>& hyps);
  // Keeps the `beam_` best of kept_, best first.
  void keep_best();
  static bool same_tokens(const Tokens* a, const Tokens* b);
  static std::vector<int64_t> ids_of(const Tokens* tokens);

  TransducerImpl& transducer_;
  TransducerBeamOptions options_;
  int64_t beam_;
  int64_t beam_k_;
  std::vector<Hypothesis> kept_;
  int64_t frames_ = 0;
  int64_t bounded_frames_ = 0;
};

}  // namespace attnzoo
