#pragma once
// Tier 2 of the flash attention forward: the sm_80 kernel (mma.sync m16n8k16, bf16 or fp16 in,
// fp32 accumulation) and its launcher. Included only by the flash_fwd_<dtype>_hdim<E>.cu files.
//
// One block of 4 warps takes 64 query rows of one (batch, head), 16 rows per warp, and walks the
// keys in tiles of 64 (FlashAttention-2's loop order): S = Q K^T for the warp's 16 rows stays in
// registers, the online softmax rescales the running output, and P (rounded to the input dtype)
// feeds the second product straight from the registers that held S. Memory is O(L + S) per head:
// no [L, S] matrix is ever written. Tiles of 64 waste little at ViT's N = 197 (4 tiles, 23% padding
// in the last) compared with FlashAttention-3's 128- or 192-wide tiles.
//
// UNVERIFIED: compiled here (no GPU); the *_CUDA tests of tests/kernels hold it to the float64
// reference on the GPU machine (tools/device_check.sh).
#include "kernels/common/static_switch.h"
#include "kernels/flash_attn/flash_fwd_params.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace attnzoo::kernels {
namespace flash_detail {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockM = 16 * kWarps;  // query rows per block
constexpr int kBlockN = 64;           // keys per tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <typename T>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  // d += a (16x16, row-major) · b (16x8, column-major), fp32 accumulators.
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  // Two floats as one register: `lo` in the low half (the lower column or k index).
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  __device__ __forceinline__ static float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ __forceinline__ static __nv_bfloat16 from_float(float v) {
    return __float2bfloat16_rn(v);
  }
};

template <>
struct Mma<__half> {
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  __device__ __forceinline__ static float to_float(__half v) { return __half2float(v); }
  __device__ __forceinline__ static __half from_float(float v) { return __float2half_rn(v); }
};

// Two adjacent 16-bit elements (the first at an even index) as one register.
template <typename T>
__device__ __forceinline__ uint32_t load_pair(const T* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Two 16-bit elements from different rows as one register, `lo` in the low half.
template <typename T>
__device__ __forceinline__ uint32_t join_pair(T lo, T hi) {
  const uint16_t l = *reinterpret_cast<const uint16_t*>(&lo);
  const uint16_t h = *reinterpret_cast<const uint16_t*>(&hi);
  return static_cast<uint32_t>(l) | (static_cast<uint32_t>(h) << 16);
}

// rows x kHeadDim elements of a [rows, E] strided source into shared memory (row pitch kPitch),
// zero beyond `valid_rows` and beyond `head_dim`, so that padding never reaches a product.
template <typename T, int kHeadDim, int kPitch, int kRows>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int64_t row_stride,
                                          int64_t valid_rows, int64_t head_dim) {
  const T zero = Mma<T>::from_float(0.0f);
  for (int idx = threadIdx.x; idx < kRows * kHeadDim; idx += kThreads) {
    const int r = idx / kHeadDim, e = idx % kHeadDim;
    dst[r * kPitch + e] = (r < valid_rows && e < head_dim) ? src[r * row_stride + e] : zero;
  }
}

template <typename T, int kHeadDim, bool kHasBias, bool kHasLengths, bool kCausal>
__global__ void __launch_bounds__(kThreads) flash_fwd_kernel(const FlashFwdParams p) {
  static_assert(kHeadDim % 16 == 0, "the head dim is padded to a multiple of 16");
  constexpr int kPitch = kHeadDim + 8;  // shifts each row by 4 banks: fewer conflicts
  constexpr int kDimTiles = kHeadDim / 8;
  constexpr int kKeyTiles = kBlockN / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem);
  T* k_tile = q_tile + kBlockM * kPitch;
  T* v_tile = k_tile + kBlockN * kPitch;

  const int64_t bh = blockIdx.y;
  const int64_t b = bh / p.heads, h = bh % p.heads;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kBlockM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;  // the mma fragment's row group and column pair
  const int64_t L = p.q_len, S = p.k_len;

  int64_t valid_keys = S;
  if constexpr (kHasLengths) {
    const int64_t n = p.key_lengths[b];
    valid_keys = n < 0 ? 0 : (n < S ? n : S);
  }
  const int64_t offset =
      p.causal_bottom_right ? S - L : 0;  // key j is visible to i if j <= i + offset
  int64_t key_end = valid_keys;
  if constexpr (kCausal) {
    const int64_t last_row = (row0 + kBlockM < L ? row0 + kBlockM : L) - 1;
    const int64_t limit = last_row + offset + 1;
    key_end = limit < key_end ? (limit < 0 ? 0 : limit) : key_end;
  }

  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + h * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + h * p.v_head_stride;
  load_tile<T, kHeadDim, kPitch, kBlockM>(q_tile, q + row0 * p.q_row_stride, p.q_row_stride,
                                          L - row0, p.head_dim);

  float o[kDimTiles][4];
