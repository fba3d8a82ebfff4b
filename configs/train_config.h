// A training run as YAML (`attnzoo train --config FILE.yaml`): the model (a zoo name or a model
// YAML, with overrides), the data, the augmentations, AdamW with parameter groups by name (and per
// slice of the fused QKV weight), the warmup + cosine schedule and the loop. Read with the same
// reader as model configs: every error names the file, key path, line and column, unknown keys
// are refused, and `--set key.path=value` overrides apply to the document before validation.
//
//   model: ../vit/vit_digits.yaml        # or a registered name; relative to this file
//   data: {kind: image_folder, train: data/train, val: data/test, workers: 2}
//   augment: {random_resized_crop: true, crop_scale: [0.6, 1.0], hflip: 0.0}
//   optimizer:
//     lr: 1.0e-3
//     weight_decay: 0.05
//     rules:                              # a per-projection recipe
//       - {pattern: '.*attn\.qkv\.weight', slices: [{lr: 1.0e-4}, {lr: 1.0e-4}, {lr: 2.0e-4}]}
//       - {pattern: '.*attn\.proj\.weight', lr: 5.0e-5}
//   schedule: {warmup_steps: 100, min_lr_ratio: 0.01}
//   train: {epochs: 30, batch_size: 64, label_smoothing: 0.1, clip_grad_norm: 1.0, seed: 0}
#pragma once

#include <attnzoo/configs/adamw_options.h>
#include <attnzoo/configs/model_config.h>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnzoo {

// What the training data is: a folder per class, or a list of files with their labels.
enum class TrainDataKind { kImageFolder, kImageList, kAudioList };
// "image_folder" | "image_list" | "audio_list": the values of a config's data.kind.
constexpr const char* to_string(TrainDataKind kind) {
  switch (kind) {
    case TrainDataKind::kImageFolder:
      return "image_folder";
    case TrainDataKind::kImageList:
      return "image_list";
    case TrainDataKind::kAudioList:
      return "audio_list";
  }
  return "image_folder";
}

// The objective: a classifier's head on labels, or a CTC head on transcripts.
enum class TrainLoss { kCrossEntropy, kCtc };
// "cross_entropy" | "ctc": the values of a config's train.loss.
constexpr const char* to_string(TrainLoss loss) {
  return loss == TrainLoss::kCtc ? "ctc" : "cross_entropy";
}

struct TrainDataConfig {
  // image_folder: one subfolder per class (sorted names are the classes); image_list and
  // audio_list: text files of "PATH LABEL" lines (paths relative to the list file, LABEL a class
  // name), '#' comments. With train.loss ctc, audio_list lines are "PATH<TAB>TRANSCRIPT".
  TrainDataKind kind = TrainDataKind::kImageFolder;
  std::string train;                 // folder or list file, resolved against the config's folder
  std::string val;                   // optional, the same kind
  std::vector<std::string> classes;  // optional: the class names in order (else from the data)
  int64_t workers = 2;               // data-loading threads
  int64_t prefetch = 4;              // batches prepared ahead
};

struct TrainAugmentConfig {
  // Images (timm's transforms_imagenet_train): RandomResizedCrop, flip, colour jitter.
  bool random_resized_crop = true;  // false: the eval transform (resize + centre crop)
  std::array<double, 2> crop_scale = {0.08, 1.0};
  std::array<double, 2> crop_ratio = {3.0 / 4.0, 4.0 / 3.0};
  double hflip = 0.5;
  double color_jitter = 0.0;  // brightness, contrast and saturation factor range
  // torchvision RandomAffine after the crop (preprocess/image/augment.h AffineOptions): rotation
  // in degrees, translation as a fraction of the size, scale range, shear in degrees.
  double affine_degrees = 0.0;
  double affine_translate = 0.0;
  std::array<double, 2> affine_scale = {1.0, 1.0};
  double affine_shear = 0.0;
  // torchvision ElasticTransform after the affine warp (ElasticOptions): alpha (0: off), sigma,
  // and the chance it is applied.
  double elastic_alpha = 0.0;
  double elastic_sigma = 5.0;
  double elastic_p = 1.0;
  // Batch mixing (images): mixup's and cutmix's Beta(alpha, alpha); 0 switches one off. With both
  // on, each batch takes one of them at random (timm's switch_prob 0.5). mix_prob: the chance a
  // batch is mixed at all.
  double mixup_alpha = 0.0;
  double cutmix_alpha = 0.0;
  double mix_prob = 1.0;
  // Audio: speed perturbation (Kaldi's and WeNet's speed_perturb): each training utterance played
  // at a speed drawn from these factors (tempo and pitch together, as sox's `speed`: the samples
  // resampled as if recorded at rate x factor); empty: off.
  std::vector<double> speed_perturb;
  // Audio: SpecAugment (preprocess/audio/spec_augment.h) on each training utterance's features.
  bool spec_augment = false;
  int64_t freq_masks = 2;
  int64_t freq_width = 27;
  int64_t time_masks = 2;
  int64_t time_width = 100;
  double time_ratio = 1.0;
  int64_t time_warp = 0;
};

