#pragma once
// Tier 2 of the flash attention backward: the sm_80 kernels (mma.sync m16n8k16, bf16 or fp16 in,
// fp32 accumulation) and their launcher. Included only by the flash_bwd_<dtype>_hdim<E>.cu files.
// It reuses the forward's mma wrapper and fragment helpers (flash_fwd_kernel.cuh).
//
// FlashAttention-2's loop order: one block of 4 warps owns a tile of 64 keys of one (batch, head),
// 16 keys per warp, keeps dK and dV of those keys in registers and walks the query tiles of 64
// rows. Per query tile, each warp computes its part of the transposed products, keys as the rows
// of the mma (so that the accumulators of S^T are the A fragments of P^T, as S's are of P in the
// forward):
//   S^T  = K Q^T            (A: K rows from shared memory, B: Q rows)
//   P^T  = exp(scale S^T + bias^T - lse)   masked as the forward, 0 where lse = -inf
//   dV  += P^T dO           (A: P^T from the accumulators, B: dO columns)
//   dP^T = V dO^T           (A: V rows, B: dO rows)
//   dS^T = P^T (dP^T - D)   D = rowsum(dO * O), from the preprocess kernel
//   dK  += dS^T Q           (A: dS^T from the accumulators, B: Q columns); times scale at the end
// then dS (rounded to T) goes through shared memory, transposed, and each warp takes 16 query rows
// of dQ += dS K (A: dS rows, B: K columns), added to an fp32 buffer with atomicAdd (several key
// tiles add to the same rows); a last kernel converts it to T, times scale. d(bias) = dS, float32
// like the bias: stored directly when the bias has one element per (b, h, i, j) (each is computed
// exactly once), else added with atomicAdd (the bias is broadcast over the batch or the heads).
//
// Out-of-range data never reaches a product: the tiles are zero-filled past L, past the key length
// (values there may be NaN) and past E, and P is 0 (not exp of anything) where the key is not
// visible. Keys of the tile that no query sees get dK = dV = 0, still written.
//
// The *_CUDA tests of tests/kernels hold it to the float64 reference (tools/device_check.sh runs
// them on a GPU machine; kernels/README.md says what has run).
#include <attnzoo/kernels/common/static_switch.h>
#include <attnzoo/kernels/flash_attn/flash_bwd_params.h>
#include <attnzoo/kernels/flash_attn/flash_fwd_kernel.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace attnzoo::kernels {
namespace detail {

constexpr int kBwdBlockM = 64;  // query rows per tile of the loop
constexpr int kBwdBlockN = 64;  // keys per block
static_assert(kBwdBlockN == 16 * kWarps, "each warp owns 16 keys of the block");
static_assert(kBwdBlockM == 16 * kWarps, "each warp owns 16 query rows of dQ");

// D[b, h, i] = sum_e d_out[b, i, h, e] out[b, i, h, e] (fp32), one warp per row, rows in [B, H, L]
// order, grid-stride.
template <typename T>
__global__ void __launch_bounds__(kThreads) flash_bwd_rowsum_kernel(const FlashBwdParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t rows = p.batch * p.heads * p.q_len;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps;
  // The whole warp takes the same rows.
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp; row < rows; row += step) {
    const int64_t i = row % p.q_len, bh = row / p.q_len;
    const int64_t b = bh / p.heads, h = bh % p.heads;
    const T* o = static_cast<const T*>(p.out) + b * p.out_batch_stride + i * p.out_row_stride +
                 h * p.out_head_stride;
    const T* d = static_cast<const T*>(p.d_out) + b * p.do_batch_stride + i * p.do_row_stride +
                 h * p.do_head_stride;
    float sum = 0.0f;
    for (int64_t e = lane; e < p.head_dim; e += 32) {
      sum += Mma<T>::to_float(o[e]) * Mma<T>::to_float(d[e]);
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    if (lane == 0) p.d_rowsum[row] = sum;
  }
}

// dst[i] = T(src[i] * scale), grid-stride.
template <typename T>
__global__ void __launch_bounds__(256)
    flash_bwd_convert_kernel(T* dst, const float* src, int64_t n, float scale) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += step) {
    dst[idx] = Mma<T>::from_float(src[idx] * scale);
  }
}

