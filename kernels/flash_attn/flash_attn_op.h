#pragma once
// Shared by the implementations of attnzoo::flash_attention (flash_attn_op.cpp,
// flash_attn_cuda.cpp).
#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace attnzoo::kernels {

// TORCH_CHECKs of every backend (a direct dispatcher call does not pass through ops.h).
void check_flash_attention_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const std::optional<at::Tensor>& key_lengths,
                                  const std::optional<at::Tensor>& bias);

// The pure-LibTorch definition of the op and the oracle of its tests (softmax in float32 for
// half inputs, in the input dtype otherwise). No checks.
// q: [B, L, H, E], k, v: [B, S, H, E] -> out [B, L, H, E] (q's dtype), lse [B, H, L] (float32)
std::tuple<at::Tensor, at::Tensor> flash_attention_reference(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, const std::optional<at::Tensor>& bias,
    bool causal, bool bottom_right, double scale);

// The checks of attnzoo::flash_attention_backward: the forward's, plus out and d_out [B, L, H, E]
// and lse [B, H, L] (float32).
void check_flash_attention_backward_inputs(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, const at::Tensor& out,
                                           const at::Tensor& d_out, const at::Tensor& lse,
                                           const std::optional<at::Tensor>& key_lengths,
                                           const std::optional<at::Tensor>& bias);

// The backward in LibTorch ops (materialising [B, H, L, S]), the oracle of the fused kernel: it
// recomputes the probabilities and their log-sum-exp in the compute dtype (float32 for half
// inputs, else the input dtype), so it needs no lse. No checks. d_bias (summed over the bias's
// broadcast dims) only with bias_requires_grad.
// -> dq [B, L, H, E], dk, dv [B, S, H, E] (the dtypes of q, k, v), d_bias (the bias's shape)
std::tuple<at::Tensor, at::Tensor, at::Tensor, std::optional<at::Tensor>>
flash_attention_backward_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& out, const at::Tensor& d_out,
                                   const std::optional<at::Tensor>& key_lengths,
                                   const std::optional<at::Tensor>& bias, bool causal,
                                   bool bottom_right, double scale, bool bias_requires_grad);

// The visible keys as a bool mask broadcastable to [B, H, L, S]: j < key_lengths[b], and with
// `causal` j <= i (+ S - L with bottom_right). Undefined when every key is visible.
at::Tensor flash_visible_mask(int64_t batch, int64_t q_len, int64_t k_len,
                              const std::optional<at::Tensor>& key_lengths, bool causal,
                              bool bottom_right, const at::Device& device);

}  // namespace attnzoo::kernels
