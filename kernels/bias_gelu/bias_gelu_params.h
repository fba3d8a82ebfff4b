#pragma once
// Tier 1 of the bias + GELU epilogue: what the launcher needs, in plain types. Included by the
// torch-free .cu files and by the ops layer, so it must stay free of torch (and of anything that
// nvcc compiles slowly).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace attnzoo::kernels {

// y[r, c] = gelu(x[r, c] + bias[c]) over a [rows, cols] view. The leading dims of the op's input
// are flattened into rows; a row may start anywhere (no alignment is assumed), elements within a
// row are contiguous. Pointers are typed by the launcher's template argument.
struct BiasGeluParams {
  const void* x = nullptr;
  const void* bias = nullptr;  // [cols]
  void* y = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t x_row_stride = 0;         // in elements
  int64_t y_row_stride = 0;         // in elements
  bool tanh_approximation = false;  // false: exact erf GELU
};

// T is float, __half or __nv_bfloat16; the instantiations live in bias_gelu_{fp32,fp16,bf16}.cu.
// Launches on `stream` and returns without synchronising; the caller checks for launch errors.
template <typename T>
void run_bias_gelu(const BiasGeluParams& params, cudaStream_t stream);

}  // namespace attnzoo::kernels
