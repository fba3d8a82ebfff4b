#include <attnzoo/kernels/ops.h>

namespace attnzoo::kernels {

std::string build_info() {
#if ATTNZOO_WITH_CUDA
  // Both macros come from kernels/CMakeLists.txt, set on this file only.
  return "CUDA kernels: built for " ATTNZOO_CUDA_ARCHS " (CUDA " ATTNZOO_CUDA_VERSION ")";
#else
  return "CUDA kernels: not built";
#endif
}

}  // namespace attnzoo::kernels
