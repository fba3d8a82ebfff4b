#!/usr/bin/env python3
"""The coefficients of the erf GELU in the CPU kernels' epilogues (kernels/common/cpu_activation.h).

    gelu(x) = x·Φ(x) = x·r(x) + x/2,   r(x) = ½·erf(x/√2) ≈ c·P(c²)/Q(c²),  c = clamp(x, ±L)

with P of degree 5, Q of degree 5 (Q(0) = 1) and L = 4√2, where ½·erf differs from ½ by 8e-9.
The rational function has no exponential and no branch: 17 vector operations a lane group, where
erfc's form of Abramowitz and Stegun 7.1.26 (a division, an exponential, a select) takes about 36.

The fit: Lawson's iteration of weighted least squares on the linearised error c·P − r·Q, which
approaches the minimax error of r over [0, L] (r is odd, so x ≥ 0 suffices); the best iterate is
kept. Then the coefficients rounded to float32 and the formula evaluated as the kernels evaluate
it, each step rounded to float32, with fused multiply-adds and without them (the SSE path), on a
dense grid against float64: the bounds it prints are the ones the kernel's comment and the tests
state.

    tools/scripts/fit_gelu_erf.py [--iterations 600]

Needs numpy and torch (torch.erf in float64 as the reference): the venv of tools/setup.sh.
"""
import argparse
import math

import numpy as np
import torch

DEGREE_P, DEGREE_Q = 5, 5
LIMIT = 4 * math.sqrt(2)


def half_erf(x: np.ndarray) -> np.ndarray:
    """½·erf(x/√2) in float64."""
    return 0.5 * torch.erf(torch.from_numpy(x / math.sqrt(2))).numpy()


def fit(iterations: int):
    # Dense in the interior, denser at the ends (Chebyshev points), where the minimax error peaks.
    x = np.unique(np.concatenate([(1 - np.cos(np.linspace(0, np.pi, 40001))) * LIMIT / 2,
                                  np.linspace(0, LIMIT, 20001)]))
    s, r = x * x, half_erf(x)
    # Unknowns p0..p5, q1..q5; the residual c·P(s) − r·Q(s) = r at q0 = 1.
    a = np.concatenate([x[:, None] * s[:, None] ** np.arange(DEGREE_P + 1),
                        -r[:, None] * s[:, None] ** np.arange(1, DEGREE_Q + 1)], axis=1)
    weights, q = np.full_like(x, 1 / len(x)), np.ones_like(x)
    best = (math.inf, None, None)
    for _ in range(iterations):
        scale = np.sqrt(weights) / np.abs(q)
        coef = np.linalg.lstsq(a * scale[:, None], r * scale, rcond=None)[0]
        p_coef, q_coef = coef[:DEGREE_P + 1], np.concatenate([[1.0], coef[DEGREE_P + 1:]])
        q = np.polyval(q_coef[::-1], s)
        error = np.abs(x * np.polyval(p_coef[::-1], s) / q - r)
        if error.max() < best[0]:
            best = (error.max(), p_coef, q_coef)
        weights = weights * np.sqrt(error)
        weights /= weights.sum()
    return best


def f32(v):
    return np.asarray(v, dtype=np.float64).astype(np.float32).astype(np.float64)


def gelu_as_the_kernel(x: np.ndarray, p_coef, q_coef, fused: bool) -> np.ndarray:
    """The kernel's arithmetic, each operation rounded to float32: with `fused`, a multiply-add
    once (a product of two float32 values is exact in float64, so rounding the float64 result is
    a fused multiply-add's single rounding), else its product and its sum each (the SSE path)."""
    def fma(a, b, c):
        return f32(a * b + c) if fused else f32(f32(a * b) + c)

    c = np.clip(x, -f32(LIMIT), f32(LIMIT))
    s = f32(c * c)
    p = np.full_like(x, p_coef[-1])
    for k in p_coef[-2::-1]:
        p = fma(p, s, k)
    q = np.full_like(x, q_coef[-1])
    for k in q_coef[-2::-1]:
        q = fma(q, s, k)
    ratio = f32(f32(c * p) / q)
    return fma(x, ratio, 0.5 * x)  # x/2 is exact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=600)
    args = parser.parse_args()
    error, p_coef, q_coef = fit(args.iterations)
    p32, q32 = f32(p_coef), f32(q_coef)
    print(f"minimax error of the fit in float64: {error:.3g} (½·erf)")
    print("P, lowest degree first:", ", ".join(f"{np.float32(v)!r}f".replace("np.float32(", "")
                                               .replace(")", "") for v in p32))
    print("Q, lowest degree first:", ", ".join(f"{np.float32(v)!r}f".replace("np.float32(", "")
                                               .replace(")", "") for v in q32))
    rng = np.random.default_rng(0)
    x = f32(np.concatenate([np.linspace(-12, 12, 6_000_001), rng.standard_normal(2_000_000) * 4]))
    reference = x * (0.5 + half_erf(x))
    for fused in (True, False):
        got = gelu_as_the_kernel(x, p32, q32, fused)
        relative = np.abs(got - reference) / np.maximum(np.abs(x), 1e-30)
        worst = int(np.argmax(relative))
        print(f"float32 as the kernel computes it, {'with' if fused else 'without'} fused "
              f"multiply-adds: |y - gelu(x)| <= {relative.max():.3g}·|x| (worst at x = "
              f"{x[worst]:.6g}; float32's eps {np.finfo(np.float32).eps:.3g})")

if __name__ == "__main__":
    main()
