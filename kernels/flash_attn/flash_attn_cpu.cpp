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
//     all of the pair's tiles.
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
// Arithmetic in float32 throughout (bfloat16 inputs are widened when packed), exp by a degree-6
// polynomial after range reduction (relative error about 2e-7, as float32's own). The kernel is
// written once with the compilers' vector extension and compiled twice, for AVX-512 (W = 16) and
// for AVX2 + FMA (W = 8), picked at run time by what the processor supports.
//
// Speed: on a 2-core AVX-512 Xeon it runs at the speed of LibTorch's sdpa (its CPU flash kernel
// over MKL's products), within the machine's noise at ViT sizes and at 1500 keys
// (docs/benchmarks.md), so the `flash` backend is not the CPU's default.
#include <attnzoo/kernels/cpu_parallel.h>
#include <attnzoo/kernels/flash_attn/flash_attn_op.h>
#include <attnzoo/kernels/ops.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#if defined(__clang__)
#define ATTNZOO_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define ATTNZOO_UNROLL _Pragma("GCC unroll 16")
#else
#define ATTNZOO_UNROLL
#endif

// The vector helpers below are always inlined into the AVX-512 and AVX2 functions, so no call
// passes a vector across the boundary between code of two instruction sets, which is what
// -Wpsabi warns of for every helper taking or returning one.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnzoo::kernels {
namespace {

constexpr int kRows = 6;             // queries per tile: the rows of both register blocks
constexpr int64_t kKeyBlock = 256;   // keys per online-softmax step (a multiple of 2W)
constexpr float kExpFloor = -87.0f;  // below it exp() is under float32's smallest normal: 0

// W float32 lanes (W = 16: one AVX-512 register, W = 8: one AVX2 register), loaded and stored
// unaligned.
template <int W>
struct Lanes {
  using F = float __attribute__((vector_size(W * sizeof(float)), aligned(sizeof(float))));
  using I = int32_t __attribute__((vector_size(W * sizeof(int32_t)), aligned(sizeof(float))));
};

template <int W>
inline __attribute__((always_inline)) typename Lanes<W>::F load(const float* p) {
  typename Lanes<W>::F v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <int W>
inline __attribute__((always_inline)) void store(float* p, typename Lanes<W>::F v) {
  std::memcpy(p, &v, sizeof v);
}

// x in every lane (x - 0 is x for every float, so the subtraction folds away; x + 0 is not, for
// x = -0, and would cost an addition).
template <int W>
inline __attribute__((always_inline)) typename Lanes<W>::F splat(float x) {
  return x - typename Lanes<W>::F{};
}

// Lane by lane: a where `take_a` is all ones, else b.
template <int W>
inline __attribute__((always_inline)) typename Lanes<W>::F select(typename Lanes<W>::I take_a,
                                                                  typename Lanes<W>::F a,
                                                                  typename Lanes<W>::F b) {
  using I = typename Lanes<W>::I;
  using F = typename Lanes<W>::F;
  return (F)(((I)a & take_a) | ((I)b & ~take_a));
}

// exp(x) for x <= 0 (scores less their row's maximum); 0 below kExpFloor and for -inf. Range
// reduction x = n·ln2 + r, |r| <= ln2/2 (ln2 in two parts, so n·ln2 is exact), then a degree-6
// polynomial of r (the minimax coefficients of Cephes' expf) and 2^n by the exponent bits.
template <int W>
inline __attribute__((always_inline)) typename Lanes<W>::F exp_nonpositive(typename Lanes<W>::F x) {
  using F = typename Lanes<W>::F;
  using I = typename Lanes<W>::I;
  const I underflow = (I)(x < splat<W>(kExpFloor));
  x = select<W>(underflow, splat<W>(kExpFloor), x);
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: adding and removing it rounds to an integer
  const F n = (x * 1.44269504088896341f + kRound) - kRound;
  F r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  F p = splat<W>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const I exponent = (__builtin_convertvector(n, I) + 127) << 23;
  return select<W>(underflow, F{}, p * (F)exponent);
}

// s[r, j] = Σ_c q[r, c]·k[j, c] for the keys of `groups` packed groups (an even count), kR rows.
// q: kR x e (row stride e), kp: [groups][e][W], s: kR x ld.
template <int W, int kR>
inline __attribute__((always_inline)) void scores_tile(const float* q, int64_t e, const float* kp,
                                                       int64_t groups, float* s, int64_t ld) {
  using F = typename Lanes<W>::F;
  for (int64_t g = 0; g < groups; g += 2) {
    const float* k0 = kp + g * e * W;
    const float* k1 = k0 + e * W;
    F acc[kR][2];
    ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) acc[r][0] = acc[r][1] = F{};
    for (int64_t c = 0; c < e; ++c) {
      const F a = load<W>(k0 + c * W);
      const F b = load<W>(k1 + c * W);
      ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
        const F qv = splat<W>(q[r * e + c]);
        acc[r][0] += qv * a;
        acc[r][1] += qv * b;
      }
    }
    ATTNZOO_UNROLL for (int r = 0; r < kR; ++r) {
      store<W>(s + r * ld + g * W, acc[r][0]);
      store<W>(s + r * ld + g * W + W, acc[r][1]);
    }
  }
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
// loads), the last chunk narrower.
template <int W, int kR>
inline __attribute__((always_inline)) void values_rows(const float* p, int64_t ld, const float* v,
                                                       int64_t ldv, int64_t ev, int64_t keys,
                                                       float* o) {
  constexpr int kChunk = W == 16 ? 4 : 2;
  int64_t c0 = 0;
  for (; c0 + kChunk * W <= ev; c0 += kChunk * W) {
    values_tile<W, kR, kChunk>(p, ld, v, ldv, ev, keys, o, c0);
  }
  for (; c0 < ev; c0 += W) values_tile<W, kR, 1>(p, ld, v, ldv, ev, keys, o, c0);
}

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
};

