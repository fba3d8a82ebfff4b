// The part of a task API's constructor (ImageClassifier, SpeechEncoder, and through it
// AudioClassifier and SpeechRecognizer) that every task shares: the model options checked, the
// config resolved and its family checked against the task's input, then the model loaded.
#pragma once

#include <attnzoo/api/inference.h>
#include <attnzoo/configs/model_family.h>
#include <attnzoo/configs/model_options.h>

#include <torch/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace attnzoo::detail {

// `overrides` with inference.quantize set to `quantize` when it is set.
std::vector<std::string> with_quantize(std::vector<std::string> overrides,
                                       std::optional<Quantization> quantize);

// The first half of a task API's constructor: the options checked, the config resolved
// (`model`: a name, a YAML file or a model folder) and its family checked to take `input`, before
// the task checks the rest of the config and the weights load. c10::ValueError beginning with
// `who` for an option out of range, or for a model of another input ("...; `task_needs`", e.g.
// "an image classifier needs images").
struct ModelSetup {
  torch::Device device{torch::kCPU};
  torch::Dtype dtype = torch::kFloat;
  ModelConfig config;
  const ModelFamily* family = nullptr;
};
ModelSetup model_setup(const std::string& who, const std::string& model,
                       const ModelOptions& options, InputKind input, const std::string& task_needs);
// The second half: the threads set and the model loaded for inference (inference_model).
ZooModel setup_model(const ModelSetup& setup, const ModelOptions& options,
                     std::string& description);

// Milliseconds of wall time since `start` (the *_ms fields of results).
inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace attnzoo::detail
