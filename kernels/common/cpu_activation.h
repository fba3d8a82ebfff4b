// The activations the CPU kernels apply to a vector of float32 lanes (common/cpu_vector.h) in
// their epilogues, in vector arithmetic (no libm call in the loops):
//   GELU (erf):  x·Φ(x), with 2Φ(x) = erfc(−x/√2) and erfc(a) ≈ t·P(t)·e^(−a²), t = 1/(1 + p·a)
//                for a ≥ 0 (Abramowitz and Stegun 7.1.26, |error| ≤ 1.5·10⁻⁷), 2 − erfc(a) for
//                the other sign: |y − gelu(x)| ≤ 1.2·10⁻⁷·|x| plus float32 rounding.
//   GELU (tanh): x·σ(2u), u = √(2/π)·(x + 0.044715·x³), as 1/(1 + e^(−2u)) or e^(2u)/(1 + e^(2u))
//                by the sign of u, so that the exponential never overflows.
//   SiLU:        x·σ(x), the same way.
//   ReLU:        max(x, 0), NaN kept.
// e^x for x ≤ 0 is exp_nonpositive (relative error about 2·10⁻⁷).
#pragma once

#include <attnzoo/kernels/common/cpu_vector.h>

#include <c10/util/Exception.h>

#include <string>
#include <type_traits>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnzoo::kernels::cpu {

// The activation an epilogue applies, by the names the ops take: "none", "gelu", "gelu_tanh",
// "silu", "relu".
enum class Act { kNone, kGelu, kGeluTanh, kSilu, kRelu };

// The activation called `name`; an error naming `op` for any other name.
inline Act parse_activation(const std::string& name, const char* op) {
  if (name == "none") return Act::kNone;
  if (name == "gelu") return Act::kGelu;
  if (name == "gelu_tanh") return Act::kGeluTanh;
  if (name == "silu") return Act::kSilu;
  if (name == "relu") return Act::kRelu;
  TORCH_CHECK_VALUE(false, op, ": activation must be none, gelu, gelu_tanh, silu or relu, got '",
                    name, "'");
}

// f(std::integral_constant<Act, A>{}) for A = act: an epilogue's activation, chosen at run time,
// as the template argument its code is compiled for.
template <typename F>
inline decltype(auto) with_activation(Act act, F&& f) {
  switch (act) {
    case Act::kGelu:
      return f(std::integral_constant<Act, Act::kGelu>{});
    case Act::kGeluTanh:
      return f(std::integral_constant<Act, Act::kGeluTanh>{});
    case Act::kSilu:
      return f(std::integral_constant<Act, Act::kSilu>{});
    case Act::kRelu:
      return f(std::integral_constant<Act, Act::kRelu>{});
    case Act::kNone:
      break;
  }
  return f(std::integral_constant<Act, Act::kNone>{});
}

// σ-like factor s/(1 + e) with e = e^(−|z|) and s = 1 for z ≥ 0, e for z < 0: σ(z) without an
// overflowing exponential.
template <int W>
inline __attribute__((always_inline)) typename Lanes<W>::F sigmoid(typename Lanes<W>::F z) {
  using F = typename Lanes<W>::F;
  using I = typename Lanes<W>::I;
  const F magnitude = (F)((I)z & 0x7fffffff);
  const F e = exp_nonpositive<W>(-magnitude);
  return select<W>((I)(z < F{}), e, splat<W>(1.0f)) / (1.0f + e);
}

template <Act A, int W>
inline __attribute__((always_inline)) typename Lanes<W>::F activate(typename Lanes<W>::F x) {
  using F = typename Lanes<W>::F;
  using I = typename Lanes<W>::I;
  if constexpr (A == Act::kNone) {
    return x;
  } else if constexpr (A == Act::kRelu) {
    return select<W>((I)(x < F{}), F{}, x);
  } else if constexpr (A == Act::kSilu) {
    return x * sigmoid<W>(x);
  } else if constexpr (A == Act::kGeluTanh) {
    const F u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x * sigmoid<W>(u + u);
  } else {
    // 2Φ(x) = erfc(−z), z = x/√2: erfc(a) for z < 0 (a = |z|), 2 − erfc(a) for z ≥ 0.
    const F z = x * 0.7071067811865476f;
    const F a = (F)((I)z & 0x7fffffff);
    const F t = 1.0f / (1.0f + 0.3275911f * a);
    F poly = splat<W>(1.061405429f);
    poly = poly * t - 1.453152027f;
    poly = poly * t + 1.421413741f;
    poly = poly * t - 0.284496736f;
    poly = poly * t + 0.254829592f;
    const F erfc = poly * t * exp_nonpositive<W>(-(a * a));
    return 0.5f * x * select<W>((I)(z < F{}), erfc, 2.0f - erfc);
  }
}

}  // namespace attnzoo::kernels::cpu

#pragma GCC diagnostic pop
