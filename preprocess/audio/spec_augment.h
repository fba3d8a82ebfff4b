// SpecAugment (Park et al., 2019, "SpecAugment: A Simple Data Augmentation Method for Automatic
// Speech Recognition") on log-mel features, for training: time warping, then frequency masks,
// then time masks, applied to the features before global CMVN (the model applies that), as WeNet
// and ESPnet do.
//   - time warp (optional): a centre c drawn in [W, T − W), moved to w in [c − W + 1, c + W];
//     the frames before and after it are resized to w and T − w frames (bicubic interpolation,
//     ESPnet's time_warp with mode "bicubic"); skipped when T <= 2W.
//   - frequency masks: mF times, a width f uniform in [0, F] and a start uniform in
//     [0, bins − f]: those bins set to mask_value.
//   - time masks: mT times, a width uniform in [0, min(T_max, p · T)] and a start likewise.
// The paper's LibriSpeech double policy (LD) is the default: F = 27, mF = 2, T = 100, p = 1,
// mT = 2; its W = 80 warp is off by default (WeNet and most recipes do not warp).
// Draws come from the caller's std::mt19937_64 (one per data-loading worker), as the image
// augmentations take theirs: a seed reproduces the masks.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace attnzoo {

struct SpecAugmentOptions {
  int64_t num_freq_masks = 2;    // mF
  int64_t max_freq_width = 27;   // F
  int64_t num_time_masks = 2;    // mT
  int64_t max_time_width = 100;  // T
  double max_time_ratio = 1.0;   // p: a time mask covers at most p · frames
  int64_t time_warp_window = 0;  // W; 0: no time warp
  double mask_value = 0.0;
};

// What one call applied: the warp (-1 when none) and each mask as (start, width).
struct SpecAugmentRecord {
  int64_t warp_centre = -1, warp_to = -1;
  std::vector<std::pair<int64_t, int64_t>> freq_masks, time_masks;
};

class SpecAugment {
 public:
  // Throws c10::ValueError for negative counts or widths, or a ratio outside [0, 1].
  explicit SpecAugment(SpecAugmentOptions options);
  const SpecAugmentOptions& options() const { return options_; }

  // features: [T, F] floating point -> an augmented copy of the same shape and dtype.
  torch::Tensor operator()(const torch::Tensor& features, std::mt19937_64& rng,
                           SpecAugmentRecord* record = nullptr) const;
  // A padded batch: features [B, T, F], lengths [B]: each utterance augmented on its first
  // lengths[b] frames (its own warp and masks), the padding left as it is.
  torch::Tensor operator()(const torch::Tensor& features, const torch::Tensor& lengths,
                           std::mt19937_64& rng) const;

 private:
  SpecAugmentOptions options_;
};

}  // namespace attnzoo
