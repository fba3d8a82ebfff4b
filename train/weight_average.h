// An exponential moving average of a model's weights, as timm's utils/model_ema.py keeps one
// (ModelEmaV3 with warmup): a second module of the same architecture whose floating-point
// parameters and buffers follow the trained ones,
//
//   e_n = d_n · e_(n−1) + (1 − d_n) · w_n,   e_0 = the model's weights when the average is made,
//   d_n = min(decay, (1 + n) / (warmup + n)) for the n-th update counted from 0 (warmup 0: decay),
//
// so that early averages forget the random initialisation quickly. Integer buffers are copied at
// the start and left alone.
//
//   attnzoo::WeightAverage average(*model.module, *copy.module, {0.9998, 10});
//   ... optimizer.step(); average.update();
//   evaluate(copy, ...);  // the averaged weights
#pragma once

#include <attnzoo/io/safetensors.h>
#include <attnzoo/models/checkpoint.h>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace attnzoo {

struct WeightAverageOptions {
  double decay = 0.9999;  // in [0, 1)
  int64_t warmup = 0;     // > 0: timm's warmup (above); 0: the decay from the first update
};

class WeightAverage {
 public:
  // `average` takes a copy of `model`'s parameters and buffers (it should be in eval mode; the
  // caller owns both modules and keeps them alive). Throws c10::ValueError for a decay outside
  // [0, 1), a negative warmup, or modules whose parameters and buffers differ in names or shapes.
  WeightAverage(const torch::nn::Module& model, torch::nn::Module& average,
                WeightAverageOptions options);

  // The d of the next update.
  double next_decay() const;
  // One step of the average towards the model's current weights (without gradients).
  void update();
  // Updates so far (0 when made; what a restored average continues from).
  int64_t updates() const { return updates_; }

  // The average's parameters and buffers (detached, on their device), for a checkpoint.
  io::TensorDict state_dict() const;
  // Restores what state_dict() gave and the update count. Throws CheckpointError (from
  // load_state_dict, naming options.source) for tensors that do not fit, c10::ValueError for a
  // negative count; the average is unchanged on error.
  void load_state_dict(const io::TensorDict& tensors, int64_t updates,
                       const LoadOptions& options = {});

 private:
  WeightAverageOptions options_;
  torch::nn::Module* average_;
  std::vector<torch::Tensor> model_tensors_, average_tensors_;  // floating, paired by position
  int64_t updates_ = 0;
};

}  // namespace attnzoo
