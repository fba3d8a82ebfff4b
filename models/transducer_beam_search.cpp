#include <attnzoo/models/transducer_beam_search.h>

#include <attnzoo/layers/attention_mask.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnzoo {

struct TransducerBeamSearch::Tokens {
  Tokens(std::shared_ptr<const Tokens> parent_, const TransducerToken& token_)
      : parent(std::move(parent_)),
        token(token_),
        length(parent ? parent->length + 1 : 1),
        hash((parent ? parent->hash : 0x9e3779b97f4a7c15ULL) * 0x100000001b3ULL ^
             static_cast<uint64_t>(token_.id)) {}
  // Unlinked one by one: a long hypothesis is a long chain, which recursive destruction would
  // walk on the stack.
  ~Tokens() {
    auto next = std::move(parent);
    while (next && next.use_count() == 1) {
      auto after = std::const_pointer_cast<Tokens>(next)->parent;
      std::const_pointer_cast<Tokens>(next)->parent.reset();
      next = std::move(after);
    }
  }

  std::shared_ptr<const Tokens> parent;
  TransducerToken token;
  size_t length;
  uint64_t hash;  // of the ids
};

struct TransducerBeamSearch::Prediction {
  int64_t id;                    // the last token (the blank: the start)
  TransducerImpl::State before;  // the state it is fed with; released once computed
  torch::Tensor g;               // the projected output [1, joint_hidden]; undefined until then
  TransducerImpl::State after;   // the state after it
};

bool TransducerBeamSearch::same_tokens(const Tokens* x, const Tokens* y) {
  while (x != y) {
    if (!x || !y || x->length != y->length || x->hash != y->hash || x->token.id != y->token.id) {
      return false;
    }
    x = x->parent.get();
    y = y->parent.get();
  }
  return true;
}

std::vector<int64_t> TransducerBeamSearch::ids_of(const Tokens* tokens) {
  std::vector<int64_t> ids(tokens ? tokens->length : 0);
  for (auto* n = tokens; n; n = n->parent.get()) ids[n->length - 1] = n->token.id;
  return ids;
}

TransducerBeamSearch::TransducerBeamSearch(TransducerImpl& transducer,
                                           TransducerBeamOptions options)
    : transducer_(transducer), options_(options) {
  TORCH_CHECK_VALUE(options.beam_size > 0, "TransducerBeamSearch: beam_size must be > 0, got ",
                    options.beam_size);
  TORCH_CHECK_VALUE(options.max_expansions >= options.beam_size,
                    "TransducerBeamSearch: max_expansions must be >= beam_size ", options.beam_size,
                    ", got ", options.max_expansions);
  const int64_t tokens = transducer.options.vocab_size() - 1;  // without the blank
  beam_ = std::min(options.beam_size, tokens);
  beam_k_ = std::min(beam_, tokens - 1);
  TORCH_CHECK_VALUE(beam_k_ > 0,
                    "TransducerBeamSearch: a beam needs at least two tokens besides the blank");
  auto start = std::make_shared<Prediction>();
  start->id = transducer.blank_id();
  kept_.push_back({0.0, nullptr, std::move(start), 0});
}

TransducerBeamSearch::Hypothesis TransducerBeamSearch::extend(Hypothesis& h, double score,
                                                              const TransducerToken& token,
                                                              int64_t last_frame) {
  auto prediction = std::make_shared<Prediction>();
  prediction->id = token.id;
  prediction->before = h.prediction->after;
  return {score, std::make_shared<const Tokens>(h.tokens, token), std::move(prediction),
          last_frame};
}

torch::Tensor TransducerBeamSearch::logits(const torch::Tensor& frame, Hypothesis& h) {
  auto& p = *h.prediction;
  if (!p.g.defined()) {
    const auto device = transducer_.out->weight.device();
    torch::Tensor g;
    std::tie(g, p.after) = transducer_.predict(
        torch::full({1}, p.id, torch::dtype(torch::kLong).device(device)), p.before);
    p.g = transducer_.project_prediction(g);
    p.before = {};
  }
  return transducer_.joint(frame, p.g)[0].to(torch::kCPU, torch::kFloat);
}

TransducerBeamSearch::Hypothesis TransducerBeamSearch::pop_best(std::vector<Hypothesis>& hyps) {
  const auto best =
      std::max_element(hyps.begin(), hyps.end(),
                       [](const Hypothesis& a, const Hypothesis& b) { return a.score < b.score; });
  // max_element returns the first of equals, as Python's max().
  auto h = std::move(*best);
  hyps.erase(best);
  return h;
}