struct TrainScheduleConfig {
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.0;  // the cosine's floor, as a fraction of each learning rate
};

struct TrainLoopConfig {
  // cross_entropy: a classifier's head on labels. ctc: a CTC head on transcripts, tokenized by the
  // model's decoding section (its units), validated by word and character error rates.
  TrainLoss loss = TrainLoss::kCrossEntropy;
  // Dynamic chunk training (WeNet's use_dynamic_chunk), for models that stream: each batch's
  // attention sees the whole utterance with probability full_context_prob, else chunks of a size
  // drawn from 1 .. dynamic_chunk encoder frames, with all earlier chunks or, with
  // dynamic_left_chunks, a number of them drawn from 0 .. the utterance's; so that one model
  // serves offline and streaming. 0: off (the config's streaming section applies).
  int64_t dynamic_chunk = 0;
  double full_context_prob = 0.5;
  bool dynamic_left_chunks = false;
  int64_t epochs = 1;
  int64_t steps = 0;  // > 0: this many optimiser steps instead of `epochs`
  int64_t batch_size = 32;
  int64_t accumulation = 1;     // micro-batches of batch_size per optimiser step
  double clip_grad_norm = 0.0;  // 0: off
  // cross_entropy: the head's targets smoothed; ctc with ctc_weight < 1: the attention decoder's
  // (WeNet's lsm_weight).
  double label_smoothing = 0.0;
  // ctc with a model that has an attention decoder (architecture.decoder): joint CTC/attention
  // training, WeNet's U2 and U2++ loss ctc_weight · CTC + (1 − ctc_weight) · the decoders'
  // (train/attention_training.h), the right-to-left decoder's weighted by reverse_weight.
  // ctc_weight 1: the CTC head alone (the decoder, if any, does not learn).
  double ctc_weight = 1.0;
  double reverse_weight = 0.0;
  int64_t seed = 0;
  c10::Device device = c10::kCPU;
  c10::ScalarType precision = c10::kFloat;  // float, or bfloat16 (autocast, CUDA only)
  int64_t threads = 0;                      // LibTorch intra-op threads; 0: unchanged
  int64_t log_every = 10;                   // steps between log lines and CSV rows
  int64_t eval_every = 0;         // steps between evaluations; 0: at the end of each epoch
  int64_t checkpoint_every = 0;   // steps between checkpoints; 0: at the end of each epoch
  int64_t diagnostics_every = 0;  // steps between attention/gradient diagnostics; 0: off
  // An exponential moving average of the weights (timm's ModelEmaV3, Polyak averaging): after each
  // optimiser step every floating-point parameter and buffer e <- d * e + (1 - d) * w, with
  // d = min(ema_decay, (1 + n) / (ema_warmup + n)) at the n-th update (timm's warmup; 0: none).
  // 0 switches it off. When on, the averaged weights are the ones evaluated and written to
  // model.safetensors; the checkpoint holds both.
  double ema_decay = 0.0;
  int64_t ema_warmup = 10;
  std::string output;  // run folder; default runs/<model name>
};

struct TrainConfig {
  std::string source;  // the YAML file
  std::vector<std::string> overrides;
  std::string model_ref;  // as written: a zoo name or a model YAML (resolved)
  std::vector<std::string> model_overrides;
  // Optional weights to start from (resolved): safetensors, a PyTorch checkpoint or a sharded
  // index; absent: the model's own checkpoint.file (a model folder's weights), if any.
  std::string init_weights;
  std::string init_format;  // its layout; empty: detected
  std::string init_key;     // a PyTorch training checkpoint's state dict; empty: found
  // Prefixes of the model's parameter and buffer names that init_weights may lack (they keep the
  // model's own initialization), e.g. [decoder.] to add an attention decoder to a trained CTC
  // model; the weights must then be in attnzoo's layout. Empty: init_weights holds everything.
  std::vector<std::string> init_new;
  ModelConfig model;
  TrainDataConfig data;
  TrainAugmentConfig augment;
  AdamWOptions optimizer;
  TrainScheduleConfig schedule;
  TrainLoopConfig train;
};

TrainConfig load_train_config(const std::string& path,
                              const std::vector<std::string>& overrides = {});
// `source` names the document and anchors its relative paths (its folder).
TrainConfig parse_train_config(const std::string& yaml, const std::string& source,
                               const std::vector<std::string>& overrides = {});

}  // namespace attnzoo
