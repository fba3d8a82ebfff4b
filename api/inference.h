// What the task-level APIs (ImageClassifier, SpeechEncoder) and the CLI share: the names of
// devices and dtypes in options and flags, and building a model of the zoo ready for inference.
#pragma once

#include <attnzoo/api/model_options.h>
#include <attnzoo/configs/registry.h>

#include <torch/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace attnzoo::api_detail {

// "fp32" | "bf16" | "fp16", and "fp64" where `accept_fp64`. Anything else is a c10::ValueError
// beginning with `who`, the option or flag: "--dtype must be fp32, bf16 or fp16, got 'int8'".
torch::Dtype parse_dtype(const std::string& who, const std::string& name, bool accept_fp64 = false);
// "cpu" | "cuda" | "cuda:N", checked against the devices this process sees; c10::ValueError
// beginning with `who` otherwise: "--device cuda: no CUDA device is available to this process".
torch::Device parse_device(const std::string& who, const std::string& name);

// `overrides` with inference.quantize set to `quantize` when that is not empty; c10::ValueError
// beginning with `who` for a value other than none and int8.
std::vector<std::string> with_quantize(const std::string& who, std::vector<std::string> overrides,
                                       const std::string& quantize);

// The config's model with `weights` loaded (layout `format`, else the config's, else detected;
// `key`: the state dict of a training checkpoint), or the config's checkpoint.file when
// `weights` is empty, else fresh weights (seed 0); in eval mode on `device` in `dtype`.
// `description` names the weights ("random weights (seed 0)" or "FILE (LAYOUT layout; notes)").
ZooModel inference_model(const ModelConfig& config, const std::string& weights,
                         const std::string& format, const std::string& key, torch::Device device,
                         torch::Dtype dtype, std::string& description);

// The first half of a task API's constructor: the options checked and the config resolved
// (`model`: a name, a YAML file or a model folder), before the task checks the config and the
// weights load. c10::ValueError beginning with `who` for an option out of range.
struct ModelSetup {
  torch::Device device{torch::kCPU};
  torch::Dtype dtype = torch::kFloat;
  ModelConfig config;
};
ModelSetup model_setup(const std::string& who, const std::string& model,
                       const ModelOptions& options);
// The second half: the threads set and the model loaded for inference (inference_model).
ZooModel setup_model(const ModelSetup& setup, const ModelOptions& options,
                     std::string& description);

// Milliseconds of wall time since `start` (the *_ms fields of results).
inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace attnzoo::api_detail
