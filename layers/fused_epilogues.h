#pragma once
// Whether the ViT and Conformer blocks run their epilogues through attnzoo's fused ops
// (kernels/ops.h) instead of separate LibTorch ops:
//   - each residual add and the LayerNorm after it (ViT: the block's two boundaries, the second
//     with the next block's norm1 or the final norm; Conformer: every branch's, up to the block's
//     final norm): add_layer_norm;
//   - an MLP's first linear layer's bias and GELU (exact or tanh): bias_gelu after a bias-free
//     matrix product;
//   - the Conformer convolution module at inference with batch_norm: GLU, depthwise convolution,
//     BatchNorm (folded into a scale and shift) and Swish in one glu_dwconv_swish.
// fused_epilogues() turns all three on everywhere; the models give the same outputs and gradients
// either way (tests/models/test_fused_epilogues.cpp), and on CUDA they run the fused kernels. Off
// by default; ATTNZOO_FUSED_EPILOGUES=1 in the environment turns it on at start-up,
// set_fused_epilogues at any time (it applies to the forward passes that start afterwards, in
// every thread). Without it, CPU inference still takes add_layer_norm, whose CPU kernel is
// faster than the separate ops (fused_add_layer_norm below).
#include <torch/types.h>

namespace attnzoo {

bool fused_epilogues();
void set_fused_epilogues(bool on);

// Whether a block's residual add and the LayerNorm after it run as one add_layer_norm for the
// residual stream x: always for inference on the CPU (no autograd recording, not training) in
// float32 or bfloat16, where the op has its vectorised CPU kernel; elsewhere when
// fused_epilogues() is on.
bool fused_add_layer_norm(const torch::Tensor& x, bool training);

}  // namespace attnzoo
