// W float32 lanes (common/cpu_vector.h) read from and written to rows of float32, bfloat16 (as
// its bits, uint16_t) and int32: the loads and stores of the CPU kernels' row passes and
// epilogues, whole vectors or a row's last elements through a padded copy. Always inlined, as
// cpu_vector.h's helpers.
#pragma once

#include <attnzoo/kernels/common/cpu_vector.h>

#include <cstdint>
#include <cstring>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnzoo::kernels::cpu {

// Vector types beside Lanes<W>: W unsigned 32-bit lanes, W bfloat16s and W int8s.
template <int W>
struct Narrow {
  using U = uint32_t __attribute__((vector_size(W * sizeof(uint32_t)), aligned(sizeof(float))));
  using U16 = uint16_t __attribute__((vector_size(W * sizeof(uint16_t)), aligned(2)));
  using I8 = int8_t __attribute__((vector_size(W), aligned(1)));
};

// W elements as float32: float32 as they are, bfloat16 (its bits) widened, int32 converted.
template <int W>
inline __attribute__((always_inline)) typename Lanes<W>::F widen(const float* p) {
  return load<W>(p);
}

template <int W>
inline __attribute__((always_inline)) typename Lanes<W>::F widen(const uint16_t* p) {
  typename Narrow<W>::U16 bits;
  std::memcpy(&bits, p, sizeof bits);
  return (typename Lanes<W>::F)(__builtin_convertvector(bits, typename Narrow<W>::U) << 16);
}

template <int W>
inline __attribute__((always_inline)) typename Lanes<W>::F widen(const int32_t* p) {
  typename Lanes<W>::I v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, typename Lanes<W>::F);
}

// W float32 values stored as float32, or as bfloat16 rounded to nearest even (NaN as 0x7fc0, as
// c10::BFloat16 rounds).
template <int W>
inline __attribute__((always_inline)) void narrow_store(float* p, typename Lanes<W>::F v) {
  store<W>(p, v);
}

template <int W>
inline __attribute__((always_inline)) void narrow_store(uint16_t* p, typename Lanes<W>::F v) {
  using U = typename Narrow<W>::U;
  const U u = (U)v;
  const U rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const U nan = (U)((u & 0x7fffffffu) > 0x7f800000u);
  const typename Narrow<W>::U16 bits =
      __builtin_convertvector((rounded & ~nan) | (0x7fc0u & nan), typename Narrow<W>::U16);
  std::memcpy(p, &bits, sizeof bits);
}

// Row r of an [M, n] problem: Lanes over the whole vectors, then the last n mod W elements
// through W-long copies (padding with zeros), so that the tail takes the same arithmetic.
template <int W, typename Body>
inline __attribute__((always_inline)) void for_vectors(int64_t n, Body&& body) {
  const int64_t whole = n - n % W;
  for (int64_t j = 0; j < whole; j += W) body(j, W);
  if (whole < n) body(whole, n - whole);
}

// Loads W elements at p + j, or the `count` < W left (zeros after them).
template <int W, typename T>
inline __attribute__((always_inline)) typename Lanes<W>::F widen_part(const T* p, int64_t count) {
  if (count == W) return widen<W>(p);
  T padded[W] = {};
  std::memcpy(padded, p, static_cast<size_t>(count) * sizeof(T));
  return widen<W>(padded);
}

template <int W, typename T>
inline __attribute__((always_inline)) void store_part(T* p, int64_t count, typename Lanes<W>::F v) {
  if (count == W) return narrow_store<W>(p, v);
  T padded[W];
  narrow_store<W>(padded, v);
  std::memcpy(p, padded, static_cast<size_t>(count) * sizeof(T));
}

}  // namespace attnzoo::kernels::cpu

#pragma GCC diagnostic pop
