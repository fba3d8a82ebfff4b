#pragma once
// Whether the ViT and Conformer blocks run their epilogues through attnzoo's fused ops
// (kernels/ops.h) instead of separate LibTorch ops:
//   - the ViT block's residual add and the LayerNorm after it: add_layer_norm;
//   - an MLP's first linear layer's bias and GELU (exact or tanh): bias_gelu after a bias-free
//     matrix product;
//   - the Conformer convolution module at inference with batch_norm: GLU, depthwise convolution,
//     BatchNorm (folded into a scale and shift) and Swish in one glu_dwconv_swish.
// On the CPU the ops run their LibTorch references, so a model gives the same outputs either
// way (tests/layers/test_fused_epilogues.cpp); on CUDA they run the fused kernels. Off by default;
// ATTNZOO_FUSED_EPILOGUES=1 in the environment turns it on at start-up, set_fused_epilogues at
// any time (it applies to the forward passes that start afterwards, in every thread).
namespace attnzoo {

bool fused_epilogues();
void set_fused_epilogues(bool on);

}  // namespace attnzoo
