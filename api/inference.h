// What the task-level APIs (ImageClassifier, SpeechEncoder) share: their device and dtype options
// and building a model of the zoo ready for inference. Internal to api/.
#pragma once

#include <attnzoo/configs/registry.h>

#include <torch/types.h>

#include <string>

namespace attnzoo::api_detail {

// "fp32" | "bf16" | "fp16"; throws c10::ValueError prefixed with `who`.
torch::Dtype parse_dtype(const char* who, const std::string& name);
// "cpu" | "cuda" | "cuda:N", checked against the devices this process sees.
torch::Device parse_device(const char* who, const std::string& name);

// The config's model with fresh weights (seed 0) or `weights` loaded (layout `format`, else the
// config's, else detected), in eval mode on `device` in `dtype`. `description` names the weights
// ("random weights (seed 0)" or "FILE (LAYOUT layout)").
ZooModel inference_model(const ModelConfig& config, const std::string& weights,
                         const std::string& format, torch::Device device, torch::Dtype dtype,
                         std::string& description);

}  // namespace attnzoo::api_detail
