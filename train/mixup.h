// Mixup and cutmix of a training batch, and the soft targets that go with them, as timm's
// data/mixup.py mixes a batch with itself reversed:
//
//   attnzoo::Mixup mixup({/*mixup_alpha=*/0.8, /*cutmix_alpha=*/1.0, /*prob=*/1.0,
//                         /*label_smoothing=*/0.1, /*num_classes=*/1000});
//   auto mixed = mixup(batch.inputs, batch.labels, rng);  // mixed.inputs, mixed.targets
//   auto loss = -(mixed.targets * torch::log_softmax(logits, -1)).sum(-1).mean();
//
// With probability `prob` a batch is mixed: by cutmix (when only cutmix_alpha is set, or on a
// fair coin when both are) or else by mixup, with λ ~ Beta(α, α) of the chosen method.
//   mixup:  x ← λ·x + (1 − λ)·x.flip(0)
//   cutmix: with ch = ⌊H·√(1 − λ)⌋, cw = ⌊W·√(1 − λ)⌋ and a uniform centre pixel (cy, cx), the rows
//           [cy − ⌊ch/2⌋, cy + ⌊ch/2⌋) and columns [cx − ⌊cw/2⌋, cx + ⌊cw/2⌋), clipped to the
//           image, take the reversed batch's pixels (the box of older timm; timm's current
//           rand_bbox ends it at cy + ⌊(ch + 1)/2⌋, a pixel further for odd ch); λ becomes
//           1 − (box area) / (H·W).
// The targets are λ·onehot(y) + (1 − λ)·onehot(y).flip(0), then smoothed:
// t·(1 − ε) + ε / classes. Every random number comes from the caller's generator, in a fixed order
// (the coin for `prob`, the coin for the method, the Beta draw, the box's centre row and column),
// so a seeded generator repeats a run's mixing exactly.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <random>

namespace attnzoo {

struct MixupOptions {
  double mixup_alpha = 0.0;      // > 0: mixup with λ ~ Beta(mixup_alpha, mixup_alpha)
  double cutmix_alpha = 0.0;     // > 0: cutmix with λ ~ Beta(cutmix_alpha, cutmix_alpha)
  double prob = 1.0;             // the chance that a batch is mixed at all
  double label_smoothing = 0.0;  // ε in [0, 1): applied to every batch's targets, mixed or not
  int64_t num_classes = 0;
};

// What Mixup made of a batch. `mixed` false: the inputs unchanged and λ = 1.
struct MixedBatch {
  torch::Tensor inputs;   // as given ([B, C, H, W] for cutmix)
  torch::Tensor targets;  // [B, num_classes] float32, rows summing to 1
  bool mixed = false;
  bool cutmix = false;
  double lambda = 1.0;  // the weight of the batch itself (cutmix: corrected by the box's area)
  int64_t box_top = 0, box_bottom = 0, box_left = 0, box_right = 0;  // cutmix: rows, columns [)
};

class Mixup {
 public:
  // Throws c10::ValueError for negative alphas, prob or label_smoothing outside [0, 1], or
  // num_classes < 1.
  explicit Mixup(MixupOptions options);

  // Whether an alpha is set. When not, batches are never mixed and no random number is drawn;
  // when one is, every batch draws the `prob` coin (even with prob 0).
  bool mixes() const;
  const MixupOptions& options() const { return options_; }

  // inputs [B, ...] ([B, C, H, W] when cutmix_alpha is set), labels [B] int64 in
  // [0, num_classes). Throws c10::ValueError (before any draw) for labels that are not [B] or out
  // of range, and for inputs that are not 4-D when cutmix_alpha is set.
  MixedBatch operator()(const torch::Tensor& inputs, const torch::Tensor& labels,
                        std::mt19937_64& rng) const;

 private:
  MixupOptions options_;
};

}  // namespace attnzoo
