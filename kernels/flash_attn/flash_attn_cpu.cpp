// Tier 3 of attnzoo::flash_attention, CPU part: the forward pass for float32 and bfloat16 CPU
// tensors, registered on the CPU dispatch key (the autograd formula and the backward stay the
// LibTorch reference's, flash_attn_op.cpp, which reads this kernel's lse). Other dtypes, and CPUs
// without AVX2 + FMA, take the reference.
//
// FlashAttention's algorithm on the CPU, per tile of kRows queries of one (batch, head):
//   - k and v of each (batch, head) are packed once into float32 scratch: k as groups of W keys
//     with the W values of each dimension contiguous ([S/W][E][W], W = the vector width), v as
//     rows padded to a multiple of W; keys past key_lengths[b] are packed as zeros, so that
//     whatever the padding holds (NaN, inf) cannot leak in through a zero probability. With few
//     (batch, head) pairs for the threads, all are packed first and the tasks are the tiles;
//     with many, a task is a pair, packed into the thread's scratch, where it stays in cache for
//     all of the pair's tiles, and prefetches the next pair's q, k and v rows a slice per tile.
//   - Where the head dim is contiguous, the packing is vector code for AVX-512: float32 k as
//     16 x 16 blocks transposed in registers, bfloat16 k gathered as 32-bit pairs, bfloat16 v as
//     two rows interleaved by one permute; element by element otherwise, and for AVX2.
//   - Per block of up to kKeyBlock keys, a register-blocked product gives the tile's scores
//     (kRows queries x 2W keys held in 2·kRows vector registers, a broadcast of q and two vector
//     loads of k per dimension); the bias and the masks are applied, the online softmax updates
//     each row's running maximum m and sum l and rescales its output, and a second
//     register-blocked product adds p·v (kRows x up to 4W output columns in registers).
//   - out = o / l, lse = m + log(l); a row that sees no key (or only -inf biases) gets zeros and
//     lse = -inf, as the reference gives.
// Keys a row cannot see (key_lengths, causal) are a suffix of the row, so blocks past every row's
// last visible key are skipped, and the masks cost no reads.
//
// Arithmetic in float32 (bfloat16 inputs are widened when packed), exp by a degree-6 polynomial
// after range reduction (relative error about 2e-7, as float32's own). The kernel is written once
// with the compilers' vector extension and compiled twice, for AVX-512 (W = 16) and for AVX2 + FMA
// (W = 8), picked at run time by what the processor supports.
//
// bfloat16 inputs on a processor with AVX512-BF16 take its dot products instead (vdpbf16ps: per
// float32 lane, the sum of the products of two pairs of bfloat16, at twice the rate of float32
// FMAs): k and v are packed as bfloat16 pairs along the product's sum (k as [S/16][E/2][16][2],
// v as [S/2][E_pad][2]), the scores are scaled in float32 after the product (q is not rounded
// again), and the probabilities are rounded to bfloat16 for the value product, as LibTorch's own
// bfloat16 attention does; the softmax, its sums and the output stay float32.
//
// Speed against LibTorch's sdpa (its CPU flash kernel over MKL's products): docs/benchmarks.md.
// The `flash` backend's `auto` takes it for inference in both dtypes on processors with
// AVX512-BF16.
#include <attnzoo/kernels/common/cpu_vector.h>
#include <attnzoo/kernels/cpu_parallel.h>
#include <attnzoo/kernels/flash_attn/flash_attn_op.h>
#include <attnzoo/kernels/ops.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATTNZOO_FLASH_CPU_KERNELS 1
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

// The vector helpers (common/cpu_vector.h and below) are always inlined into the AVX-512 and AVX2
// functions, so no call passes a vector across the boundary between code of two instruction sets,
// which is what -Wpsabi warns of for every helper taking or returning one.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnzoo::kernels {
namespace {

using namespace cpu;  // NOLINT(google-build-using-namespace): the vector helpers

constexpr int kRows = 6;            // queries per tile: the rows of both register blocks
constexpr int64_t kKeyBlock = 256;  // keys per online-softmax step (a multiple of 2W)

// s[r, g·W : g·W + kG·W] = Σ_c q[r, c]·k[j, c] for the keys of packed groups g .. g + kG − 1,
// kR rows. q: kR x e (row stride e), kp: [groups][e][W], s: kR x ld.
template <int W, int kR, int kG>
inline __attribute__((always_inline)) void scores_groups(const float* q, int64_t e, const float* kp,
                                                         int64_t g, float* s, int64_t ld) {
  using F = typename Lanes<W>::F;
  const float* k0 = kp + g * e * W;
  F acc[kR][kG];
  ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
    ATTNZOO_UNROLL for (int t = 0; t < kG; ++t) acc[r][t] = F{};
  }
  for (int64_t c = 0; c < e; ++c) {
    F kv[kG];
    ATTNZOO_UNROLL for (int t = 0; t < kG; ++t) kv[t] = load<W>(k0 + (t * e + c) * W);
    ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
      const F qv = splat<W>(q[r * e + c]);
      ATTNZOO_UNROLL for (int t = 0; t < kG; ++t) acc[r][t] += qv * kv[t];
    }
  }
  ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
    ATTNZOO_UNROLL for (int t = 0; t < kG; ++t) store<W>(s + r * ld + (g + t) * W, acc[r][t]);
  }
}

// The scores of the keys of `groups` packed groups, two groups at a time, kR rows.
template <int W, int kR>
inline __attribute__((always_inline)) void scores_tile(const float* q, int64_t e, const float* kp,
                                                       int64_t groups, float* s, int64_t ld) {
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) scores_groups<W, kR, 2>(q, e, kp, g, s, ld);
  if (g < groups) scores_groups<W, kR, 1>(q, e, kp, g, s, ld);
}

// o[r, c0 : c0 + kV·W] += Σ_j p[r, j]·v[j, c0 : c0 + kV·W] for j < keys, kR rows.
// p: kR x ld, v: keys rows ldv apart, o: kR x ev.
template <int W, int kR, int kV>
inline __attribute__((always_inline)) void values_tile(const float* p, int64_t ld, const float* v,
                                                       int64_t ldv, int64_t ev, int64_t keys,
                                                       float* o, int64_t c0) {
  using F = typename Lanes<W>::F;
  F acc[kR][kV];
  ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
    ATTNZOO_UNROLL for (int t = 0; t < kV; ++t) acc[r][t] = load<W>(o + r * ev + c0 + t * W);
  }
  for (int64_t j = 0; j < keys; ++j) {
    F vv[kV];
    ATTNZOO_UNROLL for (int t = 0; t < kV; ++t) vv[t] = load<W>(v + j * ldv + c0 + t * W);
    ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
      const F pv = splat<W>(p[r * ld + j]);
      ATTNZOO_UNROLL for (int t = 0; t < kV; ++t) acc[r][t] += pv * vv[t];
    }
  }
  ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
    ATTNZOO_UNROLL for (int t = 0; t < kV; ++t) store<W>(o + r * ev + c0 + t * W, acc[r][t]);
  }
}