// How many keys (a prefix) query i of batch entry b sees.
template <typename T>
inline int64_t visible_keys(const Problem<T>& P, int64_t b, int64_t i) {
  int64_t n = P.k_len;
  if (P.key_lengths != nullptr) n = std::clamp<int64_t>(P.key_lengths[b], 0, n);
  if (P.causal) n = std::clamp<int64_t>(i + P.causal_offset + 1, 0, n);
  return n;
}

// The scratch of one thread: the tile's scaled queries, scores / probabilities and outputs.
struct TileScratch {
  std::vector<float> q, s, o;
  TileScratch(int64_t e, int64_t e_pad)
      : q(static_cast<size_t>(kRows * e)),
        s(static_cast<size_t>(kRows * kKeyBlock)),
        o(static_cast<size_t>(kRows * e_pad)) {}
};

// Group g (keys [g·W, g·W + W)) of (b, h)'s k and v in the kernel's layouts: kg [E][W] and the
// W rows of vg [W][E_pad]; keys past key_lengths[b] and S, and the padding, as zeros.
template <int W, typename T>
inline void pack_group(const Problem<T>& P, int64_t b, int64_t h, int64_t g, float* kg, float* vg) {
  const int64_t e = P.e, ev = P.e_pad;
  int64_t keys = P.k_len;
  if (P.key_lengths != nullptr) keys = std::clamp<int64_t>(P.key_lengths[b], 0, keys);
  const int64_t first = g * W;
  const int64_t valid = std::clamp<int64_t>(keys - first, 0, W);
  const auto& ks = P.k_strides;
  const auto& vs = P.v_strides;
  for (int64_t t = 0; t < valid; ++t) {
    const T* krow = P.k + b * ks[0] + (first + t) * ks[1] + h * ks[2];
    for (int64_t c = 0; c < e; ++c) kg[c * W + t] = widen(krow[c * ks[3]]);
    const T* vrow = P.v + b * vs[0] + (first + t) * vs[1] + h * vs[2];
    float* vout = vg + t * ev;
    for (int64_t c = 0; c < e; ++c) vout[c] = widen(vrow[c * vs[3]]);
    std::fill(vout + e, vout + ev, 0.0f);
  }
  if (valid < W) {
    for (int64_t c = 0; c < e; ++c) std::fill(kg + c * W + valid, kg + c * W + W, 0.0f);
    std::fill(vg + valid * ev, vg + W * ev, 0.0f);
  }
}

