#pragma once
// Tier 2 of the bias + GELU epilogue: the kernel template and its launcher. Included only by the
// per-dtype bias_gelu_{fp32,fp16,bf16}.cu files, which instantiate run_bias_gelu<T>.
#include <attnzoo/kernels/bias_gelu/bias_gelu_params.h>
#include <attnzoo/kernels/common/static_switch.h>
#include <attnzoo/kernels/common/elementwise.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

namespace attnzoo::kernels {
namespace detail {

// GELU (Hendrycks & Gimpel 2016, eq. 1): z * Phi(z), or the paper's tanh approximation
// 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))). These are the formulas of at::gelu with
// approximate='none' / 'tanh', so the reference and the kernel differ only by rounding.
template <bool kTanh>
__device__ __forceinline__ float gelu(float z) {
  if constexpr (kTanh) {
    constexpr float kSqrt2OverPi = 0.79788456080286535588f;
    constexpr float kCubic = 0.044715f;
    return 0.5f * z * (1.0f + tanhf(kSqrt2OverPi * (z + kCubic * (z * z * z))));
  } else {
    constexpr float kSqrtHalf = 0.70710678118654752440f;
    return 0.5f * z * (1.0f + erff(z * kSqrtHalf));
  }
}

// One thread per pack of kPackSize consecutive elements of a row. The [rows, cols / kPackSize]
// grid of packs is flattened so that short rows (small cols) still fill whole warps; the loop is
// grid-stride because the launcher caps the grid.
template <typename T, bool kTanh, int kPackSize>
__global__ void bias_gelu_kernel(const BiasGeluParams params) {
  using P = Pack<T, kPackSize>;
  const T* __restrict__ x = static_cast<const T*>(params.x);
  const T* __restrict__ bias = static_cast<const T*>(params.bias);
  T* __restrict__ y = static_cast<T*>(params.y);

  const int64_t packs_per_row = params.cols / kPackSize;
  const int64_t num_packs = params.rows * packs_per_row;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < num_packs;
       i += step) {
    const int64_t row = i / packs_per_row;
    const int64_t col = (i - row * packs_per_row) * kPackSize;
    const P xs = *reinterpret_cast<const P*>(x + row * params.x_row_stride + col);
    const P bs = *reinterpret_cast<const P*>(bias + col);
    P ys;
#pragma unroll
    for (int k = 0; k < kPackSize; ++k) {
      ys.v[k] = from_float<T>(gelu<kTanh>(to_float(xs.v[k]) + to_float(bs.v[k])));
    }
    *reinterpret_cast<P*>(y + row * params.y_row_stride + col) = ys;
  }
}

template <typename T, bool kTanh, int kPackSize>
void launch_bias_gelu(const BiasGeluParams& params, cudaStream_t stream) {
  constexpr int kThreads = 256;
  // 2^16 blocks of 256 threads is many waves even on the largest GPUs; beyond that, threads loop.
  constexpr int64_t kMaxBlocks = int64_t{1} << 16;
  const int64_t num_packs = params.rows * (params.cols / kPackSize);
  const int64_t blocks = std::min((num_packs + kThreads - 1) / kThreads, kMaxBlocks);
  bias_gelu_kernel<T, kTanh, kPackSize>
      <<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>(params);
}

inline bool is_aligned(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

}  // namespace detail

template <typename T>
void run_bias_gelu(const BiasGeluParams& params, cudaStream_t stream) {
  using namespace detail;
  if (params.rows == 0 || params.cols == 0) {
    return;  // a zero-block launch is an error, and there is nothing to do
  }
  // Packed access needs every pack to start on a 16-byte boundary: the three base pointers, and
  // every row start, i.e. cols and both row strides in whole packs. Sliced inputs (x[:, 1:]) and
  // odd widths take the one-element path instead of being copied.
  constexpr int kPack = kMaxPackSize<T>;
  constexpr int64_t kPackBytes = kPack * static_cast<int64_t>(sizeof(T));
  const bool packed = params.cols % kPack == 0 && params.x_row_stride % kPack == 0 &&
                      params.y_row_stride % kPack == 0 && is_aligned(params.x, kPackBytes) &&
                      is_aligned(params.bias, kPackBytes) && is_aligned(params.y, kPackBytes);
  BOOL_SWITCH(params.tanh_approximation, kTanh, [&] {
    BOOL_SWITCH(packed, kPacked,
                [&] { launch_bias_gelu<T, kTanh, kPacked ? kMaxPackSize<T> : 1>(params, stream); });
  });
}

}  // namespace attnzoo::kernels
