// What the task-level APIs (ImageClassifier, SpeechEncoder) and the CLI share: the names of
// devices and dtypes in options and flags, and building a model of the zoo ready for inference.
#pragma once

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

// The config's model with fresh weights (seed 0) or `weights` loaded (layout `format`, else the
// config's, else detected), in eval mode on `device` in `dtype`. `description` names the weights
// ("random weights (seed 0)" or "FILE (LAYOUT layout)").
ZooModel inference_model(const ModelConfig& config, const std::string& weights,
                         const std::string& format, torch::Device device, torch::Dtype dtype,
                         std::string& description);

// Milliseconds of wall time since `start` (the *_ms fields of results).
inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace attnzoo::api_detail
