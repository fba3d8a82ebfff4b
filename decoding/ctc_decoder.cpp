// Greedy and prefix beam search CTC decoding (ctc_decoder.h; decoding/README.md). Sums are kept
// in double: a T = 3000 utterance adds thousands of float log-probabilities per path.
#include <attnzoo/decoding/ctc_decoder.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <unordered_map>
#include <utility>

namespace attnzoo::decoding {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double log_add(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double hi = std::max(a, b);
  return hi + std::log1p(std::exp(std::min(a, b) - hi));
}

[[noreturn]] void fail(const std::string& message) { throw DecodingError(message); }

void check_vocab(int64_t vocab, int64_t blank_id, double frame_period_seconds) {
  if (vocab < 1) fail("log_probs: vocab (V) must be at least 1, got " + std::to_string(vocab));
  if (blank_id < 0 || blank_id >= vocab) {
    fail("blank_id: expected a token id in [0, " + std::to_string(vocab) + "), got " +
         std::to_string(blank_id));
  }
  if (!(frame_period_seconds > 0.0) || !std::isfinite(frame_period_seconds)) {
    fail("frame_period_seconds: expected a positive finite number, got " +
         std::to_string(frame_period_seconds));
  }
}

// The rows of x, whose frame 0 is frame `first_frame` of the utterance (named in errors).
void check_rows(const CtcLogProbs& x, int64_t first_frame) {
  if (x.frames > std::numeric_limits<int64_t>::max() / x.vocab) {
    fail("log_probs: frames x vocab overflows (" + std::to_string(x.frames) + " x " +
         std::to_string(x.vocab) + ")");
  }
  if (x.frames > 0 && x.data == nullptr) fail("log_probs: data is null");
  for (int64_t t = 0; t < x.frames; ++t) {
    const float* row = x.data + t * x.vocab;
    for (int64_t k = 0; k < x.vocab; ++k) {
      if (std::isnan(row[k]) || row[k] == std::numeric_limits<float>::infinity()) {
        fail("log_probs: " + std::string(std::isnan(row[k]) ? "NaN" : "+inf") + " at frame " +
             std::to_string(first_frame + t) + ", token " + std::to_string(k) +
             " (expected log-probabilities: finite or -inf)");
      }
    }
  }
}

void check_input(const CtcLogProbs& x, int64_t blank_id, double frame_period_seconds) {
  if (x.frames < 1)
    fail("log_probs: frames (T) must be at least 1, got " + std::to_string(x.frames));
  check_vocab(x.vocab, blank_id, frame_period_seconds);
  check_rows(x, 0);
}

void check_beam_options(const PrefixBeamSearchOptions& o) {
  if (o.beam_size < 1) fail("beam_size: must be at least 1, got " + std::to_string(o.beam_size));
  if (o.nbest < 1 || o.nbest > o.beam_size) {
    fail("nbest: expected 1 .. beam_size (" + std::to_string(o.beam_size) + "), got " +
         std::to_string(o.nbest));
  }
  if (o.token_top_k < 0) {
    fail("token_top_k: must be 0 (all tokens) or positive, got " + std::to_string(o.token_top_k));
  }
  if (!(o.token_top_p > 0.0 && o.token_top_p <= 1.0)) {
    fail("token_top_p: expected a value in (0, 1], got " + std::to_string(o.token_top_p));
  }
  if (std::isnan(o.token_min_log_prob)) fail("token_min_log_prob: is NaN");
}

// One token of the best alignment so far: the run of frames that emits it and its peak.
struct Emission {
  int64_t start = 0;
  int64_t end = 0;
  double peak_log_prob = kNegInf;
};

// The best (Viterbi) alignment of one ending of a prefix among the alignments kept.
struct BestAlignment {
  double log_prob = kNegInf;
  std::vector<Emission> emissions;
};

struct Prefix {
  std::vector<int64_t> tokens;
  double blank = kNegInf;      // log p_b
  double non_blank = kNegInf;  // log p_nb
  BestAlignment best_blank;
  BestAlignment best_non_blank;

