#pragma once
// attnzoo's fused ops, as C++ functions. Each one calls its op schema (namespace `attnzoo`, see
// library.cpp) through the LibTorch dispatcher, so the device of the tensors picks the fused CUDA
// kernel or the pure-LibTorch reference, and autograd works on both; callers never test whether
// the CUDA kernels were built.
#include <torch/types.h>

#include <optional>
#include <string>
#include <tuple>

namespace attnzoo::kernels {

// y = gelu(x + bias), the epilogue of an MLP's first linear layer. approximate: "none" (exact erf
// GELU) or "tanh", as for at::gelu. x: any floating dtype, any strides; bias: x's dtype and device.
// Differentiable in x and bias.
// x: [..., N], bias: [N] -> [..., N]
torch::Tensor bias_gelu(const torch::Tensor& x, const torch::Tensor& bias,
                        const std::string& approximate = "none");

// Softmax attention in O(L + S) memory per head (FlashAttention): out[b, i, h] =
// softmax_j(scale q[b, i, h] . k[b, j, h] + bias[b, h, i, j]) v[b, j, h] over the visible keys:
// j < key_lengths[b] (when given) and, with `causal`, j <= i (top-left) or j <= i + S - L
// (bottom_right). A row without a visible key gives zeros (lse -inf). scale: 1/sqrt(E) by default.
// On CUDA, bf16 and fp16 with E <= 128 run the fused kernel (E padded up to 32, 64, 96, 128); the
// rest, and every CPU tensor, the LibTorch reference. Differentiable in q, k, v and bias (the
// backward is LibTorch ops recomputing the probabilities, for now).
// q: [B, L, H, E], k, v: [B, S, H, E], key_lengths: int [B], bias: [1|B, 1|H, L, S]
//   -> out [B, L, H, E] (q's dtype), lse [B, H, L] (float32)
std::tuple<torch::Tensor, torch::Tensor> flash_attention(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const std::optional<torch::Tensor>& key_lengths = std::nullopt,
    const std::optional<torch::Tensor>& bias = std::nullopt, bool causal = false,
    bool bottom_right = false, std::optional<double> scale = std::nullopt);

// One line for `attnzoo version`: "CUDA kernels: built for sm_80, sm_90a (CUDA 13.0.88)" or
// "CUDA kernels: not built".
std::string build_info();

}  // namespace attnzoo::kernels
