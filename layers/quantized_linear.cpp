#include <attnzoo/kernels/cpu_parallel.h>
#include <attnzoo/layers/attention_mask.h>  // shape_string
#include <attnzoo/layers/cpu_features.h>
#include <attnzoo/layers/quantized_linear.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace attnzoo {
namespace {

constexpr float kRound = 12582912.0f;  // 1.5·2^23

// Rows of x [M, K] float32 -> int8 [M, K] and their scales r_m [M] (1 for an all-zero row).
void quantize_rows(const torch::Tensor& x, torch::Tensor& q, torch::Tensor& scales) {
  const int64_t m = x.size(0), k = x.size(1);
  const float* in = x.data_ptr<float>();
  int8_t* out = q.data_ptr<int8_t>();
  float* r = scales.data_ptr<float>();
  attnzoo::kernels::parallel_for(0, m, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const float* xr = in + row * k;
      // Both loops are written so that the compiler vectorises them. The largest magnitude as
      // the largest bit pattern with the sign cleared (non-negative floats order as integers;
      // an integer maximum vectorises where a float one, with its NaN rules, does not).
      int32_t amax_bits = 0;
      for (int64_t j = 0; j < k; ++j) {
        int32_t bits;
        std::memcpy(&bits, xr + j, sizeof bits);
        bits &= 0x7fffffff;
        amax_bits = amax_bits > bits ? amax_bits : bits;
      }
      // A NaN or an infinity (exponent all ones) leaves the row no meaningful scale: its outputs
      // are NaN.
      const bool finite = amax_bits < 0x7f800000;
      float amax;
      std::memcpy(&amax, &amax_bits, sizeof amax);
      const float scale = !finite ? NAN : amax > 0.0f ? amax / 127.0f : 1.0f;
      int8_t* qr = out + row * k;
      r[row] = scale;
      if (!finite) {  // NaN times anything stays NaN, whose conversion to an integer is undefined
        std::memset(qr, 0, static_cast<size_t>(k));
        continue;
      }
      const float inverse = 1.0f / scale;
      for (int64_t j = 0; j < k; ++j) {
        // |x·inverse| <= 127: adding and removing 1.5·2^23 rounds it to the nearest integer (ties
        // to even) in float32's default rounding mode.
        const float v = xr[j] * inverse;
        qr[j] = static_cast<int8_t>(static_cast<int32_t>((v + kRound) - kRound));
      }
    }
  });
}

// Whether the CPU has instructions for int8 dot products (VNNI, AMX), with which LibTorch's
// integer matrix product goes through oneDNN. Without them it takes a scalar loop, 25 to 65 times
// slower than the float32 product of the same shape (measured on a 2-core AVX2 EPYC: 1 GOP/s).
bool int8_products_supported() {
  static const bool supported =
      detail::cpu_has("avx512_vnni") || detail::cpu_has("avx_vnni") || detail::cpu_has("amx_int8");
  return supported;
}

// Σ_k q[m, k]·Wq[k, n]: int32 through LibTorch's integer product where the CPU has int8 dot
// products. Elsewhere the float32 product of the same integers: each partial sum is an integer,
// exact in float32 below 2^24, which K·127² stays below for K <= 1040; past that, a sum off by at
// most a few units of 2^24-scale values (a relative 10^-7), far inside the rounding bound above.
torch::Tensor integer_product(const torch::Tensor& q, const torch::Tensor& weight_t) {
  if (int8_products_supported()) return at::_int_mm(q, weight_t).contiguous();
  return torch::mm(q.to(torch::kFloat), weight_t.to(torch::kFloat));
}

// y[m, n] = acc[m, n]·r_m·s_n + b[n], float32; acc int32 or float32.
template <typename Acc>
void dequantize(const torch::Tensor& acc, const torch::Tensor& row_scales,
                const torch::Tensor& col_scales, const torch::Tensor& bias, torch::Tensor& y) {
  const int64_t m = acc.size(0), n = acc.size(1);
  const Acc* a = acc.data_ptr<Acc>();
  const float* r = row_scales.data_ptr<float>();
  const float* s = col_scales.data_ptr<float>();
  const float* b = bias.defined() ? bias.data_ptr<float>() : nullptr;
  float* out = y.data_ptr<float>();
  attnzoo::kernels::parallel_for(0, m, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const Acc* ar = a + row * n;
      float* yr = out + row * n;
      const float rm = r[row];
      if (b != nullptr) {
        for (int64_t j = 0; j < n; ++j) yr[j] = static_cast<float>(ar[j]) * (rm * s[j]) + b[j];
      } else {
        for (int64_t j = 0; j < n; ++j) yr[j] = static_cast<float>(ar[j]) * (rm * s[j]);
      }
    }
  });
}

}  // namespace

Int8Weight quantize_weight_int8(const torch::Tensor& weight) {
  TORCH_CHECK_VALUE(weight.dim() == 2 && weight.is_floating_point() && weight.numel() > 0,
                    "quantize_weight_int8: weight must be a non-empty floating-point [N, K], got ",
                    shape_string(weight.sizes()));
  torch::NoGradGuard no_grad;
  const auto w = weight.detach().to(torch::kCPU, torch::kFloat);
  TORCH_CHECK_VALUE(torch::isfinite(w).all().item<bool>(),
                    "quantize_weight_int8: the weight holds NaN or infinity");
  auto scale = w.abs().amax(1) / 127.0;  // [N]
  scale.masked_fill_(scale == 0, 1.0);
  const auto q = torch::round(w / scale.unsqueeze(1)).clamp_(-127, 127).to(torch::kChar);
  return {q.t().contiguous(), scale.contiguous()};
}

torch::Tensor int8_linear(const torch::Tensor& x, const Int8Weight& weight,
                          const torch::Tensor& bias) {
  const int64_t k = weight.in_features(), n = weight.out_features();
  TORCH_CHECK_VALUE(x.dim() >= 1 && x.size(-1) == k && x.device().is_cpu() &&
                        (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16),
                    "int8_linear: x must be float32 or bfloat16 [..., K = ", k,
                    "] on the CPU, got ", shape_string(x.sizes()), " ", x.scalar_type(), " on ",
                    x.device().str());
  TORCH_CHECK_VALUE(!bias.defined() || (bias.dim() == 1 && bias.size(0) == n),
                    "int8_linear: bias must be [N = ", n, "], got ",
                    bias.defined() ? shape_string(bias.sizes()) : "undefined");
  torch::NoGradGuard no_grad;
  auto sizes = x.sizes().vec();
  const auto rows = x.reshape({-1, k}).to(torch::kFloat).contiguous();
  const int64_t m = rows.size(0);
  sizes.back() = n;
  if (m == 0) return torch::empty(sizes, x.options());
  auto q = torch::empty({m, k}, rows.options().dtype(torch::kChar));
  auto row_scales = torch::empty({m}, rows.options());
  quantize_rows(rows, q, row_scales);
  const auto acc = integer_product(q, weight.weight_t);  // [M, N] int32 or float32
  auto y = torch::empty({m, n}, rows.options());
  const auto b = bias.defined() ? bias.detach().to(torch::kFloat).contiguous() : torch::Tensor();
  if (acc.scalar_type() == torch::kInt) {
    dequantize<int32_t>(acc, row_scales, weight.scale, b, y);
  } else {
    dequantize<float>(acc, row_scales, weight.scale, b, y);
  }
  return y.view(sizes).to(x.scalar_type());
}

}  // namespace attnzoo
