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
// On sm_90a the score product S = Q K^T runs as one warpgroup MMA (wgmma) per 16 of the head dim
// instead (see wgmma_scores); P V stays on mma.sync, from registers.
//
// The *_CUDA tests of tests/kernels hold it to the float64 reference (tools/device_check.sh runs
// them on a GPU machine; kernels/README.md says what has run).
#include <attnzoo/kernels/common/static_switch.h>
#include <attnzoo/kernels/flash_attn/flash_fwd_params.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace attnzoo::kernels {
namespace detail {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockM = 16 * kWarps;  // query rows per block
constexpr int kBlockN = 64;           // keys per tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int64_t kMaxGridX = 2147483647;          // blocks of a one-dimensional grid
constexpr float kMinBiasedLogit = -1.7014117e38f;  // -FLT_MAX / 2: finite times log2(e)

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

// The logit score * scale + bias in log2 units. The sum is taken in natural units, as float32 math
// takes it, and a finite sum below -FLT_MAX / 2 (a bias of float32's lowest, -3.4e38) is raised
// to that, so that it stays finite in log2 units: a row masked only by such finite values gets
// float32 math's average of the values, not zeros. -inf (an excluded key) stays -inf.
__device__ __forceinline__ float biased_logit_log2(float score, float scale, float bias) {
  const float x = score * scale + bias;
  return (x < kMinBiasedLogit && x != -INFINITY ? kMinBiasedLogit : x) * kLog2e;
}

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

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// sm_90a: S = Q K^T by warpgroup MMA (wgmma, HGMMA in SASS). The block's 4 warps are one
// warpgroup, and its 64 query rows are the M = 64 of wgmma.m64n64k16, so one instruction per 16
// of the head dim computes the whole 64 x 64 tile of scores from shared memory; its f32
// accumulator fragment is, thread for thread, the m16n8 fragment the mma.sync path produces
// (warp w holds rows 16w + g and 16w + g + 8, columns 8j + 2t and 8j + 2t + 1: CUTLASS's
// CLayout_64xN), so everything after the product is shared by both paths.
//
// Operands in shared memory are in GMMA's K-major layout without swizzle (LayoutType INTERLEAVE):
// 8 x 8 "core matrices" of 128 contiguous bytes (8 rows of 16 bytes), stored [row / 8][e / 8][row
// % 8][e % 8]; the descriptor's leading byte offset (LBO) steps along the head dim from one core
// matrix to the next (128 bytes), its stride byte offset (SBO) from one group of 8 rows to the
// next (kHeadDim * 2 bytes * 8 rows). See cute/atom/mma_traits_sm90_gmma.hpp (make_gmma_desc,
// Major::K: ((8,n),2):((1,SBO),LBO) in 16-byte units).

// Element (r, e) of a [rows, kHeadDim] tile in the core-matrix layout.
template <int kHeadDim>
__device__ __forceinline__ int core_matrix_index(int r, int e) {
  return ((r >> 3) * (kHeadDim >> 3) + (e >> 3)) * 64 + (r & 7) * 8 + (e & 7);
}

template <typename T, int kHeadDim, int kRows>
__device__ __forceinline__ void load_tile_core(T* dst, const T* src, int64_t row_stride,
                                               int64_t valid_rows, int64_t head_dim) {
  const T zero = Mma<T>::from_float(0.0f);
  for (int idx = threadIdx.x; idx < kRows * kHeadDim; idx += kThreads) {
    const int r = idx / kHeadDim, e = idx % kHeadDim;
    dst[core_matrix_index<kHeadDim>(r, e)] =
        (r < valid_rows && e < head_dim) ? src[r * row_stride + e] : zero;
  }
}

// Plain stores become visible to wgmma's reads (the async proxy) only after this fence (and the
// barrier that follows it).
__device__ __forceinline__ void fence_shared_for_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// A GMMA shared-memory descriptor, K-major, no swizzle: start address, LBO and SBO in 16-byte
// units at bits 0, 16 and 32; base offset 0; layout type 0 (INTERLEAVE) in bits 62-63.
__device__ __forceinline__ uint64_t gmma_descriptor(uint32_t smem_address, uint32_t lbo_bytes,
                                                    uint32_t sbo_bytes) {
  return static_cast<uint64_t>((smem_address >> 4) & 0x3FFF) |
         (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32);
}

// Keeps the compiler from moving accesses of the accumulators across the asynchronous MMA.
__device__ __forceinline__ void fence_accumulators(float (&d)[kBlockN / 8][4]) {
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
    for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(d[j][c])::"memory");
  }
}

#define ATTNZOO_WGMMA_M64N64K16(TYPE)                                                             \
  asm volatile(                                                                                   \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                 \
      " "                                                                                         \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "    \
      "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, "  \
      "0;\n}\n"                                                                                   \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), \
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), \
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
        "+f"(d[7][2]), "+f"(d[7][3])                                                              \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate))

template <typename T>
struct Wgmma;
template <>
struct Wgmma<__nv_bfloat16> {
  // d (+)= A (64 x 16, K-major, desc_a) . B (16 x 64, K-major rows of B^T, desc_b); accumulate 0:
  // d = A . B.
  __device__ __forceinline__ static void m64n64k16(float (&d)[8][4], uint64_t desc_a,
                                                   uint64_t desc_b, int accumulate) {
    ATTNZOO_WGMMA_M64N64K16("bf16");
  }
};
template <>
struct Wgmma<__half> {
  __device__ __forceinline__ static void m64n64k16(float (&d)[8][4], uint64_t desc_a,
                                                   uint64_t desc_b, int accumulate) {
    ATTNZOO_WGMMA_M64N64K16("f16");
  }
};
#undef ATTNZOO_WGMMA_M64N64K16

