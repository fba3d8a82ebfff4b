// The `attnzoo` operator library: every schema of kernels/ is declared here, once, so that the
// namespace has one owner. Implementations are registered per dispatch key next to each op
// (TORCH_LIBRARY_IMPL in <op>/<op>_op.cpp and <op>/<op>_cuda.cpp).
#include <torch/library.h>

TORCH_LIBRARY(attnzoo, m) {
  // x: [..., N], bias: [N] -> [..., N]
  m.def("bias_gelu(Tensor x, Tensor bias, str approximate='none') -> Tensor");
  // The Conformer convolution module's middle: silu(depthwise_conv1d(glu(x)) * scale + shift),
  // zero padding left_pad frames on the left, K - 1 - left_pad on the right; GLU outputs at
  // t >= lengths[b] zeroed before the convolution.
  // x: [B, T, 2C] (any strides), weight: [C, K], bias, scale, shift: [C], lengths: integer [B]
  //   -> [B, T, C]
  m.def(
      "glu_dwconv_swish(Tensor x, Tensor weight, Tensor? bias, Tensor scale, Tensor shift, "
      "int left_pad, Tensor? lengths=None) -> Tensor");
  // x, residual: [..., N], weight, bias: [N] -> sum = x + residual [..., N],
  // normed = layer_norm(sum) [..., N]
  m.def(
      "add_layer_norm(Tensor x, Tensor residual, Tensor? weight=None, Tensor? bias=None, "
      "float eps=1e-05) -> (Tensor sum, Tensor normed)");
  // add_layer_norm's forward, with the statistics its backward reuses; not differentiable.
  // -> sum, normed [..., N], mean, rstd [...] (float32; float64 for float64 inputs)
  m.def(
      "_add_layer_norm_forward(Tensor x, Tensor residual, Tensor? weight, Tensor? bias, "
      "float eps) -> (Tensor sum, Tensor normed, Tensor mean, Tensor rstd)");
  // add_layer_norm's gradients from the forward's sum, mean and rstd; not differentiable (the
  // autograd formula uses LibTorch ops under create_graph). d_sum, d_normed, sum: [..., N], mean,
  // rstd: [...] -> d_x (= d_residual) [..., N], d_weight [N], d_bias [N], each only when asked for
  m.def(
      "_add_layer_norm_backward(Tensor? d_sum, Tensor d_normed, Tensor sum, Tensor mean, "
      "Tensor rstd, Tensor? weight, bool need_x, bool need_weight, bool need_bias) "
      "-> (Tensor?, Tensor?, Tensor?)");
  // Softmax attention with Transformer-XL's relative term (ops.h); CPU only. q_content,
  // q_position: [B, L, H, E], k, v: [B, S, H, E], positions: [1|B, L + S - 1, H, E], key_lengths:
  // integer [B] -> [B, L, H, E]
  m.def(
      "flash_attention_relative_cpu(Tensor q_content, Tensor q_position, Tensor k, Tensor v, "
      "Tensor positions, Tensor? key_lengths, float scale) -> Tensor");
  // act(x·Wᵀ + b) for float32 CPU inference with W packed once by pack_linear_weight_cpu
  // (ops.h); CPU only. x: [..., K], packed: [⌈N/32⌉, K, 32], bias: [N] -> [..., N]
  m.def(
      "linear_packed_cpu(Tensor x, Tensor packed, int out_features, Tensor? bias, "
      "str activation) -> Tensor");
  // x·W with int32 sums for int8 CPU inference, W packed once by pack_int8_weight_cpu (ops.h);
  // CPU only. x: int8 [M, K], packed: uint8 [⌈N/32⌉, K/4, 32, 4] -> int32 [M, N]
  m.def("int8_matmul_packed_cpu(Tensor x, Tensor packed, int out_features) -> Tensor");
  // int8_matmul_packed_cpu scaled back in its tiles: act(sums·row_scales·col_scales + bias) as
  // dtype (float32 or bfloat16), ops.h. row_scales: [M], col_scales, bias: [N] -> [M, N]
  m.def(
      "int8_linear_packed_cpu(Tensor x, Tensor row_scales, Tensor packed, Tensor col_scales, "
      "Tensor? bias, str activation, ScalarType dtype) -> Tensor");
  // q: [B, L, H, E], k, v: [B, S, H, E] (any strides with E contiguous: views of a fused QKV),
  // key_lengths: int [B], bias: [1|B, 1|H, L, S] -> out [B, L, H, E], lse [B, H, L] (float32)
  m.def(
      "flash_attention(Tensor q, Tensor k, Tensor v, Tensor? key_lengths=None, Tensor? bias=None, "
      "bool causal=False, bool bottom_right=False, float? scale=None) -> (Tensor, Tensor)");
  // flash_attention's gradients from its out and lse (FlashAttention-2's backward). out, d_out:
  // [B, L, H, E], lse: [B, H, L] (float32) -> dq [B, L, H, E], dk, dv [B, S, H, E], d_bias (the
  // bias's shape, summed over its broadcast dims; only with bias_requires_grad)
  m.def(
      "flash_attention_backward(Tensor q, Tensor k, Tensor v, Tensor out, Tensor d_out, "
      "Tensor lse, Tensor? key_lengths=None, Tensor? bias=None, bool causal=False, "
      "bool bottom_right=False, float? scale=None, bool bias_requires_grad=False) "
      "-> (Tensor, Tensor, Tensor, Tensor?)");
}