#pragma unroll
  for (int d = 0; d < kDimTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // in log2 units
  float row_sum[2] = {0.0f, 0.0f};            // this thread's part of the row's sum
  const int64_t rows[2] = {row0 + warp * 16 + g, row0 + warp * 16 + g + 8};
  const float scale_log2 = p.scale * kLog2e;
  const T* bias =
      kHasBias ? static_cast<const T*>(p.bias) + b * p.bias_batch_stride + h * p.bias_head_stride
               : nullptr;

  for (int64_t n0 = 0; n0 < key_end; n0 += kBlockN) {
    __syncthreads();  // the previous tile's readers are done (and the Q tile is written)
    load_tile<T, kHeadDim, kPitch, kBlockN>(k_tile, k + n0 * p.k_row_stride, p.k_row_stride,
                                            valid_keys - n0, p.head_dim);
    load_tile<T, kHeadDim, kPitch, kBlockN>(v_tile, v + n0 * p.v_row_stride, p.v_row_stride,
                                            valid_keys - n0, p.head_dim);
    __syncthreads();

    // S = Q K^T for the warp's 16 rows and the tile's 64 keys.
    float s[kKeyTiles][4];
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kHeadDim; kk += 16) {
      const T* q0 = q_tile + (warp * 16 + g) * kPitch + kk + 2 * t;
      const T* q1 = q0 + 8 * kPitch;
      const uint32_t a[4] = {load_pair(q0), load_pair(q1), load_pair(q0 + 8), load_pair(q1 + 8)};
#pragma unroll
      for (int j = 0; j < kKeyTiles; ++j) {
        const T* kr = k_tile + (j * 8 + g) * kPitch + kk + 2 * t;
        const uint32_t bf[2] = {load_pair(kr), load_pair(kr + 8)};
        Mma<T>::run(s[j], a, bf);
      }
    }

    // Scale, bias and masks, in log2 units; the tile's row maxima.
    float tile_max[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c >> 1;
        const int64_t col = n0 + j * 8 + 2 * t + (c & 1);
        float x = s[j][c] * scale_log2;
        bool visible = col < valid_keys && rows[r] < L;
        if constexpr (kCausal) visible = visible && col <= rows[r] + offset;
        if constexpr (kHasBias) {
          if (visible) x += Mma<T>::to_float(bias[rows[r] * p.bias_row_stride + col]) * kLog2e;
        }
        s[j][c] = visible ? x : -INFINITY;
        tile_max[r] = fmaxf(tile_max[r], s[j][c]);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // The four threads of a row group hold the row's columns.
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      // Rescale what was accumulated under the old maximum (nothing, while it is -inf).
      const float alpha = tile_max[r] == -INFINITY ? 1.0f : exp2f(row_max[r] - tile_max[r]);
      row_max[r] = tile_max[r];
      row_sum[r] *= alpha;
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        o[d][2 * r] *= alpha;
        o[d][2 * r + 1] *= alpha;
      }
    }
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c >> 1;
        const float pr = row_max[r] == -INFINITY ? 0.0f : exp2f(s[j][c] - row_max[r]);
        s[j][c] = pr;
        row_sum[r] += pr;
      }
    }

    // O += P V: the accumulators of S are, pairwise, the A fragments of P.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t a[4] = {Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]),
                             Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]),
                             Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        const T* v0 = v_tile + (kk * 16 + 2 * t) * kPitch + d * 8 + g;
        const uint32_t bf[2] = {join_pair(v0[0], v0[kPitch]),
                                join_pair(v0[8 * kPitch], v0[9 * kPitch])};
        Mma<T>::run(o[d], a, bf);
      }
    }
  }

  // Normalise and write: out [B, L, H, E], lse [B, H, L].
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (rows[r] >= L) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    T* dst = out + ((b * L + rows[r]) * p.heads + h) * p.head_dim;
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
      const int64_t e = d * 8 + 2 * t;
      if (e < p.head_dim) dst[e] = Mma<T>::from_float(o[d][2 * r] * inv);
      if (e + 1 < p.head_dim) dst[e + 1] = Mma<T>::from_float(o[d][2 * r + 1] * inv);
    }
    if (t == 0) {
      p.lse[(b * p.heads + h) * L + rows[r]] =
          sum > 0.0f ? (row_max[r] + log2f(sum)) * kLn2 : -INFINITY;
    }
  }
}

}  // namespace flash_detail

template <typename T, int kHeadDim>
void run_flash_fwd(const FlashFwdParams& params, cudaStream_t stream) {
  using namespace flash_detail;
  constexpr int kPitch = kHeadDim + 8;
  const size_t smem = static_cast<size_t>(kBlockM + 2 * kBlockN) * kPitch * sizeof(T);
  const dim3 grid(static_cast<unsigned>((params.q_len + kBlockM - 1) / kBlockM),
                  static_cast<unsigned>(params.batch * params.heads));
  BOOL_SWITCH(params.bias != nullptr, kHasBias, [&] {
    BOOL_SWITCH(params.key_lengths != nullptr, kHasLengths, [&] {
      BOOL_SWITCH(params.causal, kCausal, [&] {
        auto kernel = flash_fwd_kernel<T, kHeadDim, kHasBias, kHasLengths, kCausal>;
        if (smem > 48 * 1024) {
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem));
        }
        kernel<<<grid, kThreads, smem, stream>>>(params);
      });
    });
  });
}

}  // namespace attnzoo::kernels