// Queries [i0, i0 + kR) of (b, h), whose packed k and v are kp [S_pad / W][E][W] and
// vp [S_pad][E_pad].
template <int W, int kR, typename T>
inline __attribute__((always_inline)) void attend_tile(const Problem<T>& P, int64_t b, int64_t h,
                                                       int64_t i0, const float* kp, const float* vp,
                                                       TileScratch& scratch) {
  using F = typename Lanes<W>::F;
  const int64_t e = P.e, ev = P.e_pad;
  float* q = scratch.q.data();
  float* s = scratch.s.data();
  float* o = scratch.o.data();
  for (int r = 0; r < kR; ++r) {
    const T* row = P.q + b * P.q_strides[0] + (i0 + r) * P.q_strides[1] + h * P.q_strides[2];
    for (int64_t c = 0; c < e; ++c) q[r * e + c] = widen(row[c * P.q_strides[3]]) * P.scale;
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
    const int64_t padded = (keys + 2 * W - 1) / (2 * W) * (2 * W);
    scores_tile<W, kR>(q, e, kp + j0 * e, padded / W, s, kKeyBlock);
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
    values_rows<W, kR>(s, kKeyBlock, vp + j0 * ev, ev, ev, keys, o);
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

template <int W, typename T>
inline __attribute__((always_inline)) void attend_rows(const Problem<T>& P, int64_t b, int64_t h,
                                                       int64_t i0, const float* kp, const float* vp,
                                                       TileScratch& scratch) {
  switch (std::min<int64_t>(kRows, P.q_len - i0)) {
    case 6:
      attend_tile<W, 6>(P, b, h, i0, kp, vp, scratch);
      break;
    case 5:
      attend_tile<W, 5>(P, b, h, i0, kp, vp, scratch);
      break;
    case 4:
      attend_tile<W, 4>(P, b, h, i0, kp, vp, scratch);
      break;
    case 3:
      attend_tile<W, 3>(P, b, h, i0, kp, vp, scratch);
      break;
    case 2:
      attend_tile<W, 2>(P, b, h, i0, kp, vp, scratch);
      break;
    default:
      attend_tile<W, 1>(P, b, h, i0, kp, vp, scratch);
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

template <int W, typename T>
inline __attribute__((always_inline)) void attend_tasks(const Problem<T>& P, Split split,
                                                        const float* packed_k,
                                                        const float* packed_v, int64_t begin,
                                                        int64_t end) {
  TileScratch scratch(P.e, P.e_pad);
  const int64_t tiles = (P.q_len + kRows - 1) / kRows;
  const int64_t groups = P.s_pad / W;
  if (split == Split::kTiles) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / tiles;
      const float* kp = packed_k + bh * P.s_pad * P.e;
      const float* vp = packed_v + bh * P.s_pad * P.e_pad;
      attend_rows<W>(P, bh / P.heads, bh % P.heads, (task % tiles) * kRows, kp, vp, scratch);
    }
    return;
  }
  std::vector<float> kp(static_cast<size_t>(P.s_pad * P.e)),
      vp(static_cast<size_t>(P.s_pad * P.e_pad));
  for (int64_t bh = begin; bh < end; ++bh) {
    const int64_t b = bh / P.heads, h = bh % P.heads;
    for (int64_t g = 0; g < groups; ++g) {
      pack_group<W>(P, b, h, g, kp.data() + g * P.e * W, vp.data() + g * W * P.e_pad);
    }
    for (int64_t t = 0; t < tiles; ++t)
      attend_rows<W>(P, b, h, t * kRows, kp.data(), vp.data(), scratch);
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATTNZOO_FLASH_CPU_KERNELS 1
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))) void attend_avx512(
    const Problem<T>& P, Split split, const float* packed_k, const float* packed_v, int64_t begin,
    int64_t end) {
  attend_tasks<16>(P, split, packed_k, packed_v, begin, end);
}

template <typename T>
__attribute__((target("avx2,fma"))) void attend_avx2(const Problem<T>& P, Split split,
                                                     const float* packed_k, const float* packed_v,
                                                     int64_t begin, int64_t end) {
  attend_tasks<8>(P, split, packed_k, packed_v, begin, end);
}

bool has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
}

bool has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

template <typename T>
std::tuple<at::Tensor, at::Tensor> flash_attention_cpu_typed(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths_arg, const std::optional<at::Tensor>& bias_arg,
    bool causal, bool bottom_right, double scale, int64_t w) {
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

  const auto attend = [&](Split split, const float* packed_k, const float* packed_v, int64_t begin,
                          int64_t end) {
#ifdef ATTNZOO_FLASH_CPU_KERNELS
    if (w == 16) {
      attend_avx512<T>(P, split, packed_k, packed_v, begin, end);
    } else {
      attend_avx2<T>(P, split, packed_k, packed_v, begin, end);
    }
#endif
  };
  const int64_t pairs = batch * heads;
  if (pairs >= 4 * at::get_num_threads()) {  // at most a quarter of a task's imbalance
    kernels::parallel_for(0, pairs, 1, [&](int64_t begin, int64_t end) {
      attend(Split::kHeads, nullptr, nullptr, begin, end);
    });
    return {out, lse};
  }
  auto packed = at::empty({pairs * s_pad * (e + e_pad)}, q.options().dtype(at::kFloat));
  float* kp = packed.mutable_data_ptr<float>();
  float* vp = kp + pairs * s_pad * e;
  const int64_t groups = s_pad / w;
  kernels::parallel_for(0, pairs * groups, 8, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / groups, g = task % groups;
      float* kg = kp + (bh * groups + g) * e * w;
      float* vg = vp + (bh * s_pad + g * w) * e_pad;
      if (w == 16) {
        pack_group<16>(P, bh / heads, bh % heads, g, kg, vg);
      } else {
        pack_group<8>(P, bh / heads, bh % heads, g, kg, vg);
      }
    }
  });
  const int64_t tiles = pairs * ((q_len + kRows - 1) / kRows);
  kernels::parallel_for(
      0, tiles, 1, [&](int64_t begin, int64_t end) { attend(Split::kTiles, kp, vp, begin, end); });
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
  return flash_attention_cpu_typed<c10::BFloat16>(q, k, v, key_lengths, bias, causal, bottom_right,
                                                  scale, w);
}

}  // namespace

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

}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CPU, m) {
  m.impl("flash_attention", TORCH_FN(attnzoo::kernels::flash_attention_cpu));
}