template <typename T, int kHeadDim, bool kHasBias, bool kBiasGrad, bool kHasLengths, bool kCausal>
__global__ void __launch_bounds__(kThreads) flash_bwd_kernel(const FlashBwdParams p) {
  static_assert(kHeadDim % 16 == 0, "the head dim is padded to a multiple of 16");
  static_assert(!kBiasGrad || kHasBias, "d(bias) needs a bias");
  constexpr int kPitch = kHeadDim + 8;      // as the forward: rows shifted by 4 banks
  constexpr int kDsPitch = kBwdBlockN + 8;  // ds_tile: [query][key]
  constexpr int kDimTiles = kHeadDim / 8;
  constexpr int kQueryTiles = kBwdBlockM / 8;  // n-tiles of S^T
  constexpr int kDqDimTiles = kDimTiles > 8 ? kDimTiles / 2 : kDimTiles;
  extern __shared__ __align__(128) unsigned char smem[];
  float* lse_tile = reinterpret_cast<float*>(smem);  // [kBwdBlockM], log2 units
  float* dsum_tile = lse_tile + kBwdBlockM;          // [kBwdBlockM], D
  T* k_tile = reinterpret_cast<T*>(dsum_tile + kBwdBlockM);
  T* v_tile = k_tile + kBwdBlockN * kPitch;
  T* q_tile = v_tile + kBwdBlockN * kPitch;
  T* do_tile = q_tile + kBwdBlockM * kPitch;
  T* ds_tile = do_tile + kBwdBlockM * kPitch;  // [kBwdBlockM][kDsPitch]

  // One-dimensional grid, as the forward's: the key tiles of one (batch, head) are consecutive.
  const int64_t k_tiles = (p.k_len + kBwdBlockN - 1) / kBwdBlockN;
  const int64_t bh = static_cast<int64_t>(blockIdx.x) / k_tiles;
  const int64_t b = bh / p.heads, h = bh % p.heads;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) % k_tiles * kBwdBlockN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;  // the mma fragment's row group and column pair
  const int64_t L = p.q_len, S = p.k_len, H = p.heads, E = p.head_dim;

  int64_t valid_keys = S;
  if constexpr (kHasLengths) {
    const int64_t n = p.key_lengths[b];
    valid_keys = n < 0 ? 0 : (n < S ? n : S);
  }
  const int64_t offset =
      p.causal_bottom_right ? S - L : 0;  // key j is visible to i if j <= i + offset
  // The query tiles that can see a key of this tile: none past the key length; with causal, the
  // rows i >= n0 - offset.
  int64_t m_begin = 0;
  const int64_t m_end = n0 < valid_keys ? L : 0;
  if constexpr (kCausal) {
    const int64_t first = n0 - offset;
    if (first > 0) m_begin = first / kBwdBlockM * kBwdBlockM;
  }

  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + h * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + h * p.v_head_stride;
  const T* d_out = static_cast<const T*>(p.d_out) + b * p.do_batch_stride + h * p.do_head_stride;
  const float* lse = p.lse + (b * H + h) * L;
  const float* dsum = p.d_rowsum + (b * H + h) * L;
  const float* bias =
      kHasBias ? p.bias + b * p.bias_batch_stride + h * p.bias_head_stride : nullptr;
  float* d_bias =
      kBiasGrad ? p.d_bias + b * p.d_bias_batch_stride + h * p.d_bias_head_stride : nullptr;

  if (m_begin < m_end) {
    load_tile<T, kHeadDim, kPitch, kBwdBlockN>(k_tile, k + n0 * p.k_row_stride, p.k_row_stride,
                                               valid_keys - n0, E);
    load_tile<T, kHeadDim, kPitch, kBwdBlockN>(v_tile, v + n0 * p.v_row_stride, p.v_row_stride,
                                               valid_keys - n0, E);
  }

  // The warp's keys are the rows of its fragments: g and g + 8 of its 16.
  const int64_t keys[2] = {n0 + warp * 16 + g, n0 + warp * 16 + g + 8};
  float dk[kDimTiles][4], dv[kDimTiles][4];