// The output columns of kR rows in chunks of kChunk vectors (what the registers hold beside the
// loads), the rest in one narrower chunk (E = 36 at W = 16: one pass of 3 vectors, not 3 of 1).
template <int W, int kR>
inline __attribute__((always_inline)) void values_rows(const float* p, int64_t ld, const float* v,
                                                       int64_t ldv, int64_t ev, int64_t keys,
                                                       float* o) {
  constexpr int kChunk = W == 16 ? 4 : 2;
  int64_t c0 = 0;
  for (; c0 + kChunk * W <= ev; c0 += kChunk * W) {
    values_tile<W, kR, kChunk>(p, ld, v, ldv, ev, keys, o, c0);
  }
  switch ((ev - c0) / W) {  // ev is a multiple of W; fewer than kChunk vectors are left
    case 3:
      values_tile<W, kR, 3>(p, ld, v, ldv, ev, keys, o, c0);
      break;
    case 2:
      values_tile<W, kR, 2>(p, ld, v, ldv, ev, keys, o, c0);
      break;
    case 1:
      values_tile<W, kR, 1>(p, ld, v, ldv, ev, keys, o, c0);
      break;
    default:
      break;
  }
}

#ifdef ATTNZOO_FLASH_CPU_KERNELS
// The products of the bfloat16 path, for AVX512-BF16. They are functions of their own, called
// once per tile and key block, because a function that inlines them must itself be compiled for
// AVX512-BF16, and the tile code around them is compiled for AVX-512 and AVX2 alike.
#define ATTNZOO_AVX512_BF16 \
  __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

// s[r, g·16 : g·16 + kG·16] = scale · Σ_c q[r, c]·k[j, c] for the keys of packed groups
// g .. g + kG − 1, kR rows. q: kR x e2 bfloat16 pairs (q[r, 2c], q[r, 2c + 1]) in 32 bits each,
// kp: [groups][e2][16 keys][2], s: kR x ld.
template <int kR, int kG>
ATTNZOO_AVX512_BF16 inline void scores_groups_bf16(const uint32_t* q, int64_t e2,
                                                   const uint16_t* kp, int64_t g, float scale,
                                                   float* s, int64_t ld) {
  const uint16_t* k0 = kp + g * e2 * 32;
  __m512 acc[kR][kG];
  ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
    ATTNZOO_UNROLL for (int t = 0; t < kG; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < e2; ++c) {
    __m512bh kv[kG];
    ATTNZOO_UNROLL for (int t = 0; t < kG; ++t) {
      kv[t] = (__m512bh)_mm512_loadu_si512(k0 + (t * e2 + c) * 32);
    }
    ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
      const auto qv = (__m512bh)_mm512_set1_epi32(static_cast<int>(q[r * e2 + c]));
      ATTNZOO_UNROLL for (int t = 0; t < kG; ++t) acc[r][t] =
          _mm512_dpbf16_ps(acc[r][t], qv, kv[t]);
    }
  }
  const __m512 factor = _mm512_set1_ps(scale);
  ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
    ATTNZOO_UNROLL for (int t = 0; t < kG; ++t) {
      _mm512_storeu_ps(s + r * ld + (g + t) * 16, _mm512_mul_ps(acc[r][t], factor));
    }
  }
}

// The scores of the keys of `groups` packed groups, two groups at a time, kR rows.
template <int kR>
ATTNZOO_AVX512_BF16 void scores_tile_bf16(const uint32_t* q, int64_t e2, const uint16_t* kp,
                                          int64_t groups, float scale, float* s, int64_t ld) {
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) scores_groups_bf16<kR, 2>(q, e2, kp, g, scale, s, ld);
  if (g < groups) scores_groups_bf16<kR, 1>(q, e2, kp, g, scale, s, ld);
}

// o[r, c0 : c0 + kV·16] += Σ_j p[r, j]·v[j, c0 : c0 + kV·16] over the key pairs jp < pairs, kR
// rows. p: kR x ldp bfloat16 pairs (p[r, 2jp], p[r, 2jp + 1]) in 32 bits each, v: [pairs][ev][2],
// o: kR x ev.
template <int kR, int kV>
ATTNZOO_AVX512_BF16 inline void values_tile_bf16(const uint32_t* p, int64_t ldp, const uint16_t* v,
                                                 int64_t ev, int64_t pairs, float* o, int64_t c0) {
  __m512 acc[kR][kV];
  ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
    ATTNZOO_UNROLL for (int t = 0; t < kV; ++t) acc[r][t] =
        _mm512_loadu_ps(o + r * ev + c0 + t * 16);
  }
  for (int64_t jp = 0; jp < pairs; ++jp) {
    __m512bh vv[kV];
    ATTNZOO_UNROLL for (int t = 0; t < kV; ++t) {
      vv[t] = (__m512bh)_mm512_loadu_si512(v + (jp * ev + c0 + t * 16) * 2);
    }
    ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
      const auto pv = (__m512bh)_mm512_set1_epi32(static_cast<int>(p[r * ldp + jp]));
      ATTNZOO_UNROLL for (int t = 0; t < kV; ++t) acc[r][t] =
          _mm512_dpbf16_ps(acc[r][t], pv, vv[t]);
    }
  }
  ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
    ATTNZOO_UNROLL for (int t = 0; t < kV; ++t)
        _mm512_storeu_ps(o + r * ev + c0 + t * 16, acc[r][t]);
  }
}

template <int kR>
ATTNZOO_AVX512_BF16 void values_rows_bf16(const uint32_t* p, int64_t ldp, const uint16_t* v,
                                          int64_t ev, int64_t pairs, float* o) {
  int64_t c0 = 0;
  for (; c0 + 64 <= ev; c0 += 64) values_tile_bf16<kR, 4>(p, ldp, v, ev, pairs, o, c0);
  switch ((ev - c0) / 16) {  // the rest in one pass
    case 3:
      values_tile_bf16<kR, 3>(p, ldp, v, ev, pairs, o, c0);
      break;
    case 2:
      values_tile_bf16<kR, 2>(p, ldp, v, ev, pairs, o, c0);
      break;
    case 1:
      values_tile_bf16<kR, 1>(p, ldp, v, ev, pairs, o, c0);
      break;
    default:
      break;
  }
}
#endif

inline uint16_t bits(c10::BFloat16 x) { return x.x; }

inline float widen(float x) { return x; }
inline float widen(c10::BFloat16 x) { return static_cast<float>(x); }

// The call as the tasks see it.
template <typename T>
struct Problem {
  const T* q;
  const T* k;
  const T* v;
  int64_t q_strides[4], k_strides[4], v_strides[4];
  T* out;             // [B, L, H, E] contiguous
  float* lse;         // [B, H, L]
  const float* bias;  // [1|B, 1|H, L, S] by bias_strides (zero strides where broadcast); or null
  int64_t bias_strides[4];
  const int64_t* key_lengths;  // [B] or null
  int64_t batch, heads, q_len, k_len, e, e_pad, s_pad;
  bool causal;
  int64_t causal_offset;  // a query i sees keys j <= i + causal_offset
  float scale;
  // Transformer-XL's relative term (flash_attention_relative_cpu), else null: query i's score
  // with key j gains scale · q_pos[i]·pos[L − 1 − i + j]. q_pos [B, L, H, E] and pos
  // [1|B, pos_len, H, E] by strides (a zero batch stride where shared); packed as k is, over
  // pos_pad rows (zeros past pos_len), enough for every tile's window.
  const T* q_pos = nullptr;
  const T* pos = nullptr;
  int64_t q_pos_strides[4] = {}, pos_strides[4] = {};
  int64_t pos_len = 0, pos_pad = 0;
};