// s = Q K^T for the block's 64 query rows and the tile's 64 keys; both tiles in the core-matrix
// layout. All 128 threads must call it (wgmma is warpgroup-wide).
template <typename T, int kHeadDim>
__device__ __forceinline__ void wgmma_scores(float (&s)[kBlockN / 8][4], const T* q_tile,
                                             const T* k_tile) {
  static_assert(kBlockM == 64 && kBlockN == 64 && kThreads == 128,
                "one warpgroup, one m64n64 tile");
  const auto q_address = static_cast<uint32_t>(__cvta_generic_to_shared(q_tile));
  const auto k_address = static_cast<uint32_t>(__cvta_generic_to_shared(k_tile));
  constexpr uint32_t kLbo = 128;            // the next 8 elements of the head dim
  constexpr uint32_t kSbo = kHeadDim * 16;  // the next 8 rows: kHeadDim / 8 core matrices
  fence_accumulators(s);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int kk = 0; kk < kHeadDim; kk += 16) {
    const uint32_t offset = static_cast<uint32_t>(kk / 8) * 128;
    Wgmma<T>::m64n64k16(s, gmma_descriptor(q_address + offset, kLbo, kSbo),
                        gmma_descriptor(k_address + offset, kLbo, kSbo), kk > 0 ? 1 : 0);
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  fence_accumulators(s);
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <typename T, int kHeadDim, bool kHasBias, bool kHasLengths, bool kCausal>
__global__ void __launch_bounds__(kThreads) flash_fwd_kernel(const FlashFwdParams p) {
  static_assert(kHeadDim % 16 == 0, "the head dim is padded to a multiple of 16");
  constexpr int kPitch = kHeadDim + 8;  // shifts each row by 4 banks: fewer conflicts
  constexpr int kDimTiles = kHeadDim / 8;
  constexpr int kKeyTiles = kBlockN / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem);
  T* k_tile = q_tile + kBlockM * kPitch;
  T* v_tile = k_tile + kBlockN * kPitch;

  // The grid is one-dimensional (grid.y would cap B·H at 65535): the query tiles of one
  // (batch, head) are consecutive blocks, which read the same keys and values.
  const int64_t q_tiles = (p.q_len + kBlockM - 1) / kBlockM;
  const int64_t bh = static_cast<int64_t>(blockIdx.x) / q_tiles;
  const int64_t b = bh / p.heads, h = bh % p.heads;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) % q_tiles * kBlockM;
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
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  load_tile_core<T, kHeadDim, kBlockM>(q_tile, q + row0 * p.q_row_stride, p.q_row_stride, L - row0,
                                       p.head_dim);
#else
  load_tile<T, kHeadDim, kPitch, kBlockM>(q_tile, q + row0 * p.q_row_stride, p.q_row_stride,
                                          L - row0, p.head_dim);
#endif

  float o[kDimTiles][4];
#pragma unroll
  for (int d = 0; d < kDimTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // in log2 units
  float row_sum[2] = {0.0f, 0.0f};            // this thread's part of the row's sum
  const int64_t rows[2] = {row0 + warp * 16 + g, row0 + warp * 16 + g + 8};
  const float scale_log2 = p.scale * kLog2e;
  const float* bias =
      kHasBias ? p.bias + b * p.bias_batch_stride + h * p.bias_head_stride : nullptr;

  for (int64_t n0 = 0; n0 < key_end; n0 += kBlockN) {
    __syncthreads();  // the previous tile's readers are done (and the Q tile is written)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    load_tile_core<T, kHeadDim, kBlockN>(k_tile, k + n0 * p.k_row_stride, p.k_row_stride,
                                         valid_keys - n0, p.head_dim);
#else
    load_tile<T, kHeadDim, kPitch, kBlockN>(k_tile, k + n0 * p.k_row_stride, p.k_row_stride,
                                            valid_keys - n0, p.head_dim);
#endif
    load_tile<T, kHeadDim, kPitch, kBlockN>(v_tile, v + n0 * p.v_row_stride, p.v_row_stride,
                                            valid_keys - n0, p.head_dim);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    fence_shared_for_async_proxy();  // the Q and K tiles are read by wgmma
#endif
    __syncthreads();

    // S = Q K^T for the warp's 16 rows and the tile's 64 keys.
    float s[kKeyTiles][4];
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    wgmma_scores<T, kHeadDim>(s, q_tile, k_tile);
#else
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
#endif

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
          if (visible) {
            x = biased_logit_log2(s[j][c], p.scale, bias[rows[r] * p.bias_row_stride + col]);
          }
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

}  // namespace detail

template <typename T, int kHeadDim>
cudaError_t run_flash_fwd(const FlashFwdParams& params, cudaStream_t stream) {
  using namespace detail;
  constexpr int kPitch = kHeadDim + 8;
  const size_t smem = static_cast<size_t>(kBlockM + 2 * kBlockN) * kPitch * sizeof(T);
  const int64_t blocks = (params.q_len + kBlockM - 1) / kBlockM * params.batch * params.heads;
  if (blocks > kMaxGridX) return cudaErrorInvalidConfiguration;
  cudaError_t status = cudaSuccess;
  BOOL_SWITCH(params.bias != nullptr, kHasBias, [&] {
    BOOL_SWITCH(params.key_lengths != nullptr, kHasLengths, [&] {
      BOOL_SWITCH(params.causal, kCausal, [&] {
        auto kernel = flash_fwd_kernel<T, kHeadDim, kHasBias, kHasLengths, kCausal>;
        if (smem > 48 * 1024) {
          status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem));
          if (status != cudaSuccess) return;
        }
        kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(params);
      });
    });
  });
  return status;
}

}  // namespace attnzoo::kernels
