#pragma once
// Runtime value -> compile-time constant, so that kernels are templates on what would otherwise be
// a branch inside the hot loop. Usage:
//
//   BOOL_SWITCH(params.tanh_approximation, kTanh, [&] { launch<T, kTanh>(params, stream); });
//
// The body is instantiated once per value, so every switch doubles the code generated from it:
// switch only on what changes the kernel's inner loop.

// static constexpr rather than plain constexpr: nvcc (and MSVC) do not always treat a non-static
// constexpr local as usable inside the nested lambda without capturing it.
#define BOOL_SWITCH(COND, CONST_NAME, ...)     \
  [&] {                                        \
    if (COND) {                                \
      static constexpr bool CONST_NAME = true; \
      return __VA_ARGS__();                    \
    }                                          \
    static constexpr bool CONST_NAME = false;  \
    return __VA_ARGS__();                      \
  }()