  double total() const { return log_add(blank, non_blank); }
  const BestAlignment& best() const {
    return best_blank.log_prob >= best_non_blank.log_prob ? best_blank : best_non_blank;
  }
};

struct TokensHash {
  size_t operator()(const std::vector<int64_t>& tokens) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids
    for (const int64_t t : tokens) {
      h ^= static_cast<uint64_t>(t);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

// Where the best alignment of a candidate's ending comes from, so that only the candidates the
// beam keeps have their alignments copied.
struct AlignmentSource {
  enum Kind { kNone, kBlank, kRepeat, kExtend, kExtendAfterBlank };
  double log_prob = kNegInf;
  Kind kind = kNone;
  size_t from = 0;           // the beam entry it extends
  double emitted = kNegInf;  // the frame's log-probability of the token emitted

  // Keeps the offer if it beats what is held (the first of equals stays: deterministic).
  void offer(double candidate, Kind k, size_t entry, double y) {
    if (candidate > log_prob) *this = {candidate, k, entry, y};
  }
};

// A prefix of the next frame before pruning: beam entry `from` itself (token -1), or `from`
// extended by `token`.
struct Candidate {
  size_t from = 0;
  int64_t token = -1;
  double blank = kNegInf;
  double non_blank = kNegInf;
  AlignmentSource best_blank;
  AlignmentSource best_non_blank;

  double total() const { return log_add(blank, non_blank); }
};

// The tokens frame `row` lets through (PrefixBeamSearchOptions), most likely first.
void frame_tokens(const float* row, int64_t vocab, const PrefixBeamSearchOptions& o,
                  std::vector<int64_t>& order, std::vector<int64_t>& kept) {
  order.resize(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), int64_t{0});
  const auto more_likely = [row](int64_t a, int64_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  };
  const int64_t k = o.token_top_k > 0 ? std::min(o.token_top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), more_likely);
  kept.clear();
  double mass = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t token = order[static_cast<size_t>(i)];
    const double log_prob = row[token];
    if (log_prob == kNegInf) break;
    // top_p 1 keeps every token: float32 probabilities may sum past 1 by rounding before the
    // last tokens are reached (a trained model's frames often do).
    const bool mass_reached = o.token_top_p < 1.0 && mass >= o.token_top_p;
    if (i > 0 && (mass_reached || log_prob < o.token_min_log_prob)) break;
    kept.push_back(token);
    mass += std::exp(log_prob);
  }
}

std::vector<TokenTiming> timings_of(const std::vector<Emission>& emissions, double period) {
  std::vector<TokenTiming> timings;
  timings.reserve(emissions.size());
  for (const auto& e : emissions) {
    TokenTiming timing;
    timing.start_frame = e.start;
    timing.end_frame = e.end;
    timing.start_seconds = static_cast<double>(e.start) * period;
    timing.end_seconds = static_cast<double>(e.end + 1) * period;
    timing.confidence = std::exp(e.peak_log_prob);
    timings.push_back(timing);
  }
  return timings;
}

// The mean peak posterior of the tokens; for no token, `blank_mean` (the mean posterior of the
// blank over the frames).
double confidence_of(const std::vector<TokenTiming>& timings, double blank_mean) {
  if (timings.empty()) return blank_mean;
  double sum = 0.0;
  for (const auto& timing : timings) sum += timing.confidence;
  return sum / static_cast<double>(timings.size());
}

// Orders candidates by score, then by their tokens (lexicographically), so that equal scores
// give the same beam on every run.
class CandidateOrder {
 public:
  CandidateOrder(const std::vector<Prefix>& beam, const std::vector<Candidate>& candidates)
      : beam_(beam), candidates_(candidates) {}

  bool tokens_less(size_t a, size_t b) const {
    const auto& ca = candidates_[a];
    const auto& cb = candidates_[b];
    const auto& ta = beam_[ca.from].tokens;
    const auto& tb = beam_[cb.from].tokens;
    const size_t na = ta.size() + (ca.token >= 0), nb = tb.size() + (cb.token >= 0);
    for (size_t i = 0; i < std::min(na, nb); ++i) {
      const int64_t x = i < ta.size() ? ta[i] : ca.token;
      const int64_t y = i < tb.size() ? tb[i] : cb.token;
      if (x != y) return x < y;
    }
    return na < nb;
  }