#pragma unroll
  for (int d = 0; d < kDimTiles; ++d) {
#pragma unroll
    for (int c = 0; c < 4; ++c) dk[d][c] = dv[d][c] = 0.0f;
  }
  const float scale_log2 = p.scale * kLog2e;

  for (int64_t m0 = m_begin; m0 < m_end; m0 += kBwdBlockM) {
    __syncthreads();  // the previous tile's readers are done (and K, V are written)
    load_tile<T, kHeadDim, kPitch, kBwdBlockM>(q_tile, q + m0 * p.q_row_stride, p.q_row_stride,
                                               L - m0, E);
    load_tile<T, kHeadDim, kPitch, kBwdBlockM>(do_tile, d_out + m0 * p.do_row_stride,
                                               p.do_row_stride, L - m0, E);
    for (int r = threadIdx.x; r < kBwdBlockM; r += kThreads) {
      const bool in_range = m0 + r < L;
      lse_tile[r] = in_range ? lse[m0 + r] * kLog2e : -INFINITY;
      dsum_tile[r] = in_range ? dsum[m0 + r] : 0.0f;
    }
    __syncthreads();

    // S^T = K Q^T: the warp's 16 keys (rows) by the tile's 64 queries (columns).
    float s[kQueryTiles][4];
#pragma unroll
    for (int j = 0; j < kQueryTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kHeadDim; kk += 16) {
      const T* k0 = k_tile + (warp * 16 + g) * kPitch + kk + 2 * t;
      const T* k1 = k0 + 8 * kPitch;
      const uint32_t a[4] = {load_pair(k0), load_pair(k1), load_pair(k0 + 8), load_pair(k1 + 8)};
#pragma unroll
      for (int j = 0; j < kQueryTiles; ++j) {
        const T* qr = q_tile + (j * 8 + g) * kPitch + kk + 2 * t;
        const uint32_t bf[2] = {load_pair(qr), load_pair(qr + 8)};
        Mma<T>::run(s[j], a, bf);
      }
    }

    // P^T, with the forward's masks. Element c of n-tile j: key keys[c >> 1], query
    // m0 + j * 8 + 2 t + (c & 1).
#pragma unroll
    for (int j = 0; j < kQueryTiles; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int qi = j * 8 + 2 * t + (c & 1);
        const int64_t query = m0 + qi, key = keys[c >> 1];
        bool visible = key < valid_keys && query < L;
        if constexpr (kCausal) visible = visible && key <= query + offset;
        const float row_lse = lse_tile[qi];
        float pr = 0.0f;
        if (visible && row_lse != -INFINITY) {
          float x = s[j][c] * scale_log2;
          if constexpr (kHasBias) {
            x = biased_logit_log2(s[j][c], p.scale, bias[query * p.bias_row_stride + key]);
          }
          pr = exp2f(x - row_lse);
        }
        s[j][c] = pr;
      }
    }

    // dV += P^T dO: the accumulators of S^T are, pairwise, the A fragments of P^T (k = query).
#pragma unroll
    for (int kk = 0; kk < kBwdBlockM / 16; ++kk) {
      const uint32_t a[4] = {Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]),
                             Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]),
                             Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        const T* d0 = do_tile + (kk * 16 + 2 * t) * kPitch + d * 8 + g;
        const uint32_t bf[2] = {join_pair(d0[0], d0[kPitch]),
                                join_pair(d0[8 * kPitch], d0[9 * kPitch])};
        Mma<T>::run(dv[d], a, bf);
      }
    }

    // dP^T = V dO^T, in the layout of S^T.
    float dp[kQueryTiles][4];
