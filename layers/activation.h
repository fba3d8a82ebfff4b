// The activations a layer applies elementwise, by name where configs and messages need one.
#pragma once

#include <torch/types.h>

namespace attnzoo {

enum class Activation {
  kNone,      // identity
  kGelu,      // exact GELU (erf)
  kGeluTanh,  // GELU's tanh approximation (some JAX ports)
  kSilu,      // SiLU / Swish (the Conformer's feed-forward)
  kRelu,      // max(x, 0) (the feed-forward of WeNet's and ESPnet's attention decoders)
};

// "none", "gelu", "gelu_tanh", "silu", "relu": the names of configs and messages.
const char* to_string(Activation activation);

// y with the activation applied (a new tensor; y itself for kNone).
torch::Tensor apply_activation(const torch::Tensor& y, Activation activation);

}  // namespace attnzoo