  bool ranks_before(double score_a, size_t a, double score_b, size_t b) const {
    if (score_a != score_b) return score_a > score_b;
    return tokens_less(a, b);
  }

 private:
  const std::vector<Prefix>& beam_;
  const std::vector<Candidate>& candidates_;
};

// Which candidates, and which of their endings, the beam keeps (PrefixBeamSearchOptions::
// beam_unit). Endings not kept are cleared.
std::vector<size_t> prune(const std::vector<Prefix>& beam, std::vector<Candidate>& candidates,
                          const PrefixBeamSearchOptions& o) {
  const auto size = static_cast<size_t>(o.beam_size);
  const CandidateOrder order(beam, candidates);
  std::vector<size_t> kept;
  if (o.beam_unit == BeamUnit::kPrefix) {
    std::vector<double> totals(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) {
      totals[i] = candidates[i].total();
      if (totals[i] != kNegInf) kept.push_back(i);
    }
    if (kept.size() > size) {
      std::nth_element(
          kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(size), kept.end(),
          [&](size_t a, size_t b) { return order.ranks_before(totals[a], a, totals[b], b); });
      kept.resize(size);
    }
    return kept;
  }
  // kPrefixEnding: each ending is a state of its own; a prefix survives with the states kept.
  struct State {
    size_t candidate;
    bool blank;
    double log_prob;
  };
  std::vector<State> states;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].blank != kNegInf) states.push_back({i, true, candidates[i].blank});
    if (candidates[i].non_blank != kNegInf) states.push_back({i, false, candidates[i].non_blank});
  }
  if (states.size() > size) {
    std::nth_element(states.begin(), states.begin() + static_cast<std::ptrdiff_t>(size),
                     states.end(), [&](const State& a, const State& b) {
                       if (a.log_prob != b.log_prob) return a.log_prob > b.log_prob;
                       if (a.candidate != b.candidate) {
                         return order.tokens_less(a.candidate, b.candidate);
                       }
                       return a.blank && !b.blank;
                     });
    states.resize(size);
  }
  std::vector<char> keep_blank(candidates.size(), 0), keep_non_blank(candidates.size(), 0);
  for (const auto& state : states) (state.blank ? keep_blank : keep_non_blank)[state.candidate] = 1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!keep_blank[i] && !keep_non_blank[i]) continue;
    if (!keep_blank[i]) {
      candidates[i].blank = kNegInf;
      candidates[i].best_blank = {};
    }
    if (!keep_non_blank[i]) {
      candidates[i].non_blank = kNegInf;
      candidates[i].best_non_blank = {};
    }
    kept.push_back(i);
  }
  return kept;
}

// The best alignment `source` describes, at frame t, from the beam of frame t - 1.
BestAlignment alignment_of(const AlignmentSource& source, const std::vector<Prefix>& beam,
                           int64_t t) {
  BestAlignment out;
  out.log_prob = source.log_prob;
  if (source.kind == AlignmentSource::kNone) return out;
  const Prefix& from = beam[source.from];
  switch (source.kind) {
    case AlignmentSource::kBlank:
      out.emissions = from.best().emissions;
      break;
    case AlignmentSource::kRepeat:
      out.emissions = from.best_non_blank.emissions;
      out.emissions.back().end = t;
      out.emissions.back().peak_log_prob =
          std::max(out.emissions.back().peak_log_prob, source.emitted);
      break;
    case AlignmentSource::kExtend:
    case AlignmentSource::kExtendAfterBlank:
      out.emissions = source.kind == AlignmentSource::kExtend ? from.best().emissions
                                                              : from.best_blank.emissions;
      out.emissions.push_back({t, t, source.emitted});
      break;
    case AlignmentSource::kNone:
      break;
  }
  return out;
}

}  // namespace

const char* to_string(CtcSearch search) {
  return search == CtcSearch::kGreedy ? "greedy" : "prefix_beam";
}

const char* to_string(BeamUnit unit) {
  return unit == BeamUnit::kPrefix ? "prefix" : "prefix_ending";
}

struct CtcGreedySearch::State {
  GreedyOptions o;
  int64_t vocab = 0;
  int64_t frames = 0;
  int64_t previous = -1;  // the best token of the last frame
  double score = 0.0;
  double blank_sum = 0.0;
  std::vector<int64_t> tokens;
  std::vector<Emission> emissions;

