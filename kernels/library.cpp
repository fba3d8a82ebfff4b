// The `attnzoo` operator library: every schema of kernels/ is declared here, once, so that the
// namespace has one owner. Implementations are registered per dispatch key next to each op
// (TORCH_LIBRARY_IMPL in <op>/<op>_op.cpp and <op>/<op>_cuda.cpp).
#include <torch/library.h>

TORCH_LIBRARY(attnzoo, m) {
  // x: [..., N], bias: [N] -> [..., N]
  m.def("bias_gelu(Tensor x, Tensor bias, str approximate='none') -> Tensor");
  // q: [B, L, H, E], k, v: [B, S, H, E] (any strides with E contiguous: views of a fused QKV),
  // key_lengths: int [B], bias: [1|B, 1|H, L, S] -> out [B, L, H, E], lse [B, H, L] (float32)
  m.def(
      "flash_attention(Tensor q, Tensor k, Tensor v, Tensor? key_lengths=None, Tensor? bias=None, "
      "bool causal=False, bool bottom_right=False, float? scale=None) -> (Tensor, Tensor)");
}
