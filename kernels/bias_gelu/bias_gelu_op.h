#pragma once
// Shared by the implementations of attnzoo::bias_gelu (bias_gelu_op.cpp, bias_gelu_cuda.cpp).
#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

namespace attnzoo::kernels {

// TORCH_CHECKs of every backend: a direct dispatcher call (torch.ops.attnzoo.bias_gelu) does not
// pass through the C++ entry in ops.h, so the checks cannot live there.
void check_bias_gelu_inputs(const at::Tensor& x, const at::Tensor& bias,
                            c10::string_view approximate);

// The pure-LibTorch definition of the op, and the oracle of its tests. No checks.
// x: [..., N], bias: [N] -> [..., N]
at::Tensor bias_gelu_reference(const at::Tensor& x, const at::Tensor& bias,
                               c10::string_view approximate);

}  // namespace attnzoo::kernels
