#pragma once
// attnzoo's fused ops, as C++ functions. Each one calls its op schema (namespace `attnzoo`, see
// library.cpp) through the LibTorch dispatcher, so the device of the tensors picks the fused CUDA
// kernel or the pure-LibTorch reference, and autograd works on both; callers never test whether
// the CUDA kernels were built.
#include <torch/types.h>

#include <string>

namespace attnzoo::kernels {

// y = gelu(x + bias), the epilogue of an MLP's first linear layer. approximate: "none" (exact erf
// GELU) or "tanh", as for at::gelu. x: any floating dtype, any strides; bias: x's dtype and device.
// Differentiable in x and bias.
// x: [..., N], bias: [N] -> [..., N]
torch::Tensor bias_gelu(const torch::Tensor& x, const torch::Tensor& bias,
                        const std::string& approximate = "none");

// One line for `attnzoo version`: "CUDA kernels: built for sm_80, sm_90a (CUDA 13.0.88)" or
// "CUDA kernels: not built".
std::string build_info();

}  // namespace attnzoo::kernels
