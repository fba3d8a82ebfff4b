#include <attnzoo/models/transducer.h>

#include <attnzoo/layers/attention_mask.h>

#include <torch/torch.h>

namespace attnzoo {

TransducerImpl::TransducerImpl(TransducerOptions options_) : options(std::move(options_)) {
  reset();
}

void TransducerImpl::reset() {
  const auto& o = options;
  TORCH_CHECK_VALUE(o.vocab_size() >= 2 && o.encoder_dim() > 0 && o.pred_hidden() > 0 &&
                        o.pred_layers() > 0 && o.joint_hidden() > 0,
                    "Transducer: vocab_size must be >= 2 (tokens and the blank) and the sizes > 0");
  TORCH_CHECK_VALUE(
      o.activation() == "relu" || o.activation() == "sigmoid" || o.activation() == "tanh",
      "Transducer: activation '", o.activation(), "' is not supported (relu, sigmoid, tanh)");
  for (const auto d : o.durations()) {
    TORCH_CHECK_VALUE(d >= 0, "Transducer: durations must be >= 0, got ", d);
  }
  TORCH_CHECK_VALUE(o.durations().empty() || o.durations().size() >= 2,
                    "Transducer: a TDT joint needs at least two durations");
  embed = register_module("embed", torch::nn::Embedding(o.vocab_size(), o.pred_hidden()));
  lstm = register_module(
      "lstm",
      torch::nn::LSTM(
          torch::nn::LSTMOptions(o.pred_hidden(), o.pred_hidden()).num_layers(o.pred_layers())));
  enc = register_module("enc", torch::nn::Linear(o.encoder_dim(), o.joint_hidden()));
  pred = register_module("pred", torch::nn::Linear(o.pred_hidden(), o.joint_hidden()));
  out = register_module(
      "out", torch::nn::Linear(o.joint_hidden(),
                               o.vocab_size() + static_cast<int64_t>(o.durations().size())));
}

std::pair<torch::Tensor, TransducerImpl::State> TransducerImpl::predict(const torch::Tensor& tokens,
                                                                        const State& state) {
  TORCH_CHECK_VALUE(tokens.dim() == 1, "Transducer::predict: tokens must be [B], got ",
                    shape_string(tokens.sizes()));
  const auto ids = tokens.to(torch::kLong);
  // The blank (and the start of a sequence) is a zero input, whatever its embedding row holds.
  auto y = embed->forward(ids.clamp(0, options.vocab_size() - 1));
  y = y.masked_fill((ids == blank_id()).unsqueeze(1), 0.0);
  std::tuple<torch::Tensor, std::tuple<torch::Tensor, torch::Tensor>> result;
  if (state.h.defined()) {
    result = lstm->forward(y.unsqueeze(0), std::make_tuple(state.h, state.c));
  } else {
    result = lstm->forward(y.unsqueeze(0));
  }
  const auto& [output, hc] = result;
  return {output.squeeze(0), State{std::get<0>(hc), std::get<1>(hc)}};
}

torch::Tensor TransducerImpl::project_encoder(const torch::Tensor& encoded) {
  return enc->forward(encoded);
}

torch::Tensor TransducerImpl::project_prediction(const torch::Tensor& g) {
  return pred->forward(g);
}

torch::Tensor TransducerImpl::joint(const torch::Tensor& encoder_side,
                                    const torch::Tensor& prediction_side) {
  auto x = encoder_side + prediction_side;
  const auto& a = options.activation();
  x = a == "relu" ? torch::relu(x) : a == "sigmoid" ? torch::sigmoid(x) : torch::tanh(x);
  return out->forward(x);
}

// ---------------------------------------------------------------------------------------------

TransducerGreedySearch::TransducerGreedySearch(TransducerImpl& transducer, int64_t max_symbols)
    : transducer_(transducer), max_symbols_(max_symbols), last_(transducer.blank_id()) {
  TORCH_CHECK_VALUE(max_symbols > 0, "TransducerGreedySearch: max_symbols must be > 0, got ",
                    max_symbols);
  predict_last();
}

void TransducerGreedySearch::predict_last() {
  const auto device = transducer_.out->weight.device();
  torch::Tensor g;
  std::tie(g, next_state_) = transducer_.predict(
      torch::full({1}, last_, torch::dtype(torch::kLong).device(device)), state_);
  // Projected once per token, not once per joint step: g_ stays until the next token.
  g_ = transducer_.project_prediction(g);
}

void TransducerGreedySearch::emit(int64_t id, int64_t frame, double log_prob, double score,
                                  int64_t duration) {
  tokens_.push_back({id, frame, log_prob, duration});
  score_ += score;
  state_ = next_state_;
  last_ = id;
  predict_last();
}

void TransducerGreedySearch::advance(const torch::Tensor& encoded) {
  TORCH_CHECK_VALUE(encoded.dim() == 2 && encoded.size(1) == transducer_.options.encoder_dim(),
                    "TransducerGreedySearch: encoded must be [k, D = ",
                    transducer_.options.encoder_dim(), "], got ", shape_string(encoded.sizes()));
  torch::NoGradGuard no_grad;
  const int64_t k = encoded.size(0);
  const auto projected = transducer_.project_encoder(encoded.to(transducer_.out->weight.options()));
  const int64_t blank = transducer_.blank_id();
  const int64_t vocab = transducer_.options.vocab_size();
  const auto& durations = transducer_.options.durations();
  if (durations.empty()) {
    for (int64_t t = 0; t < k; ++t) {
      const auto frame = projected[t].unsqueeze(0);
      for (int64_t symbols = 0; symbols < max_symbols_; ++symbols) {
        // In the joint's dtype, as NeMo normalises (its score sums these).
        const auto log_probs = transducer_.joint(frame, g_)[0].log_softmax(0).to(torch::kDouble);
        const int64_t best = log_probs.argmax().item<int64_t>();
        if (best == blank) break;
        const double value = log_probs[best].item<double>();
        emit(best, frames_ + t, value, value, 0);
      }
    }
    frames_ += k;
    return;
  }
  // TDT: t runs over this call's frames; skip_ holds an advance that passed the last call's end.
  int64_t t = skip_;
  while (t < k) {
    const auto frame = projected[t].unsqueeze(0);
    int64_t symbols = 0;
    int64_t step = 0;
    do {
      const auto logits = transducer_.joint(frame, g_)[0];
      const auto token_logits = logits.slice(0, 0, vocab);
      const int64_t best = token_logits.argmax().item<int64_t>();
      const int64_t which = logits.slice(0, vocab).argmax().item<int64_t>();
      step = durations[static_cast<size_t>(which)];
      if (best != blank) {
        emit(best, frames_ + t, token_logits.log_softmax(0)[best].item<double>(),
             logits.log_softmax(0)[best].item<double>(), step);
      }
      ++symbols;
      t += step;
    } while (step == 0 && symbols < max_symbols_);
    if (symbols == max_symbols_) ++t;
  }
  skip_ = t - k;
  frames_ += k;
}

}  // namespace attnzoo
