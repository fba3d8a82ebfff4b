#pragma once
// Tier 1 of the fused residual add + LayerNorm: what the launcher needs, in plain types. Included
// by the torch-free .cu files and by the ops layer, so it must stay free of torch (and of anything
// that nvcc compiles slowly).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace attnzoo::kernels {

// Over a [rows, cols] view, for every row r:
//   sum[r, :]    = x[r, :] + residual[r, :]                      (rounded to T)
//   mean[r]      = mean of sum[r, :],  rstd[r] = 1 / sqrt(biased variance of sum[r, :] + eps)
//   normed[r, c] = (sum[r, c] - mean[r]) * rstd[r] * weight[c] + bias[c]
// The statistics are those of the rounded sum, in float32, as LibTorch's layer_norm(x + residual)
// computes them. The leading dims of the op's inputs are flattened into rows; an input row may
// start anywhere (no alignment is assumed), elements within a row are contiguous. The outputs are
// contiguous. Pointers are typed by the launcher's template argument, except mean and rstd.
struct AddLayerNormParams {
  const void* x = nullptr;
  const void* residual = nullptr;
  const void* weight = nullptr;  // [cols], or nullptr: no scale
  const void* bias = nullptr;    // [cols], or nullptr: no shift
  void* sum = nullptr;           // [rows, cols], contiguous
  void* normed = nullptr;        // [rows, cols], contiguous
  float* mean = nullptr;         // [rows]
  float* rstd = nullptr;         // [rows]
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t x_row_stride = 0;         // in elements
  int64_t residual_row_stride = 0;  // in elements
  float eps = 1e-5f;
};

// The backward, for rows of at most kAddLayerNormBwdMaxCols elements. For every row r, with
// xhat = (sum[r, :] - mean[r]) * rstd[r] and g = d_normed[r, :] * weight (N = cols):
//   d_x[r, :] = d_sum[r, :] + rstd[r] * (g - mean(g) - xhat * mean(g * xhat))
// and, per warp w of the grid, the partial column sums over the rows that warp handled:
//   d_weight_partial[w, c] = sum over those rows of d_normed[r, c] * xhat[r, c]
//   d_bias_partial[w, c]   = sum over those rows of d_normed[r, c]
// which the caller sums over w. Every input and output is contiguous.
struct AddLayerNormBwdParams {
  const void* d_sum = nullptr;        // [rows, cols], or nullptr: no gradient through sum
  const void* d_normed = nullptr;     // [rows, cols]
  const void* sum = nullptr;          // [rows, cols], the forward's output
  const float* mean = nullptr;        // [rows]
  const float* rstd = nullptr;        // [rows]
  const void* weight = nullptr;       // [cols], or nullptr: no scale
  void* d_x = nullptr;                // [rows, cols]
  float* d_weight_partial = nullptr;  // [num_warps, cols], or nullptr: not wanted
  float* d_bias_partial = nullptr;    // [num_warps, cols], or nullptr: not wanted
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t num_warps = 0;  // of the grid: a multiple of kAddLayerNormBwdWarpsPerBlock, >= 1
};

// The backward holds a lane's share of the column partials in registers: rows up to this long.
constexpr int64_t kAddLayerNormBwdMaxCols = 1024;
constexpr int64_t kAddLayerNormBwdWarpsPerBlock = 4;

// T is float, __half or __nv_bfloat16; the instantiations live in
// add_layer_norm_{fp32,fp16,bf16}.cu. Launch on `stream` and return without synchronising; the
// caller checks for launch errors.
template <typename T>
void run_add_layer_norm(const AddLayerNormParams& params, cudaStream_t stream);
template <typename T>
void run_add_layer_norm_backward(const AddLayerNormBwdParams& params, cudaStream_t stream);

}  // namespace attnzoo::kernels
