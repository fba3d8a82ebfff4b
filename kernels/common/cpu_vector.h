// Vectors of float32 lanes for attnzoo's CPU kernels, written with the GCC and Clang vector
// extension: the same source compiles for AVX-512 (W = 16), AVX2 (W = 8) or SSE (W = 4), by the
// target attribute of the function the helpers are inlined into. Every helper is always inlined,
// so no vector crosses a call between code of two instruction sets.
#pragma once

#include <cstdint>
#include <cstring>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnzoo::kernels::cpu {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATTNZOO_CPU_X86_KERNELS 1
// The instruction sets the kernels are compiled for beside the baseline, as function attributes.
#define ATTNZOO_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define ATTNZOO_TARGET_AVX2_FMA __attribute__((target("avx2,fma")))

// Whether the processor runs ATTNZOO_TARGET_AVX512 code.
inline bool has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
}

// Whether the processor runs ATTNZOO_TARGET_AVX2_FMA code.
inline bool has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

// Before a loop of a constant trip count: unrolled in full, so that an array of vectors indexed by
// its counter stays in registers.
#if defined(__clang__)
#define ATTNZOO_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define ATTNZOO_UNROLL _Pragma("GCC unroll 16")
#else
#define ATTNZOO_UNROLL
#endif

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

}  // namespace attnzoo::kernels::cpu

#pragma GCC diagnostic pop