// How many keys (a prefix) query i of batch entry b sees.
template <typename T>
inline int64_t visible_keys(const Problem<T>& P, int64_t b, int64_t i) {
  int64_t n = P.k_len;
  if (P.key_lengths != nullptr) n = std::clamp<int64_t>(P.key_lengths[b], 0, n);
  if (P.causal) n = std::clamp<int64_t>(i + P.causal_offset + 1, 0, n);
  return n;
}

// The scratch of one thread: the tile's scaled queries, scores / probabilities and outputs; for
// the bfloat16 products, the queries and the probabilities as bfloat16 pairs.
// With the relative term, the queries of the position product and its scores over the window of
// positions a tile's rows reach in a key block (kPositionBlock: a block, the kRows − 1 rows of
// shift and a group's alignment, rounded up to two groups).
constexpr int64_t kPositionBlock = kKeyBlock + 64;

struct TileScratch {
  std::vector<float> q, s, o, q_pos, s_pos;
  std::vector<uint32_t> q_pairs, p_pairs, q_pos_pairs;
  TileScratch(int64_t e, int64_t e_pad, bool relative)
      : q(static_cast<size_t>(kRows * e)),
        s(static_cast<size_t>(kRows * kKeyBlock)),
        o(static_cast<size_t>(kRows * e_pad)),
        q_pos(relative ? static_cast<size_t>(kRows * e) : 0),
        s_pos(relative ? static_cast<size_t>(kRows * kPositionBlock) : 0),
        q_pairs(static_cast<size_t>(kRows * ((e + 1) / 2))),
        p_pairs(static_cast<size_t>(kRows * kKeyBlock / 2)),
        q_pos_pairs(relative ? static_cast<size_t>(kRows * ((e + 1) / 2)) : 0) {}
};

// The elements of packed k per key: e float32, or e rounded up to even bfloat16 (pairs).
template <bool kDot>
inline int64_t packed_k_width(int64_t e) {
  return kDot ? (e + 1) / 2 * 2 : e;
}

#ifdef ATTNZOO_FLASH_CPU_KERNELS
// Whether rows `stride` elements apart fit a gather's 32-bit indices t·stride, t < 16.
inline bool gatherable(int64_t stride) {
  return stride >= 0 && stride * 15 <= std::numeric_limits<int32_t>::max();
}

// out[c·16 + t] = rows[t·stride + c] for the columns c < e, rows t < valid; zeros for t ≥ valid.
// Blocks of 16 columns of the 16 rows transposed in registers: pairs of rows interleaved, then
// pairs of pairs, then 128-bit lanes in two steps, 64 shuffles for 256 values.
ATTNZOO_TARGET_AVX512 void transpose_rows_avx512(const float* rows, int64_t stride, int64_t valid,
                                                 int64_t e, float* out) {
  for (int64_t c = 0; c < e; c += 16) {
    const int64_t n = std::min<int64_t>(e - c, 16);
    const auto mask = static_cast<__mmask16>((1u << n) - 1);
    __m512 r[16], t[16];
    ATTNZOO_UNROLL for (int i = 0; i < 16; ++i) {
      r[i] = i < valid ? _mm512_maskz_loadu_ps(mask, rows + i * stride + c) : _mm512_setzero_ps();
    }
    // t[2i], t[2i + 1]: rows 2i and 2i + 1 interleaved (columns 0, 1 and 2, 3 of each lane).
    ATTNZOO_UNROLL for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // r[4i + j]: column 4k + j of rows 4i .. 4i + 3 in lane k.
    ATTNZOO_UNROLL for (int i = 0; i < 16; i += 4) {
      r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
      r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
      r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
      r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    // t[j], t[4 + j]: lanes 0, 2 and 1, 3 of r[j], r[4 + j]; t[8 + j], t[12 + j] of r[8 + j],
    // r[12 + j].
    ATTNZOO_UNROLL for (int j = 0; j < 4; ++j) {
      t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
      t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
      t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
      t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    }
    // Column 4k + j: lane k of r[j], r[4 + j], r[8 + j], r[12 + j].
    ATTNZOO_UNROLL for (int j = 0; j < 4; ++j) {
      r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
      r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
      r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
      r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
    }
    for (int64_t i = 0; i < n; ++i) _mm512_storeu_ps(out + (c + i) * 16, r[i]);
  }
}

// The bfloat16 pairs of an even E: out[(c·16 + t)·2 + {0, 1}] = rows[t·stride + 2c + {0, 1}]
// for c < e / 2, rows t < valid; zeros for t ≥ valid. A gather of 32-bit pairs per column pair.
ATTNZOO_TARGET_AVX512 void gather_column_pairs_avx512(const uint16_t* rows, int64_t stride,
                                                      int64_t valid, int64_t e, uint16_t* out) {
  const __m512i index =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(stride)));
  const auto mask = static_cast<__mmask16>((1u << valid) - 1);
  for (int64_t c = 0; c < e / 2; ++c) {
    _mm512_storeu_si512(out + c * 32, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask,
                                                                  index, rows + 2 * c, 2));
  }
}

