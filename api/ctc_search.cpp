#include <attnzoo/api/ctc_search.h>

#include <attnzoo/configs/model_family.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace attnzoo {
namespace {

double log_add(double a, double b) {
  if (a < b) std::swap(a, b);
  if (b == -std::numeric_limits<double>::infinity()) return a;
  return a + std::log1p(std::exp(b - a));
}

// `h` without the tokens `textless` (and their timings), its confidence the mean of the rest's.
decoding::CtcHypothesis without_token(decoding::CtcHypothesis h, int64_t textless) {
  if (std::find(h.tokens.begin(), h.tokens.end(), textless) == h.tokens.end()) return h;
  decoding::CtcHypothesis out;
  out.score = h.score;
  double sum = 0.0;
  for (size_t i = 0; i < h.tokens.size(); ++i) {
    if (h.tokens[i] == textless) continue;
    out.tokens.push_back(h.tokens[i]);
    out.timings.push_back(h.timings[i]);
    sum += h.timings[i].confidence;
  }
  out.confidence = out.tokens.empty() ? h.confidence : sum / static_cast<double>(out.tokens.size());
  return out;
}

}  // namespace

CtcSearchSettings ctc_search_settings(const ModelConfig& config, const decoding::Units& units) {
  CtcSearchSettings s;
  s.search = config.decoding.search;
  s.beam = config.decoding.beam;
  // Attention rescoring ranks the whole beam again (WeNet: its n-best is the beam).
  if (config.decoding.mode == decoding::DecodingMode::kAttentionRescoring) {
    s.beam.nbest = s.beam.beam_size;
  }
  s.vocab = units.size();
  s.textless_id = units.sos_eos_id();
  s.stable_margin = config.decoding.stable_margin;
  const double period = model_family(config.family).frame_ms(config) / 1000.0;
  s.beam.blank_id = s.greedy.blank_id = units.blank_id();
  s.beam.frame_period_seconds = s.greedy.frame_period_seconds = period;
  return s;
}

CtcSearcher::CtcSearcher(const CtcSearchSettings& s)
    : textless_id_(s.textless_id), stable_margin_(s.stable_margin) {
  if (s.search == decoding::CtcSearch::kGreedy) {
    greedy_ = std::make_unique<decoding::CtcGreedySearch>(s.vocab, s.greedy);
  } else {
    beam_ = std::make_unique<decoding::CtcPrefixBeamSearch>(s.vocab, s.beam);
  }
}

CtcSearcher::~CtcSearcher() = default;
CtcSearcher::CtcSearcher(CtcSearcher&&) noexcept = default;
CtcSearcher& CtcSearcher::operator=(CtcSearcher&&) noexcept = default;

void CtcSearcher::advance(const torch::Tensor& log_probs) {
  TORCH_CHECK_VALUE(log_probs.dim() == 2, "CtcSearcher: log_probs must be [k, vocab], got ",
                    log_probs.sizes());
  const auto x = log_probs.to(torch::kCPU, torch::kFloat).contiguous();
  const decoding::CtcLogProbs view{x.data_ptr<float>(), x.size(0), x.size(1)};
  if (greedy_) {
    greedy_->advance(view);
  } else {
    beam_->advance(view);
  }
}

std::vector<decoding::CtcHypothesis> CtcSearcher::hypotheses() const {
  const auto found =
      greedy_ ? std::vector<decoding::CtcHypothesis>{greedy_->hypothesis()} : beam_->hypotheses();
  if (textless_id_ < 0) return found;
  std::vector<decoding::CtcHypothesis> out;
  for (const auto& h : found) {
    auto kept = without_token(h, textless_id_);
    const auto same = std::find_if(out.begin(), out.end(), [&](const decoding::CtcHypothesis& o) {
      return o.tokens == kept.tokens;
    });
    if (same == out.end()) {
      out.push_back(std::move(kept));
    } else {
      same->score = log_add(same->score, kept.score);
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.score > b.score; });
  return out;
}

std::vector<int64_t> CtcSearcher::stable_tokens() {
  auto tokens = greedy_ ? greedy_->hypothesis().tokens : beam_->stable_tokens(stable_margin_);
  if (beam_ && stable_margin_ > 0.0 && tokens.size() > committed_.size()) {
    beam_->keep_prefix(tokens);
    committed_ = tokens;
  }
  tokens.erase(std::remove(tokens.begin(), tokens.end(), textless_id_), tokens.end());
  return tokens;
}

std::vector<decoding::CtcHypothesis> rank_by_rescoring(
    const std::vector<decoding::CtcHypothesis>& found, const DecoderScores& scores,
    const decoding::AttentionRescoringOptions& options, size_t keep) {
  std::vector<double> ctc;
  for (const auto& h : found) ctc.push_back(h.score);
  const auto rescored = decoding::rescore_nbest(ctc, scores.left, scores.right, options);
  std::vector<size_t> order(found.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return rescored.scores[a] > rescored.scores[b]; });
  std::vector<decoding::CtcHypothesis> ranked;
  for (size_t i = 0; i < std::min(keep, order.size()); ++i) {
    ranked.push_back(found[order[i]]);
    ranked.back().score = rescored.scores[order[i]];
  }
  return ranked;
}

}  // namespace attnzoo
