// CTC decoding of per-frame log-probabilities (Graves et al., "Connectionist Temporal
// Classification", ICML 2006): greedy (best path) and prefix beam search, on a plain row-major
// float array [T, V] so that this core stays torch-free (decoding/README.md has the formulas).
//
// Notation: y_t(k) = exp(log_probs[t * V + k]); an alignment a = (a_1..a_T) collapses to a label
// sequence B(a) by merging repeats and then dropping the blank. P(l) = sum over a with B(a) = l
// of prod_t y_t(a_t).
//
// Greedy: a_t = argmax_k y_t(k) (the lowest id among ties), l = B(a); its score is the best path's
// log-probability sum_t log y_t(a_t), not log P(l).
//
// Prefix beam search: per prefix l, log p_b(l) and log p_nb(l), the probability summed (log-add)
// over the alignments of the frames so far that collapse to l and end in a blank / in l's last
// label. Per frame t, for each kept prefix and each token k the frame allows:
//   k = blank:             p_b'(l)    += (p_b(l) + p_nb(l)) y_t(blank)
//   k = last(l):           p_nb'(l)   += p_nb(l) y_t(k)           (the repeat collapses)
//                          p_nb'(l+k) += p_b(l) y_t(k)            (a blank separates: "aa")
//   otherwise:             p_nb'(l+k) += (p_b(l) + p_nb(l)) y_t(k)
// then the beam keeps beam_size prefixes by p_b + p_nb (BeamUnit::kPrefix: WeNet's runtime,
// Hannun et al.'s formulation), or beam_size (prefix, ending) states by their
// own probability (BeamUnit::kPrefixEnding: flashlight-text's LexiconFreeDecoder with log-add,
// which torchaudio's ctc_decoder wraps, and pyctcdecode). With no pruning both are exact:
// score = log P(l).
//
// Timestamps and confidence come from the best alignment of each hypothesis among those the beam
// kept (a Viterbi maximum tracked beside the sums, as WeNet's runtime does): a token's start_frame
// is the first frame of that alignment that emits it, end_frame the last frame of the same run
// (before a blank or another label); seconds are start_frame * frame_period_seconds and
// (end_frame + 1) * frame_period_seconds. A token's confidence is its peak posterior
// max over [start_frame, end_frame] of y_t(token); a hypothesis's confidence is the mean of its
// tokens' confidences, and for an empty hypothesis the mean of y_t(blank) over all frames.
#pragma once

#include <attnzoo/decoding/error.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

namespace attnzoo::decoding {

// A [frames, vocab] row-major view of CTC log-probabilities (log_softmax over the vocabulary,
// blank included); not owned. Entries may be -inf (probability 0), never NaN or +inf.
struct CtcLogProbs {
  const float* data = nullptr;
  int64_t frames = 0;  // T
  int64_t vocab = 0;   // V
};

// One token of a hypothesis, where its best alignment put it.
struct TokenTiming {
  int64_t start_frame = 0;
  int64_t end_frame = 0;  // inclusive
  double start_seconds = 0.0;
  double end_seconds = 0.0;
  double confidence = 0.0;  // peak posterior over [start_frame, end_frame]
};

struct CtcHypothesis {
  std::vector<int64_t> tokens;
  double score = 0.0;  // log P(tokens) over the kept alignments (greedy: the best path's)
  std::vector<TokenTiming> timings;  // one per token
  double confidence = 0.0;
};

struct GreedyOptions {
  int64_t blank_id = 0;
  double frame_period_seconds = 0.04;  // the encoder's output frame period (e.g. 10 ms x 4)
};

// Which search turns a CTC head's outputs into hypotheses: "greedy" (ctc_greedy_decode,
// CtcGreedySearch) or "prefix_beam" (ctc_prefix_beam_search, CtcPrefixBeamSearch).
enum class CtcSearch { kGreedy, kPrefixBeam };
const char* to_string(CtcSearch search);

enum class BeamUnit {
  kPrefix,        // beam_size prefixes, ranked by p_b + p_nb
  kPrefixEnding,  // beam_size (prefix, blank or label ending) states, ranked each on its own
};
const char* to_string(BeamUnit unit);  // "prefix" | "prefix_ending"

struct PrefixBeamSearchOptions {
  int64_t beam_size = 10;
  int64_t blank_id = 0;
  int64_t nbest = 1;  // hypotheses returned, best first; at most beam_size
  // Per-frame pruning of the tokens considered (blank included: a token pruned at frame t is
  // emitted by no alignment at t). A token is kept when it is among the token_top_k most likely
  // (0: all), inside the smallest most-likely set whose probabilities sum to at least
  // token_top_p, and at least token_min_log_prob; the frame's most likely token always is.
  int64_t token_top_k = 0;
  double token_top_p = 1.0;
  double token_min_log_prob = -std::numeric_limits<double>::infinity();
  BeamUnit beam_unit = BeamUnit::kPrefix;
  double frame_period_seconds = 0.04;
};

// Throws DecodingError naming the argument: frames or vocab 0 or negative, a null data pointer,
// NaN or +inf at (t, k), blank_id outside [0, vocab), frame_period_seconds not positive or not
// finite.
CtcHypothesis ctc_greedy_decode(const CtcLogProbs& log_probs, const GreedyOptions& options = {});

// The best path over frames that arrive in blocks: after each advance(), hypothesis() equals
// ctc_greedy_decode of all the frames so far (the same tokens, score, timings and confidence).
// Its tokens only grow as frames arrive. Used by one thread at a time.
class CtcGreedySearch {
 public:
  // Throws DecodingError for vocab < 1 and for the options as ctc_greedy_decode does.
  explicit CtcGreedySearch(int64_t vocab, GreedyOptions options = {});
  ~CtcGreedySearch();
  CtcGreedySearch(CtcGreedySearch&&) noexcept;
  CtcGreedySearch& operator=(CtcGreedySearch&&) noexcept;