  void start() {
    frames = 0;
    previous = -1;
    score = blank_sum = 0.0;
    tokens.clear();
    emissions.clear();
  }
};

CtcGreedySearch::CtcGreedySearch(int64_t vocab, GreedyOptions options)
    : state_(std::make_unique<State>()) {
  check_vocab(vocab, options.blank_id, options.frame_period_seconds);
  state_->o = options;
  state_->vocab = vocab;
}

CtcGreedySearch::~CtcGreedySearch() = default;
CtcGreedySearch::CtcGreedySearch(CtcGreedySearch&&) noexcept = default;
CtcGreedySearch& CtcGreedySearch::operator=(CtcGreedySearch&&) noexcept = default;

void CtcGreedySearch::advance(const CtcLogProbs& x) {
  State& s = *state_;
  if (x.frames < 0) {
    fail("log_probs: frames (T) must not be negative, got " + std::to_string(x.frames));
  }
  if (x.vocab != s.vocab) {
    fail("log_probs: vocab (V) " + std::to_string(x.vocab) + " differs from the decoder's " +
         std::to_string(s.vocab));
  }
  check_rows(x, s.frames);
  for (int64_t i = 0; i < x.frames; ++i) {
    const int64_t t = s.frames + i;
    const float* row = x.data + i * x.vocab;
    const int64_t best = std::max_element(row, row + x.vocab) - row;  // first of equals
    s.score += row[best];
    s.blank_sum += std::exp(double{row[s.o.blank_id]});
    if (best != s.o.blank_id) {
      if (best == s.previous) {
        s.emissions.back().end = t;
        s.emissions.back().peak_log_prob =
            std::max(s.emissions.back().peak_log_prob, double{row[best]});
      } else {
        s.emissions.push_back({t, t, row[best]});
        s.tokens.push_back(best);
      }
    }
    s.previous = best;
  }
  s.frames += x.frames;
}

CtcHypothesis CtcGreedySearch::hypothesis() const {
  const State& s = *state_;
  CtcHypothesis h;
  h.tokens = s.tokens;
  h.score = s.score;
  h.timings = timings_of(s.emissions, s.o.frame_period_seconds);
  const double blank_mean = s.frames > 0 ? s.blank_sum / static_cast<double>(s.frames) : 1.0;
  h.confidence = confidence_of(h.timings, blank_mean);
  return h;
}

int64_t CtcGreedySearch::frames() const { return state_->frames; }

void CtcGreedySearch::reset() { state_->start(); }

CtcHypothesis ctc_greedy_decode(const CtcLogProbs& x, const GreedyOptions& options) {
  check_input(x, options.blank_id, options.frame_period_seconds);
  CtcGreedySearch search(x.vocab, options);
  search.advance(x);
  return search.hypothesis();
}

struct CtcPrefixBeamSearch::State {
  PrefixBeamSearchOptions o;
  int64_t vocab = 0;
  int64_t frames = 0;        // frames advanced over
  double blank_sum = 0.0;    // sum over them of y_t(blank), for the empty hypothesis's confidence
  std::vector<Prefix> beam;  // empty once a frame left no alignment
  // Scratch, kept between frames.
  std::vector<int64_t> order, kept_tokens;
  std::vector<Candidate> candidates;
  std::vector<Prefix> next;
  // child_in_beam[k] while entry i is extended: the beam entry holding i's prefix + k, or -1.
  std::vector<int64_t> child_in_beam;
  std::vector<std::vector<std::pair<int64_t, size_t>>> children;
  std::unordered_map<std::vector<int64_t>, size_t, TokensHash> index;

  void start() {
    frames = 0;
    blank_sum = 0.0;
    beam.assign(1, Prefix{});
    beam[0].blank = 0.0;  // the empty prefix, before any frame: probability 1
    beam[0].best_blank.log_prob = 0.0;
  }

