#pragma once
// Tier 2 of the fused residual add + LayerNorm: the kernel template and its launcher. Included
// only by the per-dtype add_layer_norm_{fp32,fp16,bf16}.cu files, which instantiate
// run_add_layer_norm<T>.
#include <attnzoo/kernels/add_layer_norm/add_layer_norm_params.h>
#include <attnzoo/kernels/common/static_switch.h>
#include <attnzoo/kernels/common/elementwise.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

namespace attnzoo::kernels {
namespace detail {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;  // one row per warp
constexpr int kThreads = kWarpSize * kWarpsPerBlock;

// Rows of up to kWarpSize * kCachedPerLane elements are held in registers between the three passes
// over the row (sum, variance, normalisation), so x and residual are read once. Longer rows are
// read again in each pass (mostly from L2: a warp's row is what it just read).
constexpr int kCachedPerLane = 32;
constexpr int64_t kMaxCachedCols = int64_t{kWarpSize} * kCachedPerLane;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// One warp per row, lanes striding over the row's packs of kPackSize elements; the loop over rows
// is grid-stride because the launcher caps the grid. The row's loop condition is the same for the
// 32 lanes of a warp, so the full-mask shuffles see every lane. Statistics by two passes in fp32
// (the mean, then the squared deviations from it), accurate even when |mean| >> std.
template <typename T, int kPackSize, bool kCached, bool kHasWeight, bool kHasBias>
__global__ void __launch_bounds__(kThreads) add_layer_norm_kernel(const AddLayerNormParams params) {
  using P = Pack<T, kPackSize>;
  // With kCached, lane l holds packs l, l + 32, ... of its row; otherwise one pack of scratch.
  constexpr int kSlots = kCached ? kCachedPerLane / kPackSize : 1;
  const T* __restrict__ x = static_cast<const T*>(params.x);
  const T* __restrict__ residual = static_cast<const T*>(params.residual);
  const T* __restrict__ weight = static_cast<const T*>(params.weight);
  const T* __restrict__ bias = static_cast<const T*>(params.bias);
  T* __restrict__ sum = static_cast<T*>(params.sum);
  T* __restrict__ normed = static_cast<T*>(params.normed);

  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int64_t packs_per_row = params.cols / kPackSize;
  const float inv_cols = 1.0f / static_cast<float>(params.cols);
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;

  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
       row < params.rows; row += row_step) {
    const T* x_row = x + row * params.x_row_stride;
    const T* residual_row = residual + row * params.residual_row_stride;
    T* sum_row = sum + row * params.cols;
    T* normed_row = normed + row * params.cols;

    float s[kSlots][kPackSize];
    // s[slot] = x + residual of one pack, rounded to T (the `sum` output) and widened again.
    const auto load_sum = [&](int slot, int64_t pack) {
      const P xs = *reinterpret_cast<const P*>(x_row + pack * kPackSize);
      const P rs = *reinterpret_cast<const P*>(residual_row + pack * kPackSize);
#pragma unroll
      for (int k = 0; k < kPackSize; ++k) {
        s[slot][k] = to_float(from_float<T>(to_float(xs.v[k]) + to_float(rs.v[k])));
      }
    };
    // f(slot, pack) for each pack of this lane; the slots are compile-time indices when cached.
    const auto for_each_pack = [&](const auto& f) {
      if constexpr (kCached) {
#pragma unroll
        for (int slot = 0; slot < kSlots; ++slot) {
          const int64_t pack = lane + int64_t{kWarpSize} * slot;
          if (pack < packs_per_row) {
            f(slot, pack);
          }
        }
      } else {
        for (int64_t pack = lane; pack < packs_per_row; pack += kWarpSize) {
          f(0, pack);
        }
      }
    };

    // Pass 1: the sum, written out, and its row total.
    float total = 0.0f;
    for_each_pack([&](int slot, int64_t pack) {
      load_sum(slot, pack);
      P out;
#pragma unroll
      for (int k = 0; k < kPackSize; ++k) {
        out.v[k] = from_float<T>(s[slot][k]);  // exact: s is already a T value
        total += s[slot][k];
      }
      *reinterpret_cast<P*>(sum_row + pack * kPackSize) = out;
    });
    const float rough_mean = warp_sum(total) * inv_cols;

    // Pass 2: deviations from that mean, their sum and their sum of squares. The sum corrects the
    // mean for pass 1's rounding, which grows with |mean| rather than with the spread: with
    // d = s - rough_mean, mean = rough_mean + sum(d) / N and the biased variance is
    // (sum(d^2) - sum(d)^2 / N) / N (the corrected two-pass algorithm; Chan, Golub and LeVeque,
    // "Algorithms for computing the sample variance", 1983).
    float deviations = 0.0f;
    float squares = 0.0f;
    for_each_pack([&](int slot, int64_t pack) {
      if constexpr (!kCached) {
        load_sum(slot, pack);
      }
#pragma unroll
      for (int k = 0; k < kPackSize; ++k) {
        const float d = s[slot][k] - rough_mean;
        deviations += d;
        squares += d * d;
      }
    });
    const float deviation = warp_sum(deviations) * inv_cols;
    const float mean = rough_mean + deviation;
    const float variance = fmaxf(warp_sum(squares) * inv_cols - deviation * deviation, 0.0f);
    // 1 / sqrtf (both correctly rounded without fast math) rather than rsqrtf (2 ulp).
    const float rstd = 1.0f / sqrtf(variance + params.eps);

    // Pass 3: normalise, scale and shift.
    for_each_pack([&](int slot, int64_t pack) {
      if constexpr (!kCached) {
        load_sum(slot, pack);
      }
      [[maybe_unused]] const P w =
          kHasWeight ? *reinterpret_cast<const P*>(weight + pack * kPackSize) : P{};
      [[maybe_unused]] const P b =
          kHasBias ? *reinterpret_cast<const P*>(bias + pack * kPackSize) : P{};
      P out;
#pragma unroll
      for (int k = 0; k < kPackSize; ++k) {
        float y = (s[slot][k] - mean) * rstd;
        if constexpr (kHasWeight) {
          y *= to_float(w.v[k]);
        }
        if constexpr (kHasBias) {
          y += to_float(b.v[k]);
        }
        out.v[k] = from_float<T>(y);
      }
      *reinterpret_cast<P*>(normed_row + pack * kPackSize) = out;
    });

    if (lane == 0) {
      params.mean[row] = mean;
      params.rstd[row] = rstd;
    }
  }
}

template <typename T, int kPackSize, bool kCached, bool kHasWeight, bool kHasBias>
void launch_add_layer_norm(const AddLayerNormParams& params, cudaStream_t stream) {
  // 2^16 blocks of 4 rows is many waves even on the largest GPUs; beyond that, warps loop.
  constexpr int64_t kMaxBlocks = int64_t{1} << 16;
  const int64_t blocks = std::min((params.rows + kWarpsPerBlock - 1) / kWarpsPerBlock, kMaxBlocks);
  add_layer_norm_kernel<T, kPackSize, kCached, kHasWeight, kHasBias>
      <<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>(params);
}

inline bool is_aligned(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

static_assert(kAddLayerNormBwdWarpsPerBlock == kWarpsPerBlock);
static_assert(kAddLayerNormBwdMaxCols == kMaxCachedCols);

// The backward: one warp per row, grid-stride over rows, lane l owning packs l, l + 32, ... of
// every row it visits, so that its share of the weight and bias gradients (the column sums over
// rows) stays in registers until the warp writes it out as one row of the partials. Two passes
// over each row: the row sums mean(g) and mean(g * xhat), then d_x. The second pass reads sum and
// d_normed again (the warp's own row, just read: from L1 or L2) rather than holding them.
template <typename T, int kPackSize, bool kHasWeight, bool kHasDSum>
__global__ void __launch_bounds__(kThreads)
    add_layer_norm_bwd_kernel(const AddLayerNormBwdParams params) {
  using P = Pack<T, kPackSize>;
  constexpr int kSlots = kCachedPerLane / kPackSize;
  const T* __restrict__ d_sum = static_cast<const T*>(params.d_sum);
  const T* __restrict__ d_normed = static_cast<const T*>(params.d_normed);
  const T* __restrict__ sum = static_cast<const T*>(params.sum);
  const T* __restrict__ weight = static_cast<const T*>(params.weight);
  T* __restrict__ d_x = static_cast<T*>(params.d_x);

  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int64_t packs_per_row = params.cols / kPackSize;
  const float inv_cols = 1.0f / static_cast<float>(params.cols);

  float d_weight[kSlots][kPackSize];
  float d_bias[kSlots][kPackSize];
#pragma unroll
  for (int slot = 0; slot < kSlots; ++slot) {
#pragma unroll
    for (int k = 0; k < kPackSize; ++k) {
      d_weight[slot][k] = 0.0f;
      d_bias[slot][k] = 0.0f;
    }
  }

  for (int64_t row = warp; row < params.rows; row += params.num_warps) {
    const int64_t offset = row * params.cols;
    const float mean = params.mean[row];
    const float rstd = params.rstd[row];

    // Pass 1: the row sums of g = d_normed * weight and of g * xhat; the column partials.
    float sum_g = 0.0f;
    float sum_g_xhat = 0.0f;
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
      const int64_t pack = lane + int64_t{kWarpSize} * slot;
      if (pack < packs_per_row) {
        const P ss = *reinterpret_cast<const P*>(sum + offset + pack * kPackSize);
        const P dn = *reinterpret_cast<const P*>(d_normed + offset + pack * kPackSize);
        [[maybe_unused]] const P w =
            kHasWeight ? *reinterpret_cast<const P*>(weight + pack * kPackSize) : P{};
#pragma unroll
        for (int k = 0; k < kPackSize; ++k) {
          const float xhat = (to_float(ss.v[k]) - mean) * rstd;
          const float dy = to_float(dn.v[k]);
          float g = dy;
          if constexpr (kHasWeight) {
            g *= to_float(w.v[k]);
          }
          sum_g += g;
          sum_g_xhat += g * xhat;
          d_weight[slot][k] += dy * xhat;
          d_bias[slot][k] += dy;
        }
      }
    }
    const float mean_g = warp_sum(sum_g) * inv_cols;
    const float mean_g_xhat = warp_sum(sum_g_xhat) * inv_cols;

    // Pass 2: d_x = d_sum + rstd * (g - mean(g) - xhat * mean(g * xhat)).
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
      const int64_t pack = lane + int64_t{kWarpSize} * slot;
      if (pack < packs_per_row) {
        const P ss = *reinterpret_cast<const P*>(sum + offset + pack * kPackSize);
        const P dn = *reinterpret_cast<const P*>(d_normed + offset + pack * kPackSize);
        [[maybe_unused]] const P w =
            kHasWeight ? *reinterpret_cast<const P*>(weight + pack * kPackSize) : P{};
        [[maybe_unused]] const P ds =
            kHasDSum ? *reinterpret_cast<const P*>(d_sum + offset + pack * kPackSize) : P{};
        P out;
#pragma unroll
        for (int k = 0; k < kPackSize; ++k) {
          const float xhat = (to_float(ss.v[k]) - mean) * rstd;
          float g = to_float(dn.v[k]);
          if constexpr (kHasWeight) {
            g *= to_float(w.v[k]);
          }
          float dx = rstd * (g - mean_g - xhat * mean_g_xhat);
          if constexpr (kHasDSum) {
            dx += to_float(ds.v[k]);
          }
          out.v[k] = from_float<T>(dx);
        }
        *reinterpret_cast<P*>(d_x + offset + pack * kPackSize) = out;
      }
    }
  }