  // log_probs: [T, V] (T may be 0). DecodingError for another V, or NaN or +inf at a frame
  // (named by its number in the utterance); the search is then as before.
  void advance(const CtcLogProbs& log_probs);
  // Before any frame: no tokens, score 0, confidence 1.
  CtcHypothesis hypothesis() const;
  int64_t frames() const;
  void reset();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Up to nbest hypotheses, best (highest score) first; fewer when fewer distinct prefixes survive.
// Throws DecodingError for the input as ctc_greedy_decode does, and for beam_size < 1, nbest < 1
// or > beam_size, token_top_k < 0, token_top_p outside (0, 1], token_min_log_prob NaN.
std::vector<CtcHypothesis> ctc_prefix_beam_search(const CtcLogProbs& log_probs,
                                                  const PrefixBeamSearchOptions& options = {});

// The same search over frames that arrive in blocks (live audio): advance() takes the next
// frames, hypotheses() gives the n-best of all the frames so far. However the frames are split
// into blocks, hypotheses() equals ctc_prefix_beam_search of them all at once (the same tokens,
// scores, timings and confidences, frames counted from the first). Before any frame it gives
// the empty hypothesis with score 0. A search is used by one thread at a time.
class CtcPrefixBeamSearch {
 public:
  // Throws DecodingError for the options as ctc_prefix_beam_search does, and for vocab < 1.
  explicit CtcPrefixBeamSearch(int64_t vocab, PrefixBeamSearchOptions options = {});
  ~CtcPrefixBeamSearch();
  CtcPrefixBeamSearch(CtcPrefixBeamSearch&&) noexcept;
  CtcPrefixBeamSearch& operator=(CtcPrefixBeamSearch&&) noexcept;

  // log_probs: [T, V] with V the decoder's vocab; T may be 0. DecodingError for another V, or
  // NaN or +inf at a frame (named by its number in the utterance); the search is then as before.
  void advance(const CtcLogProbs& log_probs);
  std::vector<CtcHypothesis> hypotheses() const;
  // The tokens every prefix in the beam begins with (their longest common prefix). Every prefix
  // of the next frame's beam extends one of this frame's, so these tokens only grow as frames
  // arrive, and every later hypothesis begins with them: the part of a live result that no later
  // audio can change. Empty before any frame and once a frame left no alignment.
  // margin > 0: only the prefixes whose probability is within a factor e^margin of the best's
  // count, so that improbable alternatives kept in the beam's spare places do not hold the
  // common part back; those may disagree with it, and a caller that shows these tokens as final
  // drops them with keep_prefix(tokens), after which the guarantee above holds again.
  std::vector<int64_t> stable_tokens(double margin = 0.0) const;
  // Drops the prefixes of the beam that do not begin with `prefix` (hypotheses that would
  // contradict text already shown). DecodingError, the beam unchanged, when none begins with it.
  void keep_prefix(const std::vector<int64_t>& prefix);
  int64_t frames() const;  // frames advanced over
  void reset();            // back to before the first frame, for the next utterance

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace attnzoo::decoding
