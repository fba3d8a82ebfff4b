// The activations the CPU kernels apply to a vector of float32 lanes (common/cpu_vector.h) in
// their epilogues, in vector arithmetic (no libm call in the loops):
//   GELU (erf):  x·Φ(x) = x·r(x) + x/2 with r(x) = ½·erf(x/√2) as c·P(c²)/Q(c²), c = x clamped to
//                ±4√2 (where ½·erf is within 8·10⁻⁹ of ½), P and Q of degree 5: a rational minimax
//                fit (tools/scripts/fit_gelu_erf.py), 17 operations and no exponential;
//                |y − gelu(x)| ≤ 2.4·10⁻⁷·|x| with float32's rounding included (2.2·10⁻⁷ where
//                the compiler fuses the multiply-adds). For x < 0 the output is a difference
//                of terms of x's size: its error is small against |x|, not against |y|.
//   GELU (tanh): x·σ(2u), u = √(2/π)·(x + 0.044715·x³), as 1/(1 + e^(−2u)) or e^(2u)/(1 + e^(2u))
//                by the sign of u, so that the exponential never overflows.
//   SiLU:        x·σ(x), the same way.
//   ReLU:        max(x, 0), NaN kept.
// e^x for x ≤ 0 is exp_nonpositive (relative error about 2·10⁻⁷).
#pragma once

#include <attnzoo/kernels/common/cpu_vector.h>

#include <c10/util/Exception.h>

#include <cstddef>
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

// c[0] + c[1]·s + ... + c[N − 1]·s^(N − 1) by Horner's rule, a multiply-add a step.
template <int W, std::size_t N>
inline __attribute__((always_inline)) typename Lanes<W>::F horner(typename Lanes<W>::F s,
                                                                  const float (&c)[N]) {
  typename Lanes<W>::F p = splat<W>(c[N - 1]);
  ATTNZOO_UNROLL for (std::size_t i = N - 1; i > 0; --i) p = p * s + c[i - 1];
  return p;
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
    constexpr float kLimit = 5.65685425f;  // 4√2
    F c = select<W>((I)(x > kLimit), splat<W>(kLimit), x);
    c = select<W>((I)(c < -kLimit), splat<W>(-kLimit), c);
    const F s = c * c;
    // tools/scripts/fit_gelu_erf.py's coefficients, lowest degree first.
    static constexpr float kP[] = {0.39894226f,    0.03306235f,    0.0046202284f,
                                   0.00016007472f, 6.2211675e-06f, 2.2835145e-08f};
    static constexpr float kQ[] = {1.0f,          0.24954146f,   0.028171966f,
                                   0.0018337116f, 7.052036e-05f, 1.1908935e-06f};
    const F p = horner<W>(s, kP);
    const F q = horner<W>(s, kQ);
    const F r = c * p / q;
    const F half = x * 0.5f;
    return x * r + half;
  }
}

}  // namespace attnzoo::kernels::cpu

#pragma GCC diagnostic pop