#pragma unroll
    for (int j = 0; j < kQueryTiles; ++j) dp[j][0] = dp[j][1] = dp[j][2] = dp[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kHeadDim; kk += 16) {
      const T* v0 = v_tile + (warp * 16 + g) * kPitch + kk + 2 * t;
      const T* v1 = v0 + 8 * kPitch;
      const uint32_t a[4] = {load_pair(v0), load_pair(v1), load_pair(v0 + 8), load_pair(v1 + 8)};
#pragma unroll
      for (int j = 0; j < kQueryTiles; ++j) {
        const T* dr = do_tile + (j * 8 + g) * kPitch + kk + 2 * t;
        const uint32_t bf[2] = {load_pair(dr), load_pair(dr + 8)};
        Mma<T>::run(dp[j], a, bf);
      }
    }

    // dS^T = P^T (dP^T - D), in place of P^T; d(bias) = dS; dS to shared memory, transposed.
#pragma unroll
    for (int j = 0; j < kQueryTiles; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int qi = j * 8 + 2 * t + (c & 1);
        const int ki = warp * 16 + g + 8 * (c >> 1);
        const float ds = s[j][c] * (dp[j][c] - dsum_tile[qi]);
        s[j][c] = ds;
        ds_tile[qi * kDsPitch + ki] = Mma<T>::from_float(ds);
        if constexpr (kBiasGrad) {
          const int64_t query = m0 + qi, key = keys[c >> 1];
          if (query < L && key < S) {
            const int64_t idx = query * p.d_bias_row_stride + key;
            if (!p.d_bias_broadcast) {
              d_bias[idx] = ds;  // this block alone computes (b, h, i, j)
            } else if (ds != 0.0f) {
              atomicAdd(d_bias + idx, ds);
            }
          }
        }
      }
    }

    // dK += dS^T Q (times scale at the end): A fragments from the accumulators again (k = query).
#pragma unroll
    for (int kk = 0; kk < kBwdBlockM / 16; ++kk) {
      const uint32_t a[4] = {Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]),
                             Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]),
                             Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        const T* q0 = q_tile + (kk * 16 + 2 * t) * kPitch + d * 8 + g;
        const uint32_t bf[2] = {join_pair(q0[0], q0[kPitch]),
                                join_pair(q0[8 * kPitch], q0[9 * kPitch])};
        Mma<T>::run(dk[d], a, bf);
      }
    }
    __syncthreads();  // every warp's dS is in ds_tile

    // dQ (unscaled) += dS K for the warp's 16 query rows over the tile's 64 keys: A = dS rows from
    // ds_tile (k = key), B = K columns. In two halves of the head dim above 64, so that the dQ
    // accumulators and dK, dV fit in the registers together.