  // One frame, number t of the utterance.
  void step(const float* row, int64_t t) {
    frame_tokens(row, vocab, o, order, kept_tokens);
    // A prefix of the beam may also be another's extension ("ab" and "a" + b): find those pairs.
    index.clear();
    for (size_t j = 0; j < beam.size(); ++j) index.emplace(beam[j].tokens, j);
    children.assign(beam.size(), {});
    for (size_t j = 0; j < beam.size(); ++j) {
      if (beam[j].tokens.empty()) continue;
      std::vector<int64_t> parent(beam[j].tokens.begin(), beam[j].tokens.end() - 1);
      const auto it = index.find(parent);
      if (it != index.end()) children[it->second].emplace_back(beam[j].tokens.back(), j);
    }
    // candidates[j] for j < beam.size() is beam[j]'s prefix; extensions not in the beam follow.
    candidates.assign(beam.size(), Candidate{});
    for (size_t j = 0; j < beam.size(); ++j) candidates[j].from = j;
    for (size_t i = 0; i < beam.size(); ++i) {
      const Prefix& p = beam[i];
      const double total = p.total();
      const double best_any = p.best().log_prob;
      const int64_t last = p.tokens.empty() ? -1 : p.tokens.back();
      for (const auto& [token, j] : children[i]) child_in_beam[static_cast<size_t>(token)] = j;
      for (const int64_t k : kept_tokens) {
        const double y = row[k];
        if (k == o.blank_id) {
          Candidate& same = candidates[i];
          same.blank = log_add(same.blank, total + y);
          same.best_blank.offer(best_any + y, AlignmentSource::kBlank, i, y);
          continue;
        }
        if (k == last) {
          Candidate& same = candidates[i];
          same.non_blank = log_add(same.non_blank, p.non_blank + y);
          same.best_non_blank.offer(p.best_non_blank.log_prob + y, AlignmentSource::kRepeat, i, y);
        }
        // l + k: from the blank ending only when k repeats the last label.
        const double from = k == last ? p.blank : total;
        if (from == kNegInf) continue;
        const double best_from = k == last ? p.best_blank.log_prob : best_any;
        const auto kind = k == last ? AlignmentSource::kExtendAfterBlank : AlignmentSource::kExtend;
        const int64_t in_beam = child_in_beam[static_cast<size_t>(k)];
        if (in_beam < 0) {
          candidates.emplace_back();
          candidates.back().from = i;
          candidates.back().token = k;
        }
        Candidate& child =
            in_beam >= 0 ? candidates[static_cast<size_t>(in_beam)] : candidates.back();
        child.non_blank = log_add(child.non_blank, from + y);
        child.best_non_blank.offer(best_from + y, kind, i, y);
      }
      for (const auto& [token, j] : children[i]) child_in_beam[static_cast<size_t>(token)] = -1;
    }
    const auto kept = prune(beam, candidates, o);
    next.clear();
    next.reserve(kept.size());
    for (const size_t c : kept) {
      const Candidate& candidate = candidates[c];
      Prefix p;
      p.tokens = beam[candidate.from].tokens;
      if (candidate.token >= 0) p.tokens.push_back(candidate.token);
      p.blank = candidate.blank;
      p.non_blank = candidate.non_blank;
      p.best_blank = alignment_of(candidate.best_blank, beam, t);
      p.best_non_blank = alignment_of(candidate.best_non_blank, beam, t);
      next.push_back(std::move(p));
    }
    beam.swap(next);
  }
};

CtcPrefixBeamSearch::CtcPrefixBeamSearch(int64_t vocab, PrefixBeamSearchOptions options)
    : state_(std::make_unique<State>()) {
  check_vocab(vocab, options.blank_id, options.frame_period_seconds);
  check_beam_options(options);
  state_->o = options;
  state_->vocab = vocab;
  state_->child_in_beam.assign(static_cast<size_t>(vocab), -1);
  state_->start();
}

CtcPrefixBeamSearch::~CtcPrefixBeamSearch() = default;
CtcPrefixBeamSearch::CtcPrefixBeamSearch(CtcPrefixBeamSearch&&) noexcept = default;
CtcPrefixBeamSearch& CtcPrefixBeamSearch::operator=(CtcPrefixBeamSearch&&) noexcept = default;

