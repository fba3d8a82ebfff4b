// The transducer head of a speech encoder (Graves 2012, "Sequence Transduction with Recurrent
// Neural Networks", arXiv 1211.3711), in the layout of NeMo's RNNTDecoder and RNNTJoint, and its
// token-and-duration variant (TDT: Xu et al. 2023, "Efficient Sequence Transduction by Jointly
// Predicting Tokens and Durations", arXiv 2304.06795):
//
//   prediction network   g_u = LSTM(embed(y_u)), the stack's state carried from token to token;
//                        the start of a sequence (and the blank) is a zero input vector
//   joint                z = out(act(enc(f_t) + pred(g_u)))   [vocab_size (+ durations)]
//
// The vocabulary has the blank last (NeMo's: the token table's size V, blank V − 1). A TDT joint
// has len(durations) more outputs after the tokens, the logits of how many frames to advance.
// Greedy decoding (NeMo's GreedyRNNTInfer and GreedyTDTInfer, the frame-by-frame loop) lives
// here too: its inner steps are this module's.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>

#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo {

struct TransducerOptions {
  // vocab_size: tokens with the blank last; encoder_dim: the encoder's output width D.
  TransducerOptions(int64_t vocab_size, int64_t encoder_dim)
      : vocab_size_(vocab_size), encoder_dim_(encoder_dim) {}
  TORCH_ARG(int64_t, vocab_size);
  TORCH_ARG(int64_t, encoder_dim);
  TORCH_ARG(int64_t, pred_hidden) = 640;
  TORCH_ARG(int64_t, pred_layers) = 1;
  TORCH_ARG(int64_t, joint_hidden) = 640;
  // "relu", "sigmoid" or "tanh" (NeMo's jointnet.activation).
  TORCH_ARG(std::string, activation) = "relu";
  // TDT: the frame advances the duration outputs stand for, in order (NeMo's [0, 1, 2, 3, 4]);
  // empty for RNN-T.
  TORCH_ARG(std::vector<int64_t>, durations) = {};
};

class TransducerImpl : public torch::nn::Cloneable<TransducerImpl> {
 public:
  // The prediction network's state: h and c, each [layers, B, pred_hidden]; undefined at the
  // start of a sequence.
  struct State {
    torch::Tensor h, c;
  };

  explicit TransducerImpl(TransducerOptions options);
  void reset() override;

  // The prediction network on one token per sequence: tokens [B] (the blank: the start of a
  // sequence) -> (g [B, pred_hidden], the new state).
  std::pair<torch::Tensor, State> predict(const torch::Tensor& tokens, const State& state);
  // The two sides of the joint, each projected once: the encoder's per frame, encoded [..., D]
  // -> [..., joint_hidden]; the prediction network's per token, g [..., pred_hidden] ->
  // [..., joint_hidden].
  torch::Tensor project_encoder(const torch::Tensor& encoded);
  torch::Tensor project_prediction(const torch::Tensor& g);
  // The joint's logits from the two projected sides (broadcast against each other)
  // -> [..., vocab_size + durations].
  torch::Tensor joint(const torch::Tensor& encoder_side, const torch::Tensor& prediction_side);

  int64_t blank_id() const { return options.vocab_size() - 1; }

  TransducerOptions options;
  torch::nn::Embedding embed{nullptr};  // [vocab_size, pred_hidden], the blank's row zero
  torch::nn::LSTM lstm{nullptr};
  torch::nn::Linear enc{nullptr};   // [joint_hidden, D]
  torch::nn::Linear pred{nullptr};  // [joint_hidden, pred_hidden]
  torch::nn::Linear out{nullptr};   // [vocab_size + durations, joint_hidden]
};
TORCH_MODULE(Transducer);

// One token of a transducer hypothesis: its id, the encoder frame it was emitted at, its
// log-probability, and (TDT) the frames its duration output advanced.
struct TransducerToken {
  int64_t id = 0;
  int64_t frame = 0;
  double log_prob = 0.0;
  int64_t duration = 0;
};

// Greedy transducer decoding, frame by frame and resumable: each advance() takes the next
// encoder frames and continues from where the last stopped (the prediction network's state, the
// last token, and for TDT the frames a duration carried past the end).
//   RNN-T  at each frame, up to max_symbols times: the joint of the frame and the prediction
//          output; its best class, if a token, is emitted and fed to the prediction network,
//          and a blank moves to the next frame.
//   TDT    the best token and, separately, the best duration; a token is emitted (and fed) as
//          above; the frame advances by the duration; a duration 0 stays on the frame, at most
//          max_symbols times, after which the frame advances by one.
// The score is NeMo's greedy score as it runs on the CPU: the sum over the emitted tokens of
// their log-softmax over the joint's outputs (for TDT over the tokens and the durations
// together, as NeMo's RNNTJoint normalises on the CPU; on a GPU NeMo sums raw TDT logits).
// A token's log_prob is its log-softmax over the tokens alone.
class TransducerGreedySearch {
 public:
  // `transducer` (in eval mode) must outlive the search.
  TransducerGreedySearch(TransducerImpl& transducer, int64_t max_symbols);

  // encoded: [k, D] (k may be 0), the next frames of one utterance.
  void advance(const torch::Tensor& encoded);
  const std::vector<TransducerToken>& tokens() const { return tokens_; }
  double score() const { return score_; }
  int64_t frames() const { return frames_; }  // encoder frames given so far

 private:
  // The prediction network on the last token from state_: g_ (projected) and next_state_.
  void predict_last();
  // One step of the joint on the projected frame: the logits [vocab_size + durations].
  void emit(int64_t id, int64_t frame, double log_prob, double score, int64_t duration);

  TransducerImpl& transducer_;
  int64_t max_symbols_;
  std::vector<TransducerToken> tokens_;
  double score_ = 0.0;
  int64_t frames_ = 0;
  int64_t skip_ = 0;             // TDT: frames of the next advance() a duration already passed over
  int64_t last_;                 // the last token emitted, or the blank at the start
  TransducerImpl::State state_;  // the prediction network's state before last_
  TransducerImpl::State next_state_;  // and after it
  torch::Tensor g_;  // the prediction output for last_, projected: [1, joint_hidden]
};

}  // namespace attnzoo
