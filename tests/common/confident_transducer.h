// Weights that make a transducer (models/transducer.h) as confident as a trained one where beam
// search is concerned (tests/api/make_nemo_models.py's confident_transducer builds NeMo's so):
// peaked outputs, most frames ending on a blank, and a token just emitted not emitted again at
// once. The prediction network passes the last token through (embedding row k the unit vector
// e_k, each LSTM layer's input, forget and output gates saturated open, shut and open, its cell
// input tanh(4·x), so that its output is about 0.76·e_k, and 0 from the start); joint unit k
// reads token k's evidence in the frame (row k of `evidence`, [tokens, encoder_dim], plus
// `evidence_bias[k]` when given) minus 4 when
// k was the last token; token k's logit is 8 times that unit after the ReLU, the blank's
// `blank_logit`; a TDT joint's duration logits are random mixes of the units. Random weights
// instead keep emitting on a frame, where a beam search has no natural end.
#pragma once

#include <attnzoo/models/transducer.h>

#include <torch/torch.h>

#include <string>

namespace attnzoo::testing {

inline void make_confident(TransducerImpl& t, const torch::Tensor& evidence, double blank_logit,
                           const torch::Tensor& evidence_bias = {}) {
  const int64_t tokens = t.options.vocab_size() - 1;
  const int64_t hidden = t.options.pred_hidden();
  TORCH_CHECK(hidden >= tokens && t.options.joint_hidden() >= tokens,
              "make_confident: pred_hidden and joint_hidden must be >= the tokens");
  TORCH_CHECK(evidence.sizes() == torch::IntArrayRef({tokens, t.options.encoder_dim()}),
              "make_confident: evidence must be [tokens, encoder_dim]");
  torch::NoGradGuard no_grad;
  const auto eye = torch::eye(tokens);
  t.embed->weight.zero_();
  t.embed->weight.slice(0, 0, tokens).slice(1, 0, tokens).copy_(eye);
  auto parameters = t.lstm->named_parameters();
  for (int64_t layer = 0; layer < t.options.pred_layers(); ++layer) {
    const auto n = std::to_string(layer);
    parameters["weight_ih_l" + n].copy_(0.01 * torch::randn({4 * hidden, hidden}));
    parameters["weight_hh_l" + n].copy_(0.01 * torch::randn({4 * hidden, hidden}));
    parameters["weight_ih_l" + n].slice(0, 2 * hidden, 3 * hidden).add_(4.0 * torch::eye(hidden));
    parameters["bias_hh_l" + n].zero_();
    parameters["bias_ih_l" + n].copy_(
        torch::cat({torch::full({hidden}, 10.0), torch::full({hidden}, -10.0),
                    torch::zeros({hidden}), torch::full({hidden}, 10.0)}));
  }
  t.enc->weight.zero_();
  t.enc->bias.zero_();
  t.enc->weight.slice(0, 0, tokens).copy_(evidence);
  if (evidence_bias.defined()) t.enc->bias.slice(0, 0, tokens).copy_(evidence_bias);
  t.pred->weight.zero_();
  t.pred->bias.zero_();
  t.pred->weight.slice(0, 0, tokens).slice(1, 0, tokens).copy_(-4.0 / 0.76 * eye);
  t.out->weight.zero_();
  t.out->bias.zero_();
  t.out->weight.slice(0, 0, tokens).slice(1, 0, tokens).copy_(8.0 * eye);
  t.out->bias[tokens] = blank_logit;
  const auto durations = static_cast<int64_t>(t.options.durations().size());
  if (durations > 0) {
    t.out->weight.slice(0, tokens + 1)
        .copy_(0.5 * torch::randn({durations, t.options.joint_hidden()}));
  }
}

}  // namespace attnzoo::testing
