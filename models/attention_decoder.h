// The attention decoder of joint CTC/attention speech recognition (Watanabe et al. 2017, "Hybrid
// CTC/Attention Architecture for End-to-End Speech Recognition"), as WeNet's U2 and U2++ train
// it (Zhang et al. 2021, arXiv 2012.05481 and 2106.05642): a Transformer decoder over the
// encoder's output, used to rescore the n-best of CTC prefix beam search.
//
// One direction (TransformerDecoder), N pre-norm blocks:
//
//   x = embed(tokens)·√D + sinusoidal positions 0 ... L − 1, then dropout
//   x = x + self_attn(norm1(x))            causal, over the first token_lengths[b] tokens
//   x = x + src_attn(norm2(x), memory)     over the first memory_lengths[b] encoder frames
//   x = x + mlp(norm3(x))                  Linear, ReLU, Linear
//   logits = output_layer(after_norm(x))   [B, L, vocab]
//
// U2++'s bitransformer (AttentionDecoder with right_blocks > 0) adds a second, independent
// decoder that reads each hypothesis backwards. The attention is the shared layer
// (layers/attention.h): self-attention with the fused qkv projection, cross-attention with q and
// the fused kv projection. Parameter names are ours; WeNet's layout maps onto them in
// models/conformer_checkpoint.h.
#pragma once

#include <attnzoo/layers/attention.h>
#include <attnzoo/layers/transformer_parts.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <string>
#include <vector>

namespace attnzoo {

struct AttentionDecoderOptions {
  // vocab_size: tokens, <sos/eos> included; dim: the model width D, which is the encoder's
  // output width (WeNet's encoder_output_size).
  AttentionDecoderOptions(int64_t vocab_size, int64_t dim) : vocab_size_(vocab_size), dim_(dim) {}
  TORCH_ARG(int64_t, vocab_size);
  TORCH_ARG(int64_t, dim);
  TORCH_ARG(int64_t, num_heads) = 4;
  TORCH_ARG(int64_t, ffn_dim) = 2048;
  // Blocks of the left-to-right decoder, and of the right-to-left one (0: none; U2++ uses > 0).
  TORCH_ARG(int64_t, num_blocks) = 6;
  TORCH_ARG(int64_t, right_blocks) = 0;
  // Training only: after the positions, after each sublayer and inside the feed-forward; on the
  // self- and cross-attention probabilities.
  TORCH_ARG(double, dropout) = 0.1;
  TORCH_ARG(double, positional_dropout) = 0.1;
  TORCH_ARG(double, self_attention_dropout) = 0.0;
  TORCH_ARG(double, src_attention_dropout) = 0.0;
  TORCH_ARG(double, norm_eps) = 1e-5;
  TORCH_ARG(std::string, attention_backend) = "auto";
};

class AttentionDecoderBlockImpl : public torch::nn::Cloneable<AttentionDecoderBlockImpl> {
 public:
  explicit AttentionDecoderBlockImpl(AttentionDecoderOptions options);
  void reset() override;
  // x: [B, L, D], memory: [B, S, D]; self_mask: causal with the tokens' key lengths;
  // memory_mask: the encoder frames' key lengths -> [B, L, D]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory,
                        const AttentionMask& self_mask, const AttentionMask& memory_mask);

  AttentionDecoderOptions options;
  torch::nn::LayerNorm norm1{nullptr};
  MultiheadAttention self_attn{nullptr};
  torch::nn::LayerNorm norm2{nullptr};
  MultiheadAttention src_attn{nullptr};
  torch::nn::LayerNorm norm3{nullptr};
  Mlp mlp{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(AttentionDecoderBlock);

// One direction: embedding, blocks, final norm and output layer.
class TransformerDecoderImpl : public torch::nn::Cloneable<TransformerDecoderImpl> {
 public:
  // options.num_blocks() blocks.
  explicit TransformerDecoderImpl(AttentionDecoderOptions options);
  void reset() override;
  // tokens: [B, L] int64 (each row <sos> then the hypothesis, padded beyond token_lengths[b]),
  // token_lengths: [B]; memory: [B, S, D], memory_lengths: [B] (undefined: all S frames valid)
  // -> logits [B, L, vocab]; rows beyond token_lengths[b] are not meaningful.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& token_lengths,
                        const torch::Tensor& memory, const torch::Tensor& memory_lengths = {});

  AttentionDecoderOptions options;
  torch::nn::Embedding embed{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm after_norm{nullptr};
  torch::nn::Linear output_layer{nullptr};
};
TORCH_MODULE(TransformerDecoder);

// What AttentionDecoderImpl::score gives each hypothesis.
struct DecoderScores {
  // Σ over the tokens and the closing <eos> of their log-probabilities, left to right.
  std::vector<double> left;
  // The same, right to left (the reversed hypothesis, then <eos>); empty without a right decoder.
  std::vector<double> right;
};

// The left-to-right decoder `left` and, with right_blocks > 0, the right-to-left `right`.
class AttentionDecoderImpl : public torch::nn::Cloneable<AttentionDecoderImpl> {
 public:
  explicit AttentionDecoderImpl(AttentionDecoderOptions options);
  void reset() override;

  bool bidirectional() const { return !right.is_empty(); }
  // <sos> and <eos>: one id, the last of the vocabulary (WeNet's convention).
  int64_t sos_eos() const { return options.vocab_size() - 1; }

  // Log-probabilities of each hypothesis (token ids without <sos>/<eos>, each in [0, vocab)) given
  // one utterance's encoder output memory [S, D] or [1, S, D] (all S frames valid), as WeNet's
  // attention rescoring computes them. The right decoder runs only when right_weight > 0 (WeNet's
  // reverse_weight); otherwise `right` is empty.
  DecoderScores score(const torch::Tensor& memory,
                      const std::vector<std::vector<int64_t>>& hypotheses,
                      double right_weight = 0.0);

  AttentionDecoderOptions options;
  TransformerDecoder left{nullptr};
  TransformerDecoder right{nullptr};  // right_blocks > 0 only
};
TORCH_MODULE(AttentionDecoder);

// A decoder's teacher-forced inputs and targets for token sequences (WeNet's add_sos_eos; with
// `reversed`, each sequence backwards first, for the right-to-left decoder): row i of `inputs` is
// <sos> then the n_i tokens, padded with <eos>; row i of `targets` is the tokens then <eos>,
// padded with -1 (no target); both [N, max n_i + 1]; `lengths` n_i + 1.
struct DecoderTeacherForcing {
  torch::Tensor inputs, targets, lengths;
};
DecoderTeacherForcing teacher_forcing(const std::vector<std::vector<int64_t>>& sequences,
                                      int64_t sos_eos, bool reversed);

// Parameters of an AttentionDecoder with these options (both directions).
int64_t attention_decoder_parameter_count(const AttentionDecoderOptions& options);

}  // namespace attnzoo