// Rows a and b (b null: zeros) of E bfloat16 interleaved along E into out [E_pad][2]
// (out[2c] = a[c], out[2c + 1] = b[c]), zeros from E to E_pad (a multiple of 16).
ATTNZOO_TARGET_AVX512 void interleave_rows_avx512(const uint16_t* a, const uint16_t* b, int64_t e,
                                                  int64_t e_pad, uint16_t* out) {
  // Word i of the low half: a[i / 2] for even i, b[i / 2] for odd (b's words are 32 and up).
  alignas(64) static constexpr uint16_t kLow[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                    37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                    11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i low = _mm512_load_si512(kLow);
  const __m512i high = _mm512_add_epi16(low, _mm512_set1_epi16(16));
  for (int64_t c = 0; c < e_pad; c += 32) {
    const int64_t n = std::clamp<int64_t>(e - c, 0, 32);
    const auto mask = static_cast<__mmask32>(n == 32 ? ~0u : (1u << n) - 1);
    const __m512i va = _mm512_maskz_loadu_epi16(mask, a + c);
    const __m512i vb =
        b == nullptr ? _mm512_setzero_si512() : _mm512_maskz_loadu_epi16(mask, b + c);
    _mm512_storeu_si512(out + 2 * c, _mm512_permutex2var_epi16(va, low, vb));
    if (c + 16 < e_pad)
      _mm512_storeu_si512(out + 2 * c + 32, _mm512_permutex2var_epi16(va, high, vb));
  }
}
#endif

// Rows [first, first + W) of (b, h) of a [B, N, H, E] tensor (by strides) in the score product's
// layout [E][W]: the W values of each dimension contiguous; rows from `valid` on as zeros.
template <int W, typename T>
inline void pack_score_rows(const T* base, const int64_t* st, int64_t b, int64_t h, int64_t first,
                            int64_t valid, int64_t e, float* out) {
#ifdef ATTNZOO_FLASH_CPU_KERNELS
  if constexpr (W == 16 && std::is_same_v<T, float>) {
    if (valid > 0 && st[3] == 1) {
      const float* rows = base + b * st[0] + first * st[1] + h * st[2];
      transpose_rows_avx512(rows, st[1], valid, e, out);
      return;
    }
  }
#endif
  for (int64_t t = 0; t < valid; ++t) {
    const T* row = base + b * st[0] + (first + t) * st[1] + h * st[2];
    for (int64_t c = 0; c < e; ++c) out[c * W + t] = widen(row[c * st[3]]);
  }
  if (valid < W) {
    for (int64_t c = 0; c < e; ++c) std::fill(out + c * W + valid, out + c * W + W, 0.0f);
  }
}

// The same as bfloat16 pairs along E, for the AVX512-BF16 products: [E/2][16][2], an odd E's
// last pair completed by a zero.
template <typename T>
inline void pack_score_row_pairs(const T* base, const int64_t* st, int64_t b, int64_t h,
                                 int64_t first, int64_t valid, int64_t e, uint16_t* out) {
#ifdef ATTNZOO_FLASH_CPU_KERNELS
  if (valid > 0 && e % 2 == 0 && st[3] == 1 && gatherable(st[1])) {
    const T* rows = base + b * st[0] + first * st[1] + h * st[2];
    gather_column_pairs_avx512(reinterpret_cast<const uint16_t*>(rows), st[1], valid, e, out);
    return;
  }
#endif
  std::fill(out, out + (e + 1) / 2 * 32, uint16_t{0});
  for (int64_t t = 0; t < valid; ++t) {
    const T* row = base + b * st[0] + (first + t) * st[1] + h * st[2];
    for (int64_t c = 0; c < e; ++c) out[((c / 2) * 16 + t) * 2 + c % 2] = bits(row[c * st[3]]);
  }
}

// Group g (keys [g·W, g·W + W)) of (b, h)'s k and v in the kernel's layouts: kg [E][W] and the
// W rows of vg [W][E_pad]; keys past key_lengths[b] and S, and the padding, as zeros.
template <int W, typename T>
inline void pack_group(const Problem<T>& P, int64_t b, int64_t h, int64_t g, float* kg, float* vg) {
  const int64_t e = P.e, ev = P.e_pad;
  int64_t keys = P.k_len;
  if (P.key_lengths != nullptr) keys = std::clamp<int64_t>(P.key_lengths[b], 0, keys);
  const int64_t first = g * W;
  const int64_t valid = std::clamp<int64_t>(keys - first, 0, W);
  const auto& vs = P.v_strides;
  pack_score_rows<W>(P.k, P.k_strides, b, h, first, valid, e, kg);
  for (int64_t t = 0; t < valid; ++t) {
    const T* vrow = P.v + b * vs[0] + (first + t) * vs[1] + h * vs[2];
    float* vout = vg + t * ev;
    for (int64_t c = 0; c < e; ++c) vout[c] = widen(vrow[c * vs[3]]);
    std::fill(vout + e, vout + ev, 0.0f);
  }
  if (valid < W) std::fill(vg + valid * ev, vg + W * ev, 0.0f);
}

// Group g (keys [16g, 16g + 16)) of (b, h)'s k and v as bfloat16 pairs: kg [E/2][16][2] and the
// 8 key pairs of vg [8][E_pad][2]; keys past key_lengths[b] and S, and the padding, as zeros.
template <typename T>
inline void pack_group_pairs(const Problem<T>& P, int64_t b, int64_t h, int64_t g, uint16_t* kg,
                             uint16_t* vg) {
  const int64_t e = P.e, ev = P.e_pad;
  int64_t keys = P.k_len;
  if (P.key_lengths != nullptr) keys = std::clamp<int64_t>(P.key_lengths[b], 0, keys);
  const int64_t first = g * 16;
  const int64_t valid = std::clamp<int64_t>(keys - first, 0, 16);
  const auto& vs = P.v_strides;
  pack_score_row_pairs(P.k, P.k_strides, b, h, first, valid, e, kg);
#ifdef ATTNZOO_FLASH_CPU_KERNELS
  if (vs[3] == 1) {
    for (int64_t t = 0; t < 16; t += 2) {
      uint16_t* out = vg + (t / 2) * ev * 2;
      if (t >= valid) {
        std::fill(out, out + 2 * ev, uint16_t{0});
        continue;
      }
      const auto row = [&](int64_t i) {
        return reinterpret_cast<const uint16_t*>(P.v + b * vs[0] + (first + i) * vs[1] + h * vs[2]);
      };
      interleave_rows_avx512(row(t), t + 1 < valid ? row(t + 1) : nullptr, e, ev, out);
    }
    return;
  }
#endif
  std::fill(vg, vg + 16 * ev, uint16_t{0});
  for (int64_t t = 0; t < valid; ++t) {
    const T* vrow = P.v + b * vs[0] + (first + t) * vs[1] + h * vs[2];
    uint16_t* vout = vg + (t / 2) * ev * 2 + t % 2;
    for (int64_t c = 0; c < e; ++c) vout[c * 2] = bits(vrow[c * vs[3]]);
  }
}

// Queries [i0, i0 + kR) of (b, h), whose packed k and v are kp [S_pad / W][E][W] and
// vp [S_pad][E_pad], or with kDot (bfloat16 products, W = 16) kp [S_pad / 16][E / 2][16][2] and
// vp [S_pad / 2][E_pad][2].
// Rows [i0, i0 + kR) of (b, h) of the queries `base` [B, L, H, E] (by strides) as the score
// product takes them: float32 times the scale into q, or bfloat16 pairs into q_pairs (kDot).
template <int kR, bool kDot, typename T>
inline void load_queries(const Problem<T>& P, const T* base, const int64_t* st, int64_t b,
                         int64_t h, int64_t i0, float* q, uint32_t* q_pairs) {
  const int64_t e = P.e, e2 = (e + 1) / 2;
  for (int r = 0; r < kR; ++r) {
    const T* row = base + b * st[0] + (i0 + r) * st[1] + h * st[2];
    if constexpr (kDot) {
      for (int64_t c = 0; c < e2; ++c) {
        const uint32_t high = 2 * c + 1 < e ? bits(row[(2 * c + 1) * st[3]]) : 0;
        q_pairs[r * e2 + c] = bits(row[2 * c * st[3]]) | high << 16;
      }
    } else {
      for (int64_t c = 0; c < e; ++c) q[r * e + c] = widen(row[c * st[3]]) * P.scale;
    }
  }
}

// W probabilities (finite) rounded to nearest even bfloat16, stored as W / 2 pairs at out.
template <int W>
inline __attribute__((always_inline)) void store_bfloat16_pairs(typename Lanes<W>::F p,
                                                                uint32_t* out) {
  using U = typename Lanes<W>::I;
  using Half = uint16_t __attribute__((vector_size(W * sizeof(uint16_t))));
  const U u = (U)p;
  const U rounded = (U)(((u + 0x7fff + ((u >> 16) & 1)) >> 16) & 0xffff);
  const Half half = __builtin_convertvector(rounded, Half);
  std::memcpy(out, &half, sizeof half);
}

template <int W, int kR, bool kDot, typename T, typename Packed>
inline __attribute__((always_inline)) void attend_tile(const Problem<T>& P, int64_t b, int64_t h,
                                                       int64_t i0, const Packed* kp,
                                                       const Packed* vp, const Packed* pp,
                                                       TileScratch& scratch) {
  using F = typename Lanes<W>::F;
  const int64_t e = P.e, ev = P.e_pad, e2 = (e + 1) / 2, kw = packed_k_width<kDot>(e);
  float* q = scratch.q.data();
  float* s = scratch.s.data();
  float* o = scratch.o.data();
  uint32_t* q_pairs = scratch.q_pairs.data();
  load_queries<kR, kDot>(P, P.q, P.q_strides, b, h, i0, q, q_pairs);
  const bool relative = P.pos != nullptr;
  if (relative) {
    load_queries<kR, kDot>(P, P.q_pos, P.q_pos_strides, b, h, i0, scratch.q_pos.data(),
                           scratch.q_pos_pairs.data());
  }
  std::fill(o, o + kR * ev, 0.0f);
  float m[kR], l[kR];
  int64_t visible[kR];
  int64_t last = 0;
  for (int r = 0; r < kR; ++r) {
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = 0.0f;
    visible[r] = visible_keys(P, b, i0 + r);
    last = std::max(last, visible[r]);
  }
  const int64_t bh = b * P.heads + h;
  const float* bias_bh =
      P.bias == nullptr ? nullptr : P.bias + b * P.bias_strides[0] + h * P.bias_strides[1];
  for (int64_t j0 = 0; j0 < last; j0 += kKeyBlock) {
    const int64_t keys = std::min(kKeyBlock, last - j0);
    const int64_t padded = (keys + W - 1) / W * W;  // whole groups
    if constexpr (kDot) {
#ifdef ATTNZOO_FLASH_CPU_KERNELS
      scores_tile_bf16<kR>(q_pairs, e2, kp + j0 * 2 * e2, padded / W, P.scale, s, kKeyBlock);
#endif
    } else {
      scores_tile<W, kR>(q, e, kp + j0 * e, padded / W, s, kKeyBlock);
    }
    if (relative) {
      // Row r's key j0 + j has position L − 1 − (i0 + r) + j0 + j = first + (kR − 1 − r) + j:
      // one product over the window from `first` (down to a group boundary) serves every row.
      const int64_t first = P.q_len - i0 - kR + j0;
      const int64_t start = first / W * W, offset = first - start;
      const int64_t count = (padded + kR - 1 + offset + 2 * W - 1) / (2 * W) * (2 * W);
      float* sp = scratch.s_pos.data();
      if constexpr (kDot) {
#ifdef ATTNZOO_FLASH_CPU_KERNELS
        scores_tile_bf16<kR>(scratch.q_pos_pairs.data(), e2, pp + start * kw, count / W, P.scale,
                             sp, kPositionBlock);
#endif
      } else {
        scores_tile<W, kR>(scratch.q_pos.data(), e, pp + start * kw, count / W, sp, kPositionBlock);
      }
      for (int r = 0; r < kR; ++r) {
        float* sr = s + r * kKeyBlock;
        const float* pr = sp + r * kPositionBlock + offset + (kR - 1 - r);
        for (int64_t j = 0; j < padded; j += W) store<W>(sr + j, load<W>(sr + j) + load<W>(pr + j));
      }
    }
    for (int r = 0; r < kR; ++r) {
      float* sr = s + r * kKeyBlock;
      const int64_t n = std::clamp<int64_t>(visible[r] - j0, 0, keys);
      if (bias_bh != nullptr && n > 0) {
        const float* br = bias_bh + (i0 + r) * P.bias_strides[2] + j0 * P.bias_strides[3];
        const int64_t stride = P.bias_strides[3];
        if (stride == 1) {
          for (int64_t j = 0; j < n; ++j) sr[j] += br[j];
        } else {
          for (int64_t j = 0; j < n; ++j) sr[j] += br[j * stride];
        }
      }
      // The maximum over the visible keys, lane by lane (a scalar running maximum is a chain of
      // dependent instructions), the lanes past n at -inf. NaN scores do not take part, as in
      // std::max; they reach the output through exp.
      F lanes_max = splat<W>(-std::numeric_limits<float>::infinity());
      for (int64_t j = 0; j < n; j += W) {
        F v = load<W>(sr + j);
        if (j + W > n) {
          for (int t = 0; t < W; ++t) {
            if (j + t >= n) v[t] = -std::numeric_limits<float>::infinity();
          }
        }
        lanes_max = select<W>((typename Lanes<W>::I)(v > lanes_max), v, lanes_max);
      }
      float block_max = -std::numeric_limits<float>::infinity();
      for (int t = 0; t < W; ++t) block_max = std::max(block_max, lanes_max[t]);
      const float m_new = std::max(m[r], block_max);
      if (n == 0 || m_new == -std::numeric_limits<float>::infinity()) {
        std::fill(sr, sr + padded, 0.0f);  // no key of this block counts for this row
        continue;
      }
      // exp over whole vectors, then the keys the row does not see set to 0.
      F sum = {};
      for (int64_t j = 0; j < padded; j += W) {
        F p = exp_nonpositive<W>(load<W>(sr + j) - m_new);
        if (j + W > n) {
          for (int t = 0; t < W; ++t) {
            if (j + t >= n) p[t] = 0.0f;
          }
        }
        store<W>(sr + j, p);
        sum += p;
      }
      float block_sum = 0.0f;
      for (int t = 0; t < W; ++t) block_sum += sum[t];
      const float alpha = std::exp(m[r] - m_new);  // 0 for the first block the row sees
      if (alpha != 1.0f) {
        float* orow = o + r * ev;
        for (int64_t c = 0; c < ev; ++c) orow[c] *= alpha;
      }
      l[r] = l[r] * alpha + block_sum;
      m[r] = m_new;
    }
    if constexpr (kDot) {
#ifdef ATTNZOO_FLASH_CPU_KERNELS
      // The probabilities as bfloat16 pairs, W at a time (padded is a multiple of W).
      uint32_t* p_pairs = scratch.p_pairs.data();
      for (int r = 0; r < kR; ++r) {
        for (int64_t j = 0; j < padded; j += W) {
          store_bfloat16_pairs<W>(load<W>(s + r * kKeyBlock + j),
                                  p_pairs + r * (kKeyBlock / 2) + j / 2);
        }
      }
      values_rows_bf16<kR>(p_pairs, kKeyBlock / 2, vp + j0 * ev, ev, (keys + 1) / 2, o);
#endif
    } else {
      values_rows<W, kR>(s, kKeyBlock, vp + j0 * ev, ev, ev, keys, o);
    }
  }
  for (int r = 0; r < kR; ++r) {
    const int64_t i = i0 + r;
    T* out = P.out + ((b * P.q_len + i) * P.heads + h) * e;
    float* lse = P.lse + (bh * P.q_len + i);
    if (l[r] > 0.0f) {
      const float inverse = 1.0f / l[r];
      for (int64_t c = 0; c < e; ++c) out[c] = static_cast<T>(o[r * ev + c] * inverse);
      *lse = m[r] + std::log(l[r]);
    } else {
      for (int64_t c = 0; c < e; ++c) out[c] = static_cast<T>(0.0f);
      *lse = -std::numeric_limits<float>::infinity();
    }
  }
}

template <int W, bool kDot, typename T, typename Packed>
inline __attribute__((always_inline)) void attend_rows(const Problem<T>& P, int64_t b, int64_t h,
                                                       int64_t i0, const Packed* kp,
                                                       const Packed* vp, const Packed* pp,
                                                       TileScratch& scratch) {
  switch (std::min<int64_t>(kRows, P.q_len - i0)) {
    case 6:
      attend_tile<W, 6, kDot>(P, b, h, i0, kp, vp, pp, scratch);
      break;
    case 5:
      attend_tile<W, 5, kDot>(P, b, h, i0, kp, vp, pp, scratch);
      break;
    case 4:
      attend_tile<W, 4, kDot>(P, b, h, i0, kp, vp, pp, scratch);
      break;
    case 3:
      attend_tile<W, 3, kDot>(P, b, h, i0, kp, vp, pp, scratch);
      break;
    case 2:
      attend_tile<W, 2, kDot>(P, b, h, i0, kp, vp, pp, scratch);
      break;
    default:
      attend_tile<W, 1, kDot>(P, b, h, i0, kp, vp, pp, scratch);
      break;
  }
}
static_assert(kRows == 6, "attend_rows dispatches tiles of 1 to 6 rows");

// The two ways of splitting the work (flash_attention_cpu_typed picks one):
//   kTiles: tasks [begin, end) of the (batch, head, query tile) list, over k and v packed for
//     every (batch, head) beforehand into packed_k, packed_v (few heads: every thread gets work);
//   kHeads: tasks [begin, end) of the (batch, head) list, each packing its own k and v into the
//     thread's scratch, where they stay in cache for all its query tiles (many heads).
enum class Split { kTiles, kHeads };

// The packed k and v of group g (keys [g·W, g·W + W)) of (b, h), in the layout of the products.
template <int W, bool kDot, typename T, typename Packed>
inline void pack(const Problem<T>& P, int64_t b, int64_t h, int64_t g, Packed* kp, Packed* vp) {
  const int64_t kw = packed_k_width<kDot>(P.e);
  if constexpr (kDot) {
    static_assert(W == 16, "the bfloat16 products work on 16 lanes");
    pack_group_pairs(P, b, h, g, kp + g * W * kw, vp + g * W * P.e_pad);
  } else {
    pack_group<W>(P, b, h, g, kp + g * W * kw, vp + g * W * P.e_pad);
  }
}

// The packed positions of group g (rows [g·W, g·W + W)) of (b, h), as k is packed; rows past
// pos_len as zeros.
template <int W, bool kDot, typename T, typename Packed>
inline void pack_positions(const Problem<T>& P, int64_t b, int64_t h, int64_t g, Packed* pp) {
  const int64_t kw = packed_k_width<kDot>(P.e);
  const int64_t valid = std::clamp<int64_t>(P.pos_len - g * W, 0, W);
  if constexpr (kDot) {
    pack_score_row_pairs(P.pos, P.pos_strides, b, h, g * W, valid, P.e, pp + g * W * kw);
  } else {
    pack_score_rows<W>(P.pos, P.pos_strides, b, h, g * W, valid, P.e, pp + g * W * kw);
  }
}

// Slice t of `slices` of (batch, head) pair bh's q, k and v rows into the cache (the rows a task
// reads next, while it works on the pair before).
template <typename T>
inline void prefetch_slice(const Problem<T>& P, int64_t bh, int64_t t, int64_t slices) {
  const int64_t b = bh / P.heads, h = bh % P.heads;
  const int64_t bytes = P.e * static_cast<int64_t>(sizeof(T));
  const auto rows = [&](const T* base, const int64_t* st, int64_t n) {
    const int64_t first = t * n / slices, last = (t + 1) * n / slices;
    for (int64_t i = first; i < last; ++i) {
      const char* row = reinterpret_cast<const char*>(base + b * st[0] + i * st[1] + h * st[2]);
      for (int64_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(row + offset);
    }
  };
  rows(P.q, P.q_strides, P.q_len);
  rows(P.k, P.k_strides, P.k_len);
  rows(P.v, P.v_strides, P.k_len);
}

// packed_k, packed_v, packed_pos: every (batch, head)'s, for kTiles (packed_pos null without the
// relative term); null for kHeads.
template <int W, bool kDot, typename T, typename Packed>
inline __attribute__((always_inline)) void attend_tasks(const Problem<T>& P, Split split,
                                                        const Packed* packed_k,
                                                        const Packed* packed_v,
                                                        const Packed* packed_pos, int64_t begin,
                                                        int64_t end) {
  const bool relative = P.pos != nullptr;
  TileScratch scratch(P.e, P.e_pad, relative);
  const int64_t tiles = (P.q_len + kRows - 1) / kRows;
  const int64_t groups = P.s_pad / W;
  const int64_t kw = packed_k_width<kDot>(P.e);
  if (split == Split::kTiles) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / tiles;
      const Packed* kp = packed_k + bh * P.s_pad * kw;
      const Packed* vp = packed_v + bh * P.s_pad * P.e_pad;
      const Packed* pp = relative ? packed_pos + bh * P.pos_pad * kw : nullptr;
      attend_rows<W, kDot>(P, bh / P.heads, bh % P.heads, (task % tiles) * kRows, kp, vp, pp,
                           scratch);
    }
    return;
  }
  std::vector<Packed> kp(static_cast<size_t>(P.s_pad * kw)),
      vp(static_cast<size_t>(P.s_pad * P.e_pad)),
      pp(relative ? static_cast<size_t>(P.pos_pad * kw) : 0);
  for (int64_t bh = begin; bh < end; ++bh) {
    const int64_t b = bh / P.heads, h = bh % P.heads;
    for (int64_t g = 0; g < groups; ++g) pack<W, kDot>(P, b, h, g, kp.data(), vp.data());
    if (relative) {
      for (int64_t g = 0; g < P.pos_pad / W; ++g) pack_positions<W, kDot>(P, b, h, g, pp.data());
    }
    for (int64_t t = 0; t < tiles; ++t) {
      if (bh + 1 < end) prefetch_slice(P, bh + 1, t, tiles);
      attend_rows<W, kDot>(P, b, h, t * kRows, kp.data(), vp.data(), pp.data(), scratch);
    }
  }
}

