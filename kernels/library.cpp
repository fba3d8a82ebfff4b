// The `attnzoo` operator library: every schema of kernels/ is declared here, once, so that the
// namespace has one owner. Implementations are registered per dispatch key next to each op
// (TORCH_LIBRARY_IMPL in <op>/<op>_op.cpp and <op>/<op>_cuda.cpp).
#include <torch/library.h>

TORCH_LIBRARY(attnzoo, m) {
  // x: [..., N], bias: [N] -> [..., N]
  m.def("bias_gelu(Tensor x, Tensor bias, str approximate='none') -> Tensor");
}
