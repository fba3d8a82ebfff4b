// A model of the zoo ready for inference: built from its config, its weights loaded, in eval mode
// on the device and in the dtype asked for. What the task APIs (api/model_setup.h) share with
// programs that run the bare model, such as `attnzoo attention-map`.
//
//   const auto config = attnzoo::resolve_model_config("vit_digits");
//   std::string weights;
//   auto model = attnzoo::inference_model(config, "vit_digits.safetensors", "", "",
//                                         torch::kCPU, torch::kFloat, weights);
#pragma once

#include <attnzoo/configs/registry.h>

#include <torch/types.h>

#include <string>

namespace attnzoo {

// The config's model with `weights` loaded (layout `format`, else the config's, else detected;
// `key`: the state dict of a training checkpoint), or the config's checkpoint.file when
// `weights` is empty, else fresh weights (seed 0); in eval mode on `device` in `dtype`.
// `description` names the weights ("random weights (seed 0)" or "FILE (LAYOUT layout; notes)").
ZooModel inference_model(const ModelConfig& config, const std::string& weights,
                         const std::string& format, const std::string& key, torch::Device device,
                         torch::Dtype dtype, std::string& description);

}  // namespace attnzoo