#ifdef ATTNZOO_FLASH_CPU_KERNELS
template <bool kDot, typename T, typename Packed>
ATTNZOO_TARGET_AVX512 void attend_avx512(const Problem<T>& P, Split split, const Packed* packed_k,
                                         const Packed* packed_v, const Packed* packed_pos,
                                         int64_t begin, int64_t end) {
  attend_tasks<16, kDot>(P, split, packed_k, packed_v, packed_pos, begin, end);
}

template <typename T>
ATTNZOO_TARGET_AVX2_FMA void attend_avx2(const Problem<T>& P, Split split, const float* packed_k,
                                         const float* packed_v, const float* packed_pos,
                                         int64_t begin, int64_t end) {
  attend_tasks<8, false>(P, split, packed_k, packed_v, packed_pos, begin, end);
}

bool has_avx512_bf16() {
  static const bool has = has_avx512() && __builtin_cpu_supports("avx512bf16");
  return has;
}
#endif

// Transformer-XL's relative term as flash_attention_relative_cpu takes it: the queries of the
// position product [B, L, H, E] and the positions [1|B, L + S − 1, H, E].
struct RelativeTerm {
  at::Tensor query, positions;
};

// kDot: the bfloat16 products (T = bfloat16, w = 16); Packed: the element of packed k and v.
template <typename T, bool kDot = false>
std::tuple<at::Tensor, at::Tensor> flash_attention_cpu_typed(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths_arg, const std::optional<at::Tensor>& bias_arg,
    bool causal, bool bottom_right, double scale, int64_t w,
    const RelativeTerm* relative = nullptr) {
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), e = q.size(3);
  const int64_t k_len = k.size(1);
  auto out = at::empty({batch, q_len, heads, e}, q.options());
  auto lse = at::empty({batch, heads, q_len}, q.options().dtype(at::kFloat));
  if (out.numel() == 0) return {out, lse};
  const int64_t s_pad = std::max<int64_t>((k_len + 2 * w - 1) / (2 * w) * (2 * w), 2 * w);
  const int64_t e_pad = (e + w - 1) / w * w;
  at::Tensor key_lengths;
  if (key_lengths_arg) key_lengths = key_lengths_arg->to(at::kLong).contiguous();
  at::Tensor bias;
  if (bias_arg) bias = bias_arg->scalar_type() == at::kFloat ? *bias_arg : bias_arg->to(at::kFloat);
  const int64_t* lengths = key_lengths.defined() ? key_lengths.const_data_ptr<int64_t>() : nullptr;

  Problem<T> P{};
  P.q = q.const_data_ptr<T>();
  P.k = k.const_data_ptr<T>();
  P.v = v.const_data_ptr<T>();
  for (int d = 0; d < 4; ++d) {
    P.q_strides[d] = q.stride(d);
    P.k_strides[d] = k.stride(d);
    P.v_strides[d] = v.stride(d);
  }
  P.out = out.mutable_data_ptr<T>();
  P.lse = lse.mutable_data_ptr<float>();
  P.bias = bias.defined() ? bias.const_data_ptr<float>() : nullptr;
  if (bias.defined()) {
    for (int d = 0; d < 4; ++d) P.bias_strides[d] = bias.size(d) == 1 ? 0 : bias.stride(d);
  }
  P.key_lengths = lengths;
  P.batch = batch;
  P.heads = heads;
  P.q_len = q_len;
  P.k_len = k_len;
  P.e = e;
  P.e_pad = e_pad;
  P.s_pad = s_pad;
  P.causal = causal;
  P.causal_offset = bottom_right ? k_len - q_len : 0;
  P.scale = static_cast<float>(scale);
  if (relative != nullptr) {
    const auto& pos = relative->positions;
    P.q_pos = relative->query.const_data_ptr<T>();
    P.pos = pos.const_data_ptr<T>();
    for (int d = 0; d < 4; ++d) {
      P.q_pos_strides[d] = relative->query.stride(d);
      P.pos_strides[d] = d == 0 && pos.size(0) == 1 ? 0 : pos.stride(d);
    }
    P.pos_len = pos.size(1);
    // The last tile's window ends before L + s_pad + 2w (attend_tile).
    P.pos_pad = (q_len + s_pad + 4 * w - 1) / (2 * w) * (2 * w);
  }

  using Packed = std::conditional_t<kDot, uint16_t, float>;
  const auto attend = [&](Split split, const Packed* packed_k, const Packed* packed_v,
                          const Packed* packed_pos, int64_t begin, int64_t end) {
#ifdef ATTNZOO_FLASH_CPU_KERNELS
    if constexpr (kDot) {
      attend_avx512<true>(P, split, packed_k, packed_v, packed_pos, begin, end);
    } else if (w == 16) {
      attend_avx512<false>(P, split, packed_k, packed_v, packed_pos, begin, end);
    } else {
      attend_avx2<T>(P, split, packed_k, packed_v, packed_pos, begin, end);
    }
#endif
  };
  const int64_t pairs = batch * heads;
  if (pairs >= 4 * at::get_num_threads()) {  // at most a quarter of a task's imbalance
    kernels::parallel_for(0, pairs, 1, [&](int64_t begin, int64_t end) {
      attend(Split::kHeads, nullptr, nullptr, nullptr, begin, end);
    });
    return {out, lse};
  }
  // k, v and the positions of every (batch, head) packed, group by group: float32, or bfloat16
  // as 16-bit integers (the bits, moved and never computed with).
  const int64_t kw = packed_k_width<kDot>(e);
  auto packed = at::empty({pairs * (s_pad * (kw + e_pad) + P.pos_pad * kw)},
                          q.options().dtype(kDot ? at::kShort : at::kFloat));
  Packed* kp = reinterpret_cast<Packed*>(packed.mutable_data_ptr());
  Packed* vp = kp + pairs * s_pad * kw;
  Packed* pp = vp + pairs * s_pad * e_pad;
  const int64_t groups = s_pad / w, pos_groups = P.pos_pad / w;
  kernels::parallel_for(0, pairs * (groups + pos_groups), 8, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / (groups + pos_groups), g = task % (groups + pos_groups);
      const int64_t b = bh / heads, h = bh % heads;
      Packed* kb = kp + bh * s_pad * kw;
      Packed* vb = vp + bh * s_pad * e_pad;
      Packed* pb = pp + bh * P.pos_pad * kw;
      if (w == 16) {
        if (g < groups) {
          pack<16, kDot>(P, b, h, g, kb, vb);
        } else {
          pack_positions<16, kDot>(P, b, h, g - groups, pb);
        }
      } else if constexpr (!kDot) {
        if (g < groups) {
          pack<8, false>(P, b, h, g, kb, vb);
        } else {
          pack_positions<8, false>(P, b, h, g - groups, pb);
        }
      }
    }
  });
  const int64_t tiles = pairs * ((q_len + kRows - 1) / kRows);
  kernels::parallel_for(0, tiles, 1, [&](int64_t begin, int64_t end) {
    attend(Split::kTiles, kp, vp, relative != nullptr ? pp : nullptr, begin, end);
  });
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor> flash_attention_cpu(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& v,
                                                       const std::optional<at::Tensor>& key_lengths,
                                                       const std::optional<at::Tensor>& bias,
                                                       bool causal, bool bottom_right,
                                                       std::optional<double> scale_arg) {
  check_flash_attention_inputs(q, k, v, key_lengths, bias);
  const double scale = scale_arg.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  const auto dtype = q.scalar_type();
  const int64_t w = flash_attention_cpu_vector_width();
  if ((dtype != at::kFloat && dtype != at::kBFloat16) || w == 0) {
    return flash_attention_reference(q, k, v, key_lengths, bias, causal, bottom_right, scale);
  }
  if (dtype == at::kFloat) {
    return flash_attention_cpu_typed<float>(q, k, v, key_lengths, bias, causal, bottom_right, scale,
                                            w);
  }
  if (flash_attention_cpu_bfloat16_products()) {
    return flash_attention_cpu_typed<c10::BFloat16, true>(q, k, v, key_lengths, bias, causal,
                                                          bottom_right, scale, w);
  }
  return flash_attention_cpu_typed<c10::BFloat16>(q, k, v, key_lengths, bias, causal, bottom_right,
                                                  scale, w);
}

}  // namespace

