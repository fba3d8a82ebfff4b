#include <attnzoo/train/attention_training.h>

#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace attnzoo {

torch::Tensor label_smoothing_loss(const torch::Tensor& logits, const torch::Tensor& targets,
                                   double smoothing) {
  TORCH_CHECK_VALUE(logits.dim() == 3 && logits.size(2) >= 2,
                    "label_smoothing_loss: logits must be [B, L, V >= 2], got ", logits.sizes());
  TORCH_CHECK_VALUE(targets.dim() == 2 && targets.scalar_type() == torch::kLong &&
                        targets.size(0) == logits.size(0) && targets.size(1) == logits.size(1),
                    "label_smoothing_loss: targets must be int64 [B = ", logits.size(0),
                    ", L = ", logits.size(1), "], got ", targets.scalar_type(), " ",
                    targets.sizes());
  TORCH_CHECK_VALUE(std::isfinite(smoothing) && smoothing >= 0.0 && smoothing < 1.0,
                    "label_smoothing_loss: smoothing must be in [0, 1), got ", smoothing);
  const int64_t vocab = logits.size(2);
  if (targets.numel() > 0) {
    TORCH_CHECK_VALUE(targets.min().item<int64_t>() >= -1 && targets.max().item<int64_t>() < vocab,
                      "label_smoothing_loss: targets must be in [-1, ", vocab, ")");
  }
  const auto log_probs = torch::log_softmax(logits.to(torch::kFloat), -1);
  const auto valid = targets.ne(-1).to(log_probs.device());
  const auto safe = targets.clamp_min(0).to(log_probs.device());
  // KL(q ‖ p) = Σ_v q_v log q_v − Σ_v q_v log p_v, with q_target = 1 − ε and every other
  // q_v = ε / (V − 1): the first sum is a constant, the second
  // (1 − ε − ε / (V − 1)) · log p_target + ε / (V − 1) · Σ_v log p_v.
  const double confidence = 1.0 - smoothing;
  const double other = smoothing / static_cast<double>(vocab - 1);
  const auto x_log_x = [](double x) { return x > 0.0 ? x * std::log(x) : 0.0; };
  const double entropy_term = x_log_x(confidence) + static_cast<double>(vocab - 1) * x_log_x(other);
  const auto target_log_probs = log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1);
  const auto per_position =
      entropy_term - (confidence - other) * target_log_probs - other * log_probs.sum(-1);
  return per_position.masked_fill(valid.logical_not(), 0.0).sum() /
         static_cast<double>(std::max<int64_t>(logits.size(0), 1));
}

torch::Tensor attention_batch_loss(AttentionDecoderImpl& decoder, const torch::Tensor& encoded,
                                   const torch::Tensor& lengths, const torch::Tensor& targets,
                                   const torch::Tensor& target_lengths,
                                   const AttentionLossOptions& options) {
  TORCH_CHECK_VALUE(encoded.dim() == 3 && lengths.dim() == 1 && lengths.size(0) == encoded.size(0),
                    "attention_batch_loss: encoded must be [B, T', D] and lengths [B], got ",
                    encoded.sizes(), " and ", lengths.sizes());
  TORCH_CHECK_VALUE(
      targets.dim() == 2 && target_lengths.dim() == 1 && targets.size(0) == encoded.size(0) &&
          target_lengths.size(0) == encoded.size(0),
      "attention_batch_loss: targets must be [B = ", encoded.size(0),
      ", L] and target_lengths [B], got ", targets.sizes(), " and ", target_lengths.sizes());
  TORCH_CHECK_VALUE(options.reverse_weight >= 0.0 && options.reverse_weight < 1.0,
                    "attention_batch_loss: reverse_weight must be in [0, 1), got ",
                    options.reverse_weight);
  TORCH_CHECK_VALUE(options.reverse_weight == 0.0 || decoder.bidirectional(),
                    "attention_batch_loss: reverse_weight ", options.reverse_weight,
                    " needs a right-to-left decoder (right_blocks > 0); this decoder has none");
  const auto cpu_targets = targets.to(torch::kCPU, torch::kLong);
  const auto cpu_lengths = target_lengths.to(torch::kCPU, torch::kLong);
  std::vector<std::vector<int64_t>> transcripts(static_cast<size_t>(targets.size(0)));
  for (int64_t b = 0; b < targets.size(0); ++b) {
    const auto n = cpu_lengths[b].item<int64_t>();
    TORCH_CHECK_VALUE(n >= 0 && n <= targets.size(1), "attention_batch_loss: target_lengths[", b,
                      "] = ", n, " is outside [0, ", targets.size(1), "]");
    const auto row = cpu_targets[b].narrow(0, 0, n).contiguous();
    transcripts[static_cast<size_t>(b)].assign(row.data_ptr<int64_t>(),
                                               row.data_ptr<int64_t>() + n);
  }
  const auto device = encoded.device();
  const auto memory_lengths = lengths.to(device);
  const auto direction = [&](TransformerDecoder& one, bool reversed) {
    const auto f = teacher_forcing(transcripts, decoder.sos_eos(), reversed);
    const auto logits = one(f.inputs.to(device), f.lengths.to(device), encoded, memory_lengths);
    return label_smoothing_loss(logits, f.targets, options.label_smoothing);
  };
  auto loss = direction(decoder.left, false);
  if (options.reverse_weight > 0.0) {
    loss = (1.0 - options.reverse_weight) * loss +
           options.reverse_weight * direction(decoder.right, true);
  }
  return loss;
}

}  // namespace attnzoo