void CtcPrefixBeamSearch::advance(const CtcLogProbs& log_probs) {
  State& s = *state_;
  if (log_probs.frames < 0) {
    fail("log_probs: frames (T) must not be negative, got " + std::to_string(log_probs.frames));
  }
  if (log_probs.vocab != s.vocab) {
    fail("log_probs: vocab (V) " + std::to_string(log_probs.vocab) +
         " differs from the decoder's " + std::to_string(s.vocab));
  }
  check_rows(log_probs, s.frames);
  for (int64_t t = 0; t < log_probs.frames; ++t) {
    const float* row = log_probs.data + t * log_probs.vocab;
    s.blank_sum += std::exp(double{row[s.o.blank_id]});
    // Once a frame has left no alignment, none survives later frames either.
    if (!s.beam.empty()) s.step(row, s.frames);
    ++s.frames;
  }
}

std::vector<CtcHypothesis> CtcPrefixBeamSearch::hypotheses() const {
  const State& s = *state_;
  const auto& beam = s.beam;
  std::vector<size_t> order_final(beam.size());
  std::iota(order_final.begin(), order_final.end(), size_t{0});
  std::vector<double> totals(beam.size());
  for (size_t i = 0; i < beam.size(); ++i) totals[i] = beam[i].total();
  std::sort(order_final.begin(), order_final.end(), [&](size_t a, size_t b) {
    if (totals[a] != totals[b]) return totals[a] > totals[b];
    return beam[a].tokens < beam[b].tokens;
  });
  const double blank_mean = s.frames > 0 ? s.blank_sum / static_cast<double>(s.frames) : 1.0;
  std::vector<CtcHypothesis> hypotheses;
  for (size_t r = 0; r < order_final.size() && r < static_cast<size_t>(s.o.nbest); ++r) {
    const Prefix& p = beam[order_final[r]];
    CtcHypothesis h;
    h.tokens = p.tokens;
    h.score = totals[order_final[r]];
    h.timings = timings_of(p.best().emissions, s.o.frame_period_seconds);
    h.confidence = confidence_of(h.timings, blank_mean);
    hypotheses.push_back(std::move(h));
  }
  return hypotheses;
}

std::vector<int64_t> CtcPrefixBeamSearch::stable_tokens(double margin) const {
  const auto& beam = state_->beam;
  if (beam.empty()) return {};
  double best = kNegInf;
  for (const auto& prefix : beam) best = std::max(best, prefix.total());
  const Prefix* first = nullptr;
  size_t common = 0;
  for (const auto& prefix : beam) {
    if (margin > 0.0 && prefix.total() < best - margin) continue;
    if (!first) {
      first = &prefix;
      common = prefix.tokens.size();
      continue;
    }
    common = std::min(common, prefix.tokens.size());
    common = static_cast<size_t>(
        std::mismatch(first->tokens.begin(),
                      first->tokens.begin() + static_cast<std::ptrdiff_t>(common),
                      prefix.tokens.begin())
            .first -
        first->tokens.begin());
  }
  return {first->tokens.begin(), first->tokens.begin() + static_cast<std::ptrdiff_t>(common)};
}

void CtcPrefixBeamSearch::keep_prefix(const std::vector<int64_t>& prefix) {
  auto& beam = state_->beam;
  const auto begins_with_it = [&](const Prefix& p) {
    return p.tokens.size() >= prefix.size() &&
           std::equal(prefix.begin(), prefix.end(), p.tokens.begin());
  };
  if (std::none_of(beam.begin(), beam.end(), begins_with_it)) {
    fail("keep_prefix: no prefix of the beam begins with the " + std::to_string(prefix.size()) +
         " tokens given");
  }
  beam.erase(
      std::remove_if(beam.begin(), beam.end(), [&](const Prefix& p) { return !begins_with_it(p); }),
      beam.end());
}

int64_t CtcPrefixBeamSearch::frames() const { return state_->frames; }

void CtcPrefixBeamSearch::reset() { state_->start(); }

std::vector<CtcHypothesis> ctc_prefix_beam_search(const CtcLogProbs& x,
                                                  const PrefixBeamSearchOptions& o) {
  if (x.frames < 1)
    fail("log_probs: frames (T) must be at least 1, got " + std::to_string(x.frames));
  CtcPrefixBeamSearch search(x.vocab, o);
  search.advance(x);
  return search.hypotheses();
}

}  // namespace attnzoo::decoding
