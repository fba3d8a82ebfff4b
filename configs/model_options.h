// What every task API needs to load its model (ImageClassifier, SpeechEncoder and the
// AudioClassifier and SpeechRecognizer built on it): the weights, how to read them, the config's
// overrides, where and how the model runs. The task options extend it with their own.
//
//   attnzoo::ImageClassifierOptions options;   // a ModelOptions
//   options.weights = "last.pth";              // a timm training checkpoint...
//   options.key = "state_dict_ema";            // ...and its EMA weights
#pragma once

#include <attnzoo/configs/model_config.h>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <vector>

namespace attnzoo {

struct ModelOptions {
  // A safetensors file, a PyTorch checkpoint (.pt .pth .bin .ckpt) or a sharded index
  // (*.index.json); empty: the config's checkpoint.file (a model folder's own weights), else
  // random weights (seed 0).
  std::string weights;
  std::string format;  // checkpoint layout; empty: the config's, else detected
  std::string key;     // the state dict of a PyTorch training checkpoint; empty: found
  std::vector<std::string> overrides;  // key.path=value, as the CLI's --set
  c10::Device device = c10::kCPU;      // CPU or CUDA (parse_device reads "cpu", "cuda:1", ...)
  // float, bfloat16 or half (parse_dtype: "fp32", ...); unset: the config's inference.dtype
  // (float32 unless it says otherwise; auto: api/inference_dtype.h).
  std::optional<c10::ScalarType> dtype;
  // int8 runs on the CPU in float or bfloat16 (layers/int8_inference.h); unset: the config's
  // inference.quantize.
  std::optional<Quantization> quantize;
  // LibTorch's intra-op threads; 0 leaves them as they are. This is process-wide
  // (torch::set_num_threads): the last model constructed with a value wins.
  int threads = 0;
};

}  // namespace attnzoo
