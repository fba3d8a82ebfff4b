// checkpoint.safetensors of a training run: everything a run needs to continue exactly where it
// stopped, written and read back here side by side.
//
//   tensors   model.<name>       the model's parameters and buffers
//             optimizer.<name>   AdamW's moments and step count (AdamW::state_dict)
//             ema.<name>         the weight average's parameters and buffers (when there is one)
//             rng.cpu            the state of LibTorch's default CPU generator (dropout, drop-path)
//   metadata  model, step, total_steps, config, ema_updates, classes (a JSON list)
//
//   save_training_checkpoint(path, {&model, &optimizer, &average}, info);
//   const int64_t step = restore_training_checkpoint(path, {&model, &optimizer, &average},
//                                                    model_name, total_steps);
#pragma once

#include <attnzoo/models/checkpoint.h>
#include <attnzoo/train/optimizer.h>
#include <attnzoo/train/weight_average.h>

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo {

// The parts of a run that a checkpoint holds; model and optimizer are required, average is
// optional (nullptr: a run without one).
struct TrainingParts {
  torch::nn::Module* model = nullptr;
  AdamW* optimizer = nullptr;
  WeightAverage* average = nullptr;
};

// The checkpoint's metadata besides the average's update count.
struct TrainingCheckpointInfo {
  std::string model;                 // the model's name: a restore into another model is refused
  int64_t step = 0;                  // optimiser steps done
  int64_t total_steps = 0;           // the run's length
  std::string config;                // the training config's file
  std::vector<std::string> classes;  // the class names, label i is classes[i]
};

// Writes `path` (tensors copied to the CPU; the file replaced atomically) with the current state
// of LibTorch's default CPU generator. Throws io::SafetensorsError naming the file if it cannot be
// written.
void save_training_checkpoint(const std::string& path, const TrainingParts& parts,
                              const TrainingCheckpointInfo& info);

// Loads `path` into the parts and sets LibTorch's default CPU generator to the saved state;
// returns the step it was saved at. `model_name`: the model the run trains; `total_steps`: the
// run's length (a checkpoint past it cannot continue it). Throws CheckpointError whose message
// starts with the path for a missing or malformed file, a file that is not a training checkpoint
// (no model or step in its metadata), a checkpoint of another model, tensors that do not fit the
// model, the optimiser or the average (all problems listed), no ema.* tensors when there is an
// average, a step past total_steps, and no rng.cpu. The parts may be partly restored when it
// throws.
int64_t restore_training_checkpoint(const std::string& path, const TrainingParts& parts,
                                    const std::string& model_name, int64_t total_steps);

}  // namespace attnzoo
