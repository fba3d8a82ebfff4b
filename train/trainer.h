// `attnzoo train` as a library: a TrainConfig (configs/train_config.h) to a trained model in a run
// folder, with checkpoints that resume exactly.
//
//   auto config = attnzoo::load_train_config("configs/train/vit_digits.yaml");
//   attnzoo::Trainer trainer(config);
//   auto history = trainer.run();  // metrics.csv, checkpoint.safetensors, model.safetensors
//
// The loop: batches from worker threads (train/data.h) with the frontends' training transforms,
// soft-target cross-entropy (label smoothing, mixup / cutmix) or the CTC loss of transcripts with
// dynamic chunk training (train/ctc_training.h), gradient accumulation, clipping,
// AdamW with per-name and per-slice groups (train/optimizer.h), linear warmup then cosine, bf16
// autocast on CUDA. Every `checkpoint_every` steps (and at the end) checkpoint.safetensors holds
// the model, the optimiser's moments, the step and the random generator's state; a run resumed
// from it continues with the very batches, augmentations and dropout masks of the uninterrupted
// run, so its losses are the same.
//
// Its parts: train/mixup.h (mixup, cutmix, label smoothing), train/weight_average.h (the EMA of
// the weights), train/metrics_writer.h (metrics.csv), train/progress.h (the bar or the plain
// lines), train/training_checkpoint.h (checkpoint.safetensors, saved and restored).
#pragma once

#include <attnzoo/configs/registry.h>
#include <attnzoo/configs/train_config.h>
#include <attnzoo/train/data.h>
#include <attnzoo/train/metrics_writer.h>

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace attnzoo {

struct EvalResult {
  int64_t examples = 0;
  double loss = 0.0;        // mean cross-entropy (no smoothing)
  double top1 = 0.0;        // fractions in [0, 1]
  double top5 = 0.0;        // top-min(5, classes)
  torch::Tensor confusion;  // [C, C] int64: rows the true class, columns the predicted one
  std::vector<std::string> classes;
};

// The input of one example for a model of this config: an image through the eval transform (or,
// when `augment` is given, the training transform), or audio through the features (and
// SpecAugment when training). Thread-safe.
ExampleLoader example_loader(const ModelConfig& model, const TrainAugmentConfig* augment);

// The dataset of a config's data section: `train` or `val`; with a tokenizer, a transcript list
// (train.loss ctc) tokenized by it.
LabelledDataset load_dataset(const TrainDataConfig& data, const std::string& which,
                             const decoding::Tokenizer* tokenizer = nullptr);

// Logits of a batch: a ViT on images, a Conformer's classification head on padded features.
torch::Tensor classify_batch(ZooModel& model, const Batch& batch);

// Accuracy, loss and confusion matrix of `model` on `dataset` (eval mode, no gradients).
EvalResult evaluate(ZooModel& model, const LabelledDataset& dataset, int64_t batch_size,
                    int64_t workers, const torch::Device& device,
                    const std::function<void(int64_t done, int64_t total)>& progress = {});

struct TrainerOptions {
  std::string resume;  // a checkpoint.safetensors to continue from
  // Progress: a bar redrawn on one line (a terminal), or plain lines every log_every steps.
  bool progress_bar = false;
  std::ostream* log = nullptr;  // where progress goes (nullptr: std::cerr)
  // Called after each evaluation and at the end with the rows so far (e.g. to redraw a plot).
  std::function<void(const std::vector<TrainMetrics>&)> on_metrics;
  // > 0: stop once this many steps are done, writing a checkpoint there (an interrupted run, for
  // tests and for jobs with a time slot); model.safetensors is written only at the end.
  int64_t stop_at_step = 0;
};

class Trainer {
 public:
  // Builds the model (seeded), its optimiser and the datasets; with options.resume, restores
  // the checkpoint. Throws with a message naming the file or key for anything inconsistent (a
  // dataset whose classes do not fit the model's head, a checkpoint of another model, ...).
  explicit Trainer(TrainConfig config, TrainerOptions options = {});
  ~Trainer();

  // Trains to the configured number of steps; returns every metrics row of this run (those
  // before a resume are in metrics.csv already).
  std::vector<TrainMetrics> run();

  ZooModel& model();
  const TrainConfig& config() const;
  const LabelledDataset& train_data() const;
  int64_t total_steps() const;
  int64_t step() const;  // optimiser steps done
  std::string output_dir() const;

  // Writes checkpoint.safetensors now (what run() does every checkpoint_every steps).
  void save_checkpoint(const std::string& path) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace attnzoo