bool TransducerBeamSearch::enough_kept(const std::vector<Hypothesis>& hyps) {
  double hyps_max = -std::numeric_limits<double>::infinity();
  for (const auto& h : hyps) hyps_max = std::max(hyps_max, h.score);
  std::vector<Hypothesis> above;
  for (const auto& h : kept_) {
    if (h.score > hyps_max) above.push_back(h);
  }
  if (static_cast<int64_t>(above.size()) < beam_) return false;
  std::stable_sort(above.begin(), above.end(),
                   [](const Hypothesis& a, const Hypothesis& b) { return a.score < b.score; });
  kept_ = std::move(above);
  return true;
}

void TransducerBeamSearch::keep_best() {
  std::stable_sort(kept_.begin(), kept_.end(),
                   [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
  if (static_cast<int64_t>(kept_.size()) > beam_) kept_.resize(static_cast<size_t>(beam_));
}

void TransducerBeamSearch::advance(const torch::Tensor& encoded) {
  TORCH_CHECK_VALUE(encoded.dim() == 2 && encoded.size(1) == transducer_.options.encoder_dim(),
                    "TransducerBeamSearch: encoded must be [k, D = ",
                    transducer_.options.encoder_dim(), "], got ", shape_string(encoded.sizes()));
  torch::NoGradGuard no_grad;
  const auto projected = transducer_.project_encoder(encoded.to(transducer_.out->weight.options()));
  for (int64_t t = 0; t < encoded.size(0); ++t) {
    const auto frame = projected[t].unsqueeze(0);
    if (transducer_.options.durations().empty()) {
      advance_rnnt(frame, frames_ + t);
    } else {
      advance_tdt(frame, frames_ + t);
    }
  }
  frames_ += encoded.size(0);
}

void TransducerBeamSearch::advance_rnnt(const torch::Tensor& frame, int64_t t) {
  const int64_t blank = transducer_.blank_id();
  auto hyps = std::move(kept_);
  kept_.clear();
  for (int64_t expanded = 0;; ++expanded) {
    if (expanded == options_.max_expansions) {
      ++bounded_frames_;
      keep_best();
      return;
    }
    auto best = pop_best(hyps);
    const auto log_probs = logits(frame, best).log_softmax(0);
    // The tokens without the blank, which is last.
    const auto top = log_probs.slice(0, 0, blank).topk(beam_k_);
    const auto* values = std::get<0>(top).data_ptr<float>();
    const auto* ids = std::get<1>(top).data_ptr<int64_t>();
    for (int64_t i = 0; i < beam_k_; ++i) {
      const double value = values[i];
      hyps.push_back(extend(best, best.score + value, {ids[i], t, value, 0}, 0));
    }
    best.score += static_cast<double>(log_probs[blank].item<float>());
    kept_.push_back(std::move(best));
    if (enough_kept(hyps)) return;
  }
}

void TransducerBeamSearch::advance_tdt(const torch::Tensor& frame, int64_t t) {
  const int64_t blank = transducer_.blank_id();
  const int64_t vocab = transducer_.options.vocab_size();
  const auto& durations = transducer_.options.durations();
  const auto count = static_cast<int64_t>(durations.size());
  const int64_t durations_k = std::min(beam_, count);
  const auto zero = std::find(durations.begin(), durations.end(), 0);
  int64_t smallest_non_zero = -1;
  for (int64_t i = 0; i < count; ++i) {
    const auto d = durations[static_cast<size_t>(i)];
    if (d != 0 &&
        (smallest_non_zero < 0 || d < durations[static_cast<size_t>(smallest_non_zero)])) {
      smallest_non_zero = i;
    }
  }
  std::vector<Hypothesis> hyps;
  std::vector<Hypothesis> later;
  for (auto& h : kept_) (h.last_frame == t ? hyps : later).push_back(std::move(h));
  kept_ = std::move(later);
  // Scores add in float, as NeMo's (a Python float plus a float tensor).
  const auto add = [](double a, float b) { return static_cast<double>(static_cast<float>(a) + b); };
  for (int64_t expanded = 0; !hyps.empty(); ++expanded) {
    if (expanded == options_.max_expansions) {
      ++bounded_frames_;
      keep_best();
      return;
    }
    auto best = pop_best(hyps);
    const auto z = logits(frame, best);
    const auto log_probs = z.slice(0, 0, vocab).log_softmax(0);
    const auto duration_log_probs = z.slice(0, vocab).log_softmax(0);
    const auto [token_values, token_ids] = log_probs.slice(0, 0, blank).topk(beam_k_);
    const auto [duration_values, duration_ids] = duration_log_probs.topk(durations_k);
    // The beam_k best (token, duration) pairs, indexed duration-major as NeMo's cartesian
    // product.
    const auto [pair_values, pair_ids] =
        (duration_values.unsqueeze(1) + token_values.unsqueeze(0)).flatten().topk(beam_k_);
    const auto* tv = token_values.data_ptr<float>();
    const auto* ti = token_ids.data_ptr<int64_t>();
    const auto* di = duration_ids.data_ptr<int64_t>();
    const auto* pv = pair_values.data_ptr<float>();
    const auto* pi = pair_ids.data_ptr<int64_t>();
    for (int64_t i = 0; i < beam_k_; ++i) {
      const auto token = pi[i] % beam_k_;
      const auto duration = durations[static_cast<size_t>(di[pi[i] / beam_k_])];
      auto next = extend(best, add(best.score, pv[i]), {ti[token], t, tv[token], duration},
                         best.last_frame + duration);
      (duration == 0 ? hyps : kept_).push_back(std::move(next));
    }
    const float blank_value = log_probs[blank].item<float>();
    const auto* dv = duration_log_probs.data_ptr<float>();
    for (int64_t i = 0; i < durations_k; ++i) {
      int64_t which = di[i];
      if (zero != durations.end() && which == zero - durations.begin()) {
        if (durations_k != 1) continue;
        which = smallest_non_zero;
      }
      auto extended = best;
      extended.score =
          static_cast<double>(static_cast<float>(best.score) + blank_value + dv[which]);
      extended.last_frame = best.last_frame + durations[static_cast<size_t>(which)];
      kept_.push_back(std::move(extended));
    }
    // The same tokens ending on the same frame, reached through different blank durations: one
    // hypothesis, the best one's, with the probabilities summed (in float, as NeMo's).
    std::stable_sort(kept_.begin(), kept_.end(),
                     [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
    std::vector<Hypothesis> merged;
    for (auto& h : kept_) {
      auto same = std::find_if(merged.begin(), merged.end(), [&](const Hypothesis& m) {
        return m.last_frame == h.last_frame && same_tokens(m.tokens.get(), h.tokens.get());
      });
      if (same == merged.end()) {
        merged.push_back(std::move(h));
      } else {
        const float a = static_cast<float>(same->score);
        const float b = static_cast<float>(h.score);
        same->score = static_cast<double>(std::max(a, b) + std::log1p(std::exp(-std::abs(a - b))));
      }
    }
    kept_ = std::move(merged);
    if (hyps.empty()) {
      keep_best();
    } else if (enough_kept(hyps)) {
      return;
    }
  }
}

std::vector<TransducerBeamHypothesis> TransducerBeamSearch::hypotheses() const {
  std::vector<TransducerBeamHypothesis> out;
  for (const auto& h : kept_) {
    TransducerBeamHypothesis hyp;
    hyp.score = h.score;
    hyp.tokens.resize(h.tokens ? h.tokens->length : 0);
    for (auto* n = h.tokens.get(); n; n = n->parent.get()) hyp.tokens[n->length - 1] = n->token;
    out.push_back(std::move(hyp));
  }
  const bool norm = options_.score_norm;
  // NeMo's y_sequence holds the start blank too: tokens + 1.
  const auto rank = [norm](const TransducerBeamHypothesis& h) {
    return norm ? h.score / static_cast<double>(h.tokens.size() + 1) : h.score;
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const auto& a, const auto& b) { return rank(a) > rank(b); });
  return out;
}

std::vector<int64_t> TransducerBeamSearch::stable_tokens() const {
  std::vector<int64_t> common;
  bool first = true;
  for (const auto& h : kept_) {
    const auto ids = ids_of(h.tokens.get());
    if (first) {
      common = ids;
      first = false;
      continue;
    }
    size_t n = 0;
    while (n < common.size() && n < ids.size() && common[n] == ids[n]) ++n;
    common.resize(n);
  }
  return common;
}

}  // namespace attnzoo