namespace {

// attnzoo::flash_attention_relative_cpu on the CPU dispatch key.
at::Tensor flash_attention_relative_cpu_kernel(const at::Tensor& q_content,
                                               const at::Tensor& q_position, const at::Tensor& k,
                                               const at::Tensor& v, const at::Tensor& positions,
                                               const std::optional<at::Tensor>& key_lengths,
                                               double scale) {
  const auto sizes = [](const at::Tensor& t) { return c10::str(t.sizes()); };
  TORCH_CHECK_VALUE(q_content.dim() == 4 && k.dim() == 4 && v.dim() == 4 && positions.dim() == 4,
                    "flash_attention_relative_cpu: q_content, k, v and positions must be 4-D, got ",
                    sizes(q_content), ", ", sizes(k), ", ", sizes(v), ", ", sizes(positions));
  const int64_t batch = q_content.size(0), q_len = q_content.size(1), heads = q_content.size(2),
                e = q_content.size(3), k_len = k.size(1);
  TORCH_CHECK_VALUE(q_position.sizes() == q_content.sizes(),
                    "flash_attention_relative_cpu: q_position must be q_content's [B, L, H, E] = ",
                    sizes(q_content), ", got ", sizes(q_position));
  const std::vector<int64_t> kv{batch, k_len, heads, e};
  TORCH_CHECK_VALUE(
      k.sizes() == kv && v.sizes() == kv,
      "flash_attention_relative_cpu: k and v must be [B, S, H, E] with q's B, H, E = ",
      c10::str(kv), ", got ", sizes(k), " and ", sizes(v));
  TORCH_CHECK_VALUE((positions.size(0) == 1 || positions.size(0) == batch) &&
                        positions.size(1) == q_len + k_len - 1 && positions.size(2) == heads &&
                        positions.size(3) == e,
                    "flash_attention_relative_cpu: positions must be [1|B, L + S - 1, H, E] = [1|",
                    batch, ", ", q_len + k_len - 1, ", ", heads, ", ", e, "], got ",
                    sizes(positions));
  const auto dtype = q_content.scalar_type();
  for (const auto* t : {&q_position, &k, &v, &positions}) {
    TORCH_CHECK_VALUE(t->scalar_type() == dtype && t->device().is_cpu(),
                      "flash_attention_relative_cpu: every input must be a CPU tensor of "
                      "q_content's dtype ",
                      c10::toString(dtype), ", got ", c10::toString(t->scalar_type()), " on ",
                      t->device().str());
  }
  TORCH_CHECK_VALUE(q_content.device().is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16),
                    "flash_attention_relative_cpu: takes float32 and bfloat16 CPU tensors, got ",
                    c10::toString(dtype), " on ", q_content.device().str());
  if (key_lengths) {
    TORCH_CHECK_VALUE(key_lengths->dim() == 1 && key_lengths->size(0) == batch &&
                          !key_lengths->is_floating_point(),
                      "flash_attention_relative_cpu: key_lengths must be integral [B] = [", batch,
                      "], got ", sizes(*key_lengths));
  }
  const int64_t w = flash_attention_cpu_vector_width();
  TORCH_CHECK(w > 0,
              "flash_attention_relative_cpu: needs AVX2 + FMA (or AVX-512), which this "
              "processor lacks or ATTNZOO_FLASH_CPU_ISA=reference turns off");
  const RelativeTerm relative{q_position, positions};
  if (dtype == at::kFloat) {
    return std::get<0>(flash_attention_cpu_typed<float>(q_content, k, v, key_lengths, std::nullopt,
                                                        false, false, scale, w, &relative));
  }
  if (flash_attention_cpu_bfloat16_products()) {
    return std::get<0>(flash_attention_cpu_typed<c10::BFloat16, true>(
        q_content, k, v, key_lengths, std::nullopt, false, false, scale, w, &relative));
  }
  return std::get<0>(flash_attention_cpu_typed<c10::BFloat16>(
      q_content, k, v, key_lengths, std::nullopt, false, false, scale, w, &relative));
}

}  // namespace

