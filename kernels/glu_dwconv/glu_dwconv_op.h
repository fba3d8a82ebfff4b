#pragma once
// Shared by the implementations of attnzoo::glu_dwconv_swish (glu_dwconv_op.cpp,
// glu_dwconv_cuda.cpp).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace attnzoo::kernels {

// TORCH_CHECKs of every backend: a direct dispatcher call (torch.ops.attnzoo.glu_dwconv_swish)
// does not pass through the C++ entry in ops.h, so the checks cannot live there.
void check_glu_dwconv_swish_inputs(const at::Tensor& x, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, const at::Tensor& scale,
                                   const at::Tensor& shift, int64_t left_pad,
                                   const std::optional<at::Tensor>& lengths);

// The pure-LibTorch definition of the op (at::glu, masked_fill, constant_pad_nd, at::conv1d with
// groups = C, the affine, at::silu), and the oracle of its tests. No checks.
// x: [B, T, 2C], weight: [C, K], bias, scale, shift: [C], lengths: integer [B] -> [B, T, C]
at::Tensor glu_dwconv_swish_reference(const at::Tensor& x, const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias,
                                      const at::Tensor& scale, const at::Tensor& shift,
                                      int64_t left_pad, const std::optional<at::Tensor>& lengths);

}  // namespace attnzoo::kernels
