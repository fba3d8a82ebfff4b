// y = activation(x·Wᵀ + b) with int8 arithmetic, for inference on the CPU (dynamic quantization):
//   the weight once, per output channel n: s_n = max_k |W[n, k]| / 127, Wq = round(W / s_n);
//   each call, per row m of x: r_m = max_k |x[m, k]| / 127, xq = round(x / r_m);
//   y[m, n] = r_m · s_n · Σ_k xq[m, k]·Wq[n, k] + b[n]
// The products run in int8 with int32 sums: attnzoo's own (kernels::int8_matmul_packed_cpu, the
// weight packed once) on processors with AVX-512 VNNI, elsewhere LibTorch's integer matrix product
// (oneDNN: AMX or AVX-VNNI where the CPU has them); quantizing the rows and the scaling back (with
// the bias and the activation) are one pass each, in vector loops of attnzoo's own (kernels/ops.h,
// quantize_rows_int8 and its siblings). Symmetric ranges (zero points 0), so the sums need no
// correction terms.
//
// Per-row activation scales keep one outlier token from costing every other token its precision
// (what a per-tensor scale, as in quantize_dynamic's fbgemm kernels, does). The error against the
// float product is bounded by the two roundings: |Δy[m, n]| ≤ (r_m·Σ_k|W[n, k]|/2 + s_n·Σ_k|x[m,
// k]|/2 + K·r_m·s_n/4).
//
// Two int8 layers in a row (an MLP) pass the first one's output to the second as Int8Rows: its
// scale-back quantizes each activated row while it is in cache, so the hidden activations never
// reach memory as float, and the second layer skips its quantizing pass.
#pragma once

#include <attnzoo/layers/activation.h>

#include <torch/types.h>

namespace attnzoo {

struct Int8Weight {
  torch::Tensor weight_t;  // [K, N] int8: the rounded weight, transposed for the product
  torch::Tensor scale;     // [N] float32: s_n
  // weight_t packed for attnzoo's own int8 product (kernels::int8_matmul_packed_cpu), which the
  // layer then takes: uint8 [⌈N/32⌉, K/4, 32, 4] on processors with AVX-512 VNNI, else undefined.
  torch::Tensor packed;
  int64_t in_features() const { return weight_t.size(0); }
  int64_t out_features() const { return weight_t.size(1); }
};

// Activations quantized per row as int8_linear quantizes its input: xq and r_m above.
struct Int8Rows {
  torch::Tensor values;  // [M, K] int8
  torch::Tensor scales;  // [M] float32 (NaN for a row that held NaN or an infinity)
};

// weight: [N, K] floating point, any device -> its int8 form on the CPU.
Int8Weight quantize_weight_int8(const torch::Tensor& weight);

// x: [..., K] float32 or bfloat16 on the CPU, bias: [N] or undefined -> activation(x·Wᵀ + b)
// [..., N] in x's dtype. A row of x holding NaN or an infinity gives a row of NaN. Not
// differentiable (inference only).
torch::Tensor int8_linear(const torch::Tensor& x, const Int8Weight& weight,
                          const torch::Tensor& bias, Activation activation = Activation::kNone);

// The same layer on rows quantized already: activation(x·Wᵀ + b) [M, N] as `dtype` (float32 or
// bfloat16).
torch::Tensor int8_linear(const Int8Rows& x, const Int8Weight& weight, const torch::Tensor& bias,
                          Activation activation, torch::ScalarType dtype);

// The same layer with its output quantized per row for the next int8 layer: equal to
// quantize_rows_int8 of the float32 result, which is never written.
// x: [..., K] float32 or bfloat16 -> Int8Rows [M, N], M the rows of x (its elements / K)
Int8Rows int8_linear_to_rows(const torch::Tensor& x, const Int8Weight& weight,
                             const torch::Tensor& bias, Activation activation);

}  // namespace attnzoo