#pragma unroll
    for (int d0 = 0; d0 < kDimTiles; d0 += kDqDimTiles) {
      float dq[kDqDimTiles][4];
#pragma unroll
      for (int d = 0; d < kDqDimTiles; ++d) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kBwdBlockN / 16; ++kk) {
        const T* s0 = ds_tile + (warp * 16 + g) * kDsPitch + kk * 16 + 2 * t;
        const T* s1 = s0 + 8 * kDsPitch;
        const uint32_t a[4] = {load_pair(s0), load_pair(s1), load_pair(s0 + 8), load_pair(s1 + 8)};
#pragma unroll
        for (int d = 0; d < kDqDimTiles; ++d) {
          const T* k0 = k_tile + (kk * 16 + 2 * t) * kPitch + (d0 + d) * 8 + g;
          const uint32_t bf[2] = {join_pair(k0[0], k0[kPitch]),
                                  join_pair(k0[8 * kPitch], k0[9 * kPitch])};
          Mma<T>::run(dq[d], a, bf);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t query = m0 + warp * 16 + g + 8 * r;
        if (query >= L) continue;
        float* dst = p.dq_accum + ((b * L + query) * H + h) * E;
#pragma unroll
        for (int d = 0; d < kDqDimTiles; ++d) {
          const int64_t e = (d0 + d) * 8 + 2 * t;
          if (e < E) atomicAdd(dst + e, dq[d][2 * r]);
          if (e + 1 < E) atomicAdd(dst + e + 1, dq[d][2 * r + 1]);
        }
      }
    }
  }

  // dK, dV of the warp's keys: [B, S, H, E]; zeros for the keys no query sees.
  T* dk_out = static_cast<T*>(p.dk);
  T* dv_out = static_cast<T*>(p.dv);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= S) continue;
    const int64_t row = ((b * S + keys[r]) * H + h) * E;
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
      const int64_t e = d * 8 + 2 * t;
      if (e < E) {
        dk_out[row + e] = Mma<T>::from_float(dk[d][2 * r] * p.scale);
        dv_out[row + e] = Mma<T>::from_float(dv[d][2 * r]);
      }
      if (e + 1 < E) {
        dk_out[row + e + 1] = Mma<T>::from_float(dk[d][2 * r + 1] * p.scale);
        dv_out[row + e + 1] = Mma<T>::from_float(dv[d][2 * r + 1]);
      }
    }
  }
}

// Blocks of a grid-stride kernel over n items, per_block a block: at most 65536.
inline unsigned grid_stride_blocks(int64_t n, int64_t per_block) {
  const int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

}  // namespace detail

template <typename T, int kHeadDim>
cudaError_t run_flash_bwd(const FlashBwdParams& params, cudaStream_t stream) {
  using namespace detail;
  const int64_t rows = params.batch * params.heads * params.q_len;
  if (rows == 0 || params.k_len == 0) return cudaSuccess;  // the caller's zeros are the gradients
  const int64_t blocks = (params.k_len + kBwdBlockN - 1) / kBwdBlockN * params.batch * params.heads;
  if (blocks > kMaxGridX) return cudaErrorInvalidConfiguration;
  flash_bwd_rowsum_kernel<T><<<grid_stride_blocks(rows, kWarps), kThreads, 0, stream>>>(params);

  constexpr int kPitch = kHeadDim + 8;
  const size_t smem = 2 * kBwdBlockM * sizeof(float) +
                      static_cast<size_t>(2 * kBwdBlockN + 2 * kBwdBlockM) * kPitch * sizeof(T) +
                      static_cast<size_t>(kBwdBlockM) * (kBwdBlockN + 8) * sizeof(T);
  cudaError_t status = cudaSuccess;
  BOOL_SWITCH(params.bias != nullptr, kHasBias, [&] {
    BOOL_SWITCH(params.d_bias != nullptr, kWantsBiasGrad, [&] {
      BOOL_SWITCH(params.key_lengths != nullptr, kHasLengths, [&] {
        BOOL_SWITCH(params.causal, kCausal, [&] {
          // Without a bias both values of kWantsBiasGrad name the same kernel.
          static constexpr bool kBiasGrad = kHasBias && kWantsBiasGrad;
          auto kernel = flash_bwd_kernel<T, kHeadDim, kHasBias, kBiasGrad, kHasLengths, kCausal>;
          if (smem > 48 * 1024) {
            status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem));
            if (status != cudaSuccess) return;
          }
          kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(params);
        });
      });
    });
  });

  if (status != cudaSuccess) return status;
  const int64_t dq_numel = rows * params.head_dim;
  flash_bwd_convert_kernel<T><<<grid_stride_blocks(dq_numel, 256), 256, 0, stream>>>(
      static_cast<T*>(params.dq), params.dq_accum, dq_numel, params.scale);
  return cudaSuccess;
}

}  // namespace attnzoo::kernels