  // This warp's row of the partials (zeros for a warp that had no row).
  float* const weight_row =
      params.d_weight_partial == nullptr ? nullptr : params.d_weight_partial + warp * params.cols;
  float* const bias_row =
      params.d_bias_partial == nullptr ? nullptr : params.d_bias_partial + warp * params.cols;
#pragma unroll
  for (int slot = 0; slot < kSlots; ++slot) {
    const int64_t pack = lane + int64_t{kWarpSize} * slot;
    if (pack < packs_per_row) {
#pragma unroll
      for (int k = 0; k < kPackSize; ++k) {
        if (weight_row != nullptr) {
          weight_row[pack * kPackSize + k] = d_weight[slot][k];
        }
        if (bias_row != nullptr) {
          bias_row[pack * kPackSize + k] = d_bias[slot][k];
        }
      }
    }
  }
}

template <typename T, int kPackSize, bool kHasWeight, bool kHasDSum>
void launch_add_layer_norm_bwd(const AddLayerNormBwdParams& params, cudaStream_t stream) {
  const int64_t blocks = params.num_warps / kWarpsPerBlock;
  add_layer_norm_bwd_kernel<T, kPackSize, kHasWeight, kHasDSum>
      <<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>(params);
}

}  // namespace detail

template <typename T>
void run_add_layer_norm(const AddLayerNormParams& params, cudaStream_t stream) {
  using namespace detail;
  if (params.rows == 0 || params.cols == 0) {
    return;  // a zero-block launch is an error, and there is nothing to do
  }
  // Packed access needs every pack to start on a 16-byte boundary: all base pointers, and every
  // row start, i.e. cols and both input row strides in whole packs. Sliced inputs and odd widths
  // take the one-element path instead of being copied.
  constexpr int kPack = kMaxPackSize<T>;
  constexpr int64_t kPackBytes = kPack * static_cast<int64_t>(sizeof(T));
  const bool packed =
      params.cols % kPack == 0 && params.x_row_stride % kPack == 0 &&
      params.residual_row_stride % kPack == 0 && is_aligned(params.x, kPackBytes) &&
      is_aligned(params.residual, kPackBytes) && is_aligned(params.weight, kPackBytes) &&
      is_aligned(params.bias, kPackBytes) && is_aligned(params.sum, kPackBytes) &&
      is_aligned(params.normed, kPackBytes);  // nullptr (no weight, no bias) is aligned
  const bool cached = params.cols <= kMaxCachedCols;
  BOOL_SWITCH(params.weight != nullptr, kHasWeight, [&] {
    BOOL_SWITCH(params.bias != nullptr, kHasBias, [&] {
      BOOL_SWITCH(cached, kCached, [&] {
        BOOL_SWITCH(packed, kPacked, [&] {
          launch_add_layer_norm<T, kPacked ? kPack : 1, kCached, kHasWeight, kHasBias>(params,
                                                                                       stream);
        });
      });
    });
  });
}

template <typename T>
void run_add_layer_norm_backward(const AddLayerNormBwdParams& params, cudaStream_t stream) {
  using namespace detail;
  if (params.rows == 0 || params.cols == 0 || params.num_warps <= 0) {
    return;  // the caller fills the partials of an empty input with zeros
  }
  constexpr int kPack = kMaxPackSize<T>;
  constexpr int64_t kPackBytes = kPack * static_cast<int64_t>(sizeof(T));
  const bool packed = params.cols % kPack == 0 && is_aligned(params.d_sum, kPackBytes) &&
                      is_aligned(params.d_normed, kPackBytes) &&
                      is_aligned(params.sum, kPackBytes) && is_aligned(params.weight, kPackBytes) &&
                      is_aligned(params.d_x, kPackBytes);
  BOOL_SWITCH(params.weight != nullptr, kHasWeight, [&] {
    BOOL_SWITCH(params.d_sum != nullptr, kHasDSum, [&] {
      BOOL_SWITCH(packed, kPacked, [&] {
        launch_add_layer_norm_bwd<T, kPacked ? kPack : 1, kHasWeight, kHasDSum>(params, stream);
      });
    });
  });
}

}  // namespace attnzoo::kernels