at::Tensor flash_attention_relative_cpu(const at::Tensor& q_content, const at::Tensor& q_position,
                                        const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& positions,
                                        const std::optional<at::Tensor>& key_lengths,
                                        double scale) {
  // Through the dispatcher, so that LibTorch's profiler (attnzoo bench --profile-ops) sees it.
  static const auto handle =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("attnzoo::flash_attention_relative_cpu", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                            double)>();
  return handle.call(q_content, q_position, k, v, positions, key_lengths, scale);
}

int64_t flash_attention_cpu_vector_width() {
  int64_t width = 0;
#ifdef ATTNZOO_FLASH_CPU_KERNELS
  width = has_avx512() ? 16 : has_avx2_fma() ? 8 : 0;
#endif
  const char* isa = std::getenv("ATTNZOO_FLASH_CPU_ISA");
  if (isa != nullptr && std::strcmp(isa, "avx2") == 0) return std::min<int64_t>(width, 8);
  if (isa != nullptr && std::strcmp(isa, "reference") == 0) return 0;
  return width;
}

bool flash_attention_cpu_bfloat16_products() {
  bool has = false;
#ifdef ATTNZOO_FLASH_CPU_KERNELS
  has = has_avx512_bf16();
#endif
  const char* isa = std::getenv("ATTNZOO_FLASH_CPU_ISA");
  return has && (isa == nullptr || std::strcmp(isa, "avx512bf16") == 0);
}

}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CPU, m) {
  m.impl("flash_attention", TORCH_FN(attnzoo::kernels::flash_attention_cpu));
  m.impl("flash_attention_relative_cpu",
         TORCH_FN(attnzoo::kernels::flash_attention_relative_cpu_kernel));
}
