// AdamW with parameter groups chosen by name, including learning rates and weight decays per
// slice of a fused tensor: a per-projection recipe (q and k 1e-4, v 2e-4, output 5e-5, weight
// decay 0.01) on our fused QKV weight, a single [3·H·E, D] parameter.
//
// Why slices and not gradient scaling: Adam normalises each element's step by its own gradient
// statistics, so scaling a slice's gradient changes nothing (invariance); the learning rate must
// multiply the update itself. Here each parameter's learning rate and weight decay are a scalar
// or, for a sliced parameter, a tensor broadcast along its first dimension, so that the fused
// weight follows exactly the trajectory that separate q, k and v weights with their own AdamW
// groups would (tested against LibTorch's torch::optim::AdamW on the separate weights).
//
// The update is torch.optim.AdamW's (amsgrad off): p ← p·(1 − lr·wd); m ← β1·m + (1 − β1)·g;
// v ← β2·v + (1 − β2)·g²; p ← p − lr/(1 − β1ᵗ) · m / (√v/√(1 − β2ᵗ) + ε).
#pragma once

#include <attnzoo/configs/adamw_options.h>
#include <attnzoo/io/safetensors.h>

#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

namespace attnzoo {

class AdamW {
 public:
  // `parameters`: the model's named_parameters() (those with requires_grad false are skipped).
  // Throws c10::ValueError for an invalid pattern, a rule that matches no parameter (a typo
  // would otherwise silently train with the defaults), or slices that do not divide a matched
  // parameter's first dimension.
  AdamW(const torch::OrderedDict<std::string, torch::Tensor>& parameters, AdamWOptions options);

  // One update from the parameters' .grad (parameters without a gradient are left alone);
  // lr_scale multiplies every learning rate (the schedule's factor).
  void step(double lr_scale = 1.0);
  void zero_grad();
  int64_t steps() const { return step_; }

  // The effective learning rate / weight decay of a parameter: a scalar tensor, or [rows, 1, ...]
  // for a sliced one. For logging and tests.
  torch::Tensor learning_rate(const std::string& name) const;
  torch::Tensor weight_decay(const std::string& name) const;
  // One line per parameter: name, shape, lr and weight decay (per slice where sliced).
  std::string describe() const;

  // Moments and step count as tensors ("step", "exp_avg.<name>", "exp_avg_sq.<name>"), for
  // checkpoints; load_state_dict checks that names and shapes fit.
  io::TensorDict state_dict() const;
  void load_state_dict(const io::TensorDict& state);

 private:
  struct Slot {
    std::string name;
    torch::Tensor param;
    torch::Tensor lr;            // scalar (double, CPU) or [rows, 1, ...] on the param's device
    torch::Tensor weight_decay;  // likewise
    std::string settings;        // for describe()
    torch::Tensor exp_avg, exp_avg_sq;
  };
  AdamWOptions options_;
  std::vector<Slot> slots_;
  int64_t step_ = 0;
};

// Learning-rate factor: linear warmup over `warmup_steps` (step s < warmup uses (s + 1) / warmup),
// then a half cosine from 1 down
// to `min_ratio` at `total_steps` (and min_ratio after). step counts from 0.
struct WarmupCosineSchedule {
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_ratio = 0.0;
  double factor(int64_t step) const;
};

}  // namespace attnzoo
