// What joint CTC/attention training adds to CTC training (train.ctc_weight < 1, a model with an
// attention decoder): the loss of WeNet's U2 and U2++ recipes,
//
//   loss = ctc_weight · ctc + (1 − ctc_weight) · ((1 − reverse_weight) · left + reverse_weight ·
//   right)
//
// where left is the left-to-right decoder's label-smoothed cross-entropy, teacher-forced on the
// transcripts (<sos> and the tokens in, the tokens and <eos> out), and right the right-to-left
// decoder's on the transcripts reversed (U2++; computed only when reverse_weight > 0).
#pragma once

#include <attnzoo/models/attention_decoder.h>

#include <torch/types.h>

#include <cstdint>

namespace attnzoo {

// WeNet's LabelSmoothingLoss with length_normalized_loss false: over every position with a target
// (targets[b][l] != -1), the Kullback–Leibler divergence from the target distribution q (1 − ε
// on the target token, ε / (V − 1) on each other) to softmax(logits), summed, divided by the
// batch size B. With ε = 0, the cross-entropy summed over the targets, divided by B.
// logits [B, L, V] (any float dtype; computed in float32); targets [B, L] int64. Throws
// c10::ValueError for shapes that differ, a target outside [-1, V), or ε outside [0, 1).
torch::Tensor label_smoothing_loss(const torch::Tensor& logits, const torch::Tensor& targets,
                                   double smoothing);

struct AttentionLossOptions {
  double label_smoothing = 0.0;  // ε (WeNet's lsm_weight)
  double reverse_weight = 0.0;   // > 0 needs the right-to-left decoder
};

// (1 − reverse_weight) · left + reverse_weight · right for a batch: the encoder's output
// `encoded` [B, T', D] with its valid frames `lengths` [B] (the decoders attend to those), the
// transcripts `targets` [B, L] int64 with their token counts `target_lengths` [B] (a Batch's,
// padded beyond). Runs on `encoded`'s device, in training or eval mode as the decoder is.
torch::Tensor attention_batch_loss(AttentionDecoderImpl& decoder, const torch::Tensor& encoded,
                                   const torch::Tensor& lengths, const torch::Tensor& targets,
                                   const torch::Tensor& target_lengths,
                                   const AttentionLossOptions& options);

}  // namespace attnzoo
