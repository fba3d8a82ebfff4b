#pragma once
// attnzoo's fused ops, as C++ functions. Each one calls its op schema (namespace `attnzoo`, see
// library.cpp) through the LibTorch dispatcher, so the device of the tensors picks the fused CUDA
// kernel or the pure-LibTorch reference, and autograd works on both; callers never test whether
// the CUDA kernels were built.
#include <torch/types.h>

#include <optional>
#include <string>
#include <tuple>

namespace attnzoo::kernels {

// y = gelu(x + bias), the epilogue of an MLP's first linear layer. approximate: "none" (exact erf
// GELU) or "tanh", as for at::gelu. x: any floating dtype, any strides; bias: x's dtype and device.
// Differentiable in x and bias.
// x: [..., N], bias: [N] -> [..., N]
torch::Tensor bias_gelu(const torch::Tensor& x, const torch::Tensor& bias,
                        const std::string& approximate = "none");

// The middle of a Conformer convolution module at inference, GLU -> depthwise conv1d ->
// BatchNorm (folded) -> Swish, in one pass:
//   a[b, t, c] = x[b, t, c] * sigmoid(x[b, t, C + c]), zeroed at t >= lengths[b] (when given)
//   z = depthwise_conv1d(a over t, weight, bias): zero padding, left_pad frames on the left and
//       K - 1 - left_pad on the right ((K - 1) / 2: 'same'; K - 1: causal)
//   y = silu(z * scale[c] + shift[c])
// The caller folds the BatchNorm: scale = gamma / sqrt(running_var + eps), shift = beta -
// running_mean * scale (and may fold the conv bias into shift). x: any floating dtype and any
// strides, logically [B, T, 2C]: channels last (a Linear's output) or the transposed view of the
// module's channels-first [B, 2C, T] Conv1d output, both read without a copy; the other tensors
// x's dtype and device, lengths any integer dtype. Output contiguous [B, T, C]. On CUDA, fp32, fp16
// and bf16 run the fused kernel (float32 arithmetic); the rest, and every CPU tensor, the LibTorch
// reference. Differentiable in x, weight, bias, scale and shift (the backward is LibTorch ops).
// x: [B, T, 2C], weight: [C, K], bias, scale, shift: [C], lengths: integer [B] -> [B, T, C]
torch::Tensor glu_dwconv_swish(const torch::Tensor& x, const torch::Tensor& weight,
                               const std::optional<torch::Tensor>& bias, const torch::Tensor& scale,
                               const torch::Tensor& shift, int64_t left_pad,
                               const std::optional<torch::Tensor>& lengths = std::nullopt);

// The pre-norm block boundary `x = x + branch; h = layer_norm(x)` in one pass: sum = x + residual
// (the new residual stream) and normed = layer_norm(sum) over the last dim, with the optional
// affine weight and bias (torch::nn::functional::layer_norm: biased variance, eps inside the
// sqrt). Statistics in float32 (float64 for float64 inputs); both outputs in x's dtype,
// contiguous. x, residual: any floating dtype, any strides, the same shape; weight, bias: x's
// dtype and device. On CUDA, fp32, fp16 and bf16 run the fused kernel; the rest, and every CPU
// tensor, the LibTorch reference. Differentiable in x, residual, weight and bias through either
// output (the backward reuses the forward's statistics: a fused kernel on CUDA for N <= 1024).
// x, residual: [..., N], weight, bias: [N] -> sum [..., N], normed [..., N]
std::tuple<torch::Tensor, torch::Tensor> add_layer_norm(
    const torch::Tensor& x, const torch::Tensor& residual,
    const std::optional<torch::Tensor>& weight = std::nullopt,
    const std::optional<torch::Tensor>& bias = std::nullopt, double eps = 1e-5);

// Softmax attention in O(L + S) memory per head (FlashAttention): out[b, i, h] =
// softmax_j(scale q[b, i, h] . k[b, j, h] + bias[b, h, i, j]) v[b, j, h] over the visible keys:
// j < key_lengths[b] (when given) and, with `causal`, j <= i (top-left) or j <= i + S - L
// (bottom_right). A row without a visible key gives zeros (lse -inf). scale: 1/sqrt(E) by default.
// On CUDA, bf16 and fp16 with E <= 128 run the fused kernel (E padded up to 32, 64, 96, 128); on
// the CPU, float32 and bfloat16 run the CPU kernel (flash_attn/flash_attn_cpu.cpp) where the
// processor has AVX2 + FMA; the rest the LibTorch reference. Differentiable in q, k, v and bias,
// through flash_attention_backward. The bias is q's dtype or float32; the kernel adds it in
// float32, so a finite bias stays finite (a row masked by -1e9 gets float32 math's average, not
// zeros; its gradients, though, are not float32 math's: kernels/README.md). q: [B, L, H, E], k, v:
// [B, S, H, E], key_lengths: int [B], bias: [1|B, 1|H, L, S]
//   -> out [B, L, H, E] (q's dtype), lse [B, H, L] (float32)
std::tuple<torch::Tensor, torch::Tensor> flash_attention(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const std::optional<torch::Tensor>& key_lengths = std::nullopt,
    const std::optional<torch::Tensor>& bias = std::nullopt, bool causal = false,
    bool bottom_right = false, std::optional<double> scale = std::nullopt);

// The float32 lanes of the vector registers flash_attention's CPU kernel uses on this processor:
// 16 (AVX-512), 8 (AVX2 + FMA), or 0 where float32 and bfloat16 CPU calls take the LibTorch
// reference. ATTNZOO_FLASH_CPU_ISA=avx2 or =reference in the environment (read at each call)
// lowers it, to compare the paths on one machine.
int64_t flash_attention_cpu_vector_width();

// Whether bfloat16 CPU calls of flash_attention take the processor's AVX512-BF16 dot products
// (the probabilities rounded to bfloat16 for the value product, as LibTorch's bfloat16 attention
// does) rather than float32 arithmetic. ATTNZOO_FLASH_CPU_ISA set to anything but avx512bf16
// (avx512, avx2, reference) turns them off.
bool flash_attention_cpu_bfloat16_products();

// Softmax attention with Transformer-XL's relative position term (Dai et al. 2019, section 3.3),
// the forward pass of flash_attention's CPU kernel with a third product in its tiles:
//   out_i = Σ_j softmax_j(scale · [q_content_i·k_j + q_position_i·positions_{L−1−i+j}]) · v_j
// over the keys j < key_lengths[b] (all without). q_content = q + u and q_position = q + v
// (the content and position biases) [B, L, H, E]; k, v [B, S, H, E]; positions
// [1|B, L + S − 1, H, E], row r the relative position S − 1 − r; all read by strides, float32 or
// bfloat16 (AVX512-BF16 products where flash_attention_cpu_bfloat16_products()). A row without a
// key gets zeros. Returns out [B, L, H, E]. No [L, S] or [L, L + S − 1] matrix is formed. Needs
// flash_attention_cpu_vector_width() > 0; no gradients (inference).
torch::Tensor flash_attention_relative_cpu(const torch::Tensor& q_content,
                                           const torch::Tensor& q_position, const torch::Tensor& k,
                                           const torch::Tensor& v, const torch::Tensor& positions,
                                           const std::optional<torch::Tensor>& key_lengths,
                                           double scale);

// The passes around the int8 matrix product of the CPU's int8 linear layers
// (layers/quantized_linear.h), in vector loops for AVX-512, AVX2 + FMA or the baseline by what the
// processor supports (int8_rows_cpu_vector_width: 16, 8 or 4 float32 lanes; ATTNZOO_INT8_ROWS_ISA
// =avx2 or =baseline in the environment, read at each call, lowers it). Inference only (no
// gradients); CPU tensors, rows contiguous.
//
// quantize_rows_int8: symmetric per-row quantization, scale_m = max_k |x[m, k]| / 127 (1 for a
// row of zeros) and values = round(x / scale_m) (ties to even, in [-127, 127]); a row holding NaN
// or an infinity gets scale NaN and values 0, so that whatever it meets downstream is NaN.
// x: float32 or bfloat16 [M, K] -> values int8 [M, K], scales float32 [M]
std::tuple<torch::Tensor, torch::Tensor> quantize_rows_int8(const torch::Tensor& x);

// The product's scale-back: y[m, n] = act(acc[m, n]·row_scales[m]·col_scales[n] + bias[n]) in
// float32 arithmetic, written as `dtype` (float32, or bfloat16 rounded to nearest even). act:
// "none", "gelu" (erf; |error| <= 2.4e-7·|x|, float32 rounding included), "gelu_tanh", "silu",
// "relu".
// acc: int32 or float32 [M, N], row_scales [M], col_scales [N], bias [N] float32 -> y [M, N]
torch::Tensor dequantize_rows_int8(const torch::Tensor& acc, const torch::Tensor& row_scales,
                                   const torch::Tensor& col_scales,
                                   const std::optional<torch::Tensor>& bias,
                                   const std::string& activation, torch::ScalarType dtype);

// quantize_rows_int8 of dequantize_rows_int8's float32 y, without y in memory: the input of the
// next int8 layer (an MLP's hidden activations), each row held in cache between the two passes.
//   -> values int8 [M, N], scales float32 [M]
std::tuple<torch::Tensor, torch::Tensor> requantize_rows_int8(
    const torch::Tensor& acc, const torch::Tensor& row_scales, const torch::Tensor& col_scales,
    const std::optional<torch::Tensor>& bias, const std::string& activation);

// The float32 lanes of the int8 row passes on this processor: 16 (AVX-512), 8 (AVX2 + FMA) or 4.
int64_t int8_rows_cpu_vector_width();

// The float32 linear layer of CPU inference, y = act(x·Wᵀ + b), with the weight packed once
// (linear_cpu/linear_cpu.cpp): on AVX-512 processors, where linear_packed_cpu_available().
// Inference only (no gradients).
//
// pack_linear_weight_cpu: weight float32 [N, K] -> packed float32 [⌈N/32⌉, K, 32]
// linear_packed_cpu: x float32 [..., K], packed (of an N x K weight), bias float32 [N] ->
//   y float32 [..., N] (contiguous), each element one float32 sum over k in order, begun at the
//   bias; activation as dequantize_rows_int8's.
torch::Tensor pack_linear_weight_cpu(const torch::Tensor& weight);
torch::Tensor linear_packed_cpu(const torch::Tensor& x, const torch::Tensor& packed,
                                int64_t out_features, const std::optional<torch::Tensor>& bias,
                                const std::string& activation);
bool linear_packed_cpu_available();

// The int8 matrix product of the CPU's int8 linear layers, x·W with int32 sums, the weight packed
// once (int8_matmul/int8_matmul_cpu.cpp): on processors with AVX-512 VNNI, where
// int8_matmul_packed_cpu_available(). Exact: equal to the product of the integers.
//
// pack_int8_weight_cpu: weight_t int8 [K, N] (K a multiple of 4, at most 65536)
//   -> packed uint8 [⌈N/32⌉, K/4, 32, 4]
// int8_matmul_packed_cpu: x int8 [M, K], packed (of a K x N weight_t) -> int32 [M, N]
torch::Tensor pack_int8_weight_cpu(const torch::Tensor& weight_t);
torch::Tensor int8_matmul_packed_cpu(const torch::Tensor& x, const torch::Tensor& packed,
                                     int64_t out_features);
// int8_linear_packed_cpu: dequantize_rows_int8 of int8_matmul_packed_cpu's sums, applied to each
// tile in registers in the same order (the int32 sums never in memory; with GELU or SiLU the two
// may differ by an ulp, where the compiler contracts the polynomial differently).
//   x int8 [M, K], row_scales float32 [M], packed, col_scales float32 [N], bias float32 [N],
//   activation as dequantize_rows_int8's -> y [M, N] as dtype (float32 or bfloat16)
torch::Tensor int8_linear_packed_cpu(const torch::Tensor& x, const torch::Tensor& row_scales,
                                     const torch::Tensor& packed, const torch::Tensor& col_scales,
                                     const std::optional<torch::Tensor>& bias,
                                     const std::string& activation, torch::ScalarType dtype);
bool int8_matmul_packed_cpu_available();

// The gradients of flash_attention's out given d_out, from its out and lse (what autograd calls;
// exposed for tests and custom backward passes). On CUDA, bf16 and fp16 with E <= 128 run the fused
// backward kernel (FlashAttention-2's: no [L, S] matrix in memory); the rest the LibTorch
// reference, which recomputes the log-sum-exp instead of reading lse. d_bias only with
// bias_requires_grad (and a bias), summed over the bias's broadcast dims.
// out, d_out: [B, L, H, E], lse: [B, H, L] (float32), the others as flash_attention
//   -> dq [B, L, H, E], dk, dv [B, S, H, E], d_bias [1|B, 1|H, L, S]
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, std::optional<torch::Tensor>>
flash_attention_backward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         const torch::Tensor& out, const torch::Tensor& d_out,
                         const torch::Tensor& lse,
                         const std::optional<torch::Tensor>& key_lengths = std::nullopt,
                         const std::optional<torch::Tensor>& bias = std::nullopt,
                         bool causal = false, bool bottom_right = false,
                         std::optional<double> scale = std::nullopt,
                         bool bias_requires_grad = false);

// One line for `attnzoo version`: "CUDA kernels: built for sm_80, sm_90a (CUDA 13.0.88)" or
// "CUDA kernels: not built".
std::string build_info();

}  // namespace attnzoo::kernels
