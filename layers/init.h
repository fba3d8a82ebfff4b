// Parameter initialisers LibTorch's torch::nn::init lacks.
#pragma once

#include <torch/types.h>

namespace attnzoo {

// Fills `tensor` in place from N(mean, std²) truncated to [a, b] (absolute bounds, as
// torch.nn.init.trunc_normal_ and timm), by inverting the normal CDF on a uniform draw: no
// rejection loop, exact for any bounds that keep a non-negligible mass. Returns `tensor`.
torch::Tensor trunc_normal_(torch::Tensor tensor, double mean = 0.0, double std = 1.0,
                            double a = -2.0, double b = 2.0);

}  // namespace attnzoo
