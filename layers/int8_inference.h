// int8 inference for a whole model: every linear layer that runs through PackedLinear (the
// attention's projections, the ViT MLP, the Conformer feed-forward modules) switched to
// int8_linear (layers/quantized_linear.h) at once. The weights stay float: each layer quantizes
// its weight at its first int8 call and again when the weight changes, so loading a checkpoint
// after switching is fine. Training calls (autograd recording) keep the float path.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>

namespace attnzoo {

// Switches `model`'s linear layers to int8 inference (or back, on = false); returns how many
// linear layers it switched.
int64_t set_int8_inference(torch::nn::Module& model, bool on = true);

}  // namespace attnzoo
