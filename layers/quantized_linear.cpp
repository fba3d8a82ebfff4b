#include <attnzoo/kernels/ops.h>
#include <attnzoo/layers/attention_mask.h>  // shape_string
#include <attnzoo/layers/cpu_features.h>
#include <attnzoo/layers/environment_switch.h>
#include <attnzoo/layers/quantized_linear.h>

#include <torch/torch.h>

#include <optional>

namespace attnzoo {
namespace {

// Whether the CPU has instructions for int8 dot products (VNNI, AMX), with which LibTorch's
// integer matrix product goes through oneDNN. Without them it takes a scalar loop, 25 to 65 times
// slower than the float32 product of the same shape (measured on a 2-core AVX2 EPYC: 1 GOP/s).
bool int8_products_supported() {
  static const bool supported =
      detail::cpu_has("avx512_vnni") || detail::cpu_has("avx_vnni") || detail::cpu_has("amx_int8");
  return supported;
}

// Whether quantize_weight_int8 packs weights of `in_features` inputs for attnzoo's own int8
// product (kernels::int8_matmul_packed_cpu: AVX-512 VNNI). ATTNZOO_INT8_MATMUL=onednn keeps every
// layer on LibTorch's, e.g. to compare.
bool own_int8_product(int64_t in_features) {
  static const bool on = detail::on_unless_environment("ATTNZOO_INT8_MATMUL", "onednn") &&
                         kernels::int8_matmul_packed_cpu_available();
  return on && in_features % 4 == 0 && in_features <= (int64_t{1} << 16);
}

// Σ_k q[m, k]·Wq[k, n]: int32 through attnzoo's own product where the weight is packed for it,
// else LibTorch's integer product where the CPU has int8 dot products. Elsewhere the float32
// product of the same integers: each partial sum is an integer, exact in float32 below 2^24, which
// K·127² stays below for K <= 1040; past that, a sum off by at most a few units of 2^24-scale
// values (a relative 10^-7), far inside the rounding bound above.
torch::Tensor integer_product(const torch::Tensor& q, const Int8Weight& weight) {
  if (weight.packed.defined()) {
    return kernels::int8_matmul_packed_cpu(q, weight.packed, weight.out_features());
  }
  if (int8_products_supported()) return at::_int_mm(q, weight.weight_t).contiguous();
  return torch::mm(q.to(torch::kFloat), weight.weight_t.to(torch::kFloat));
}

// x as rows [M, K] for the product, checked.
torch::Tensor input_rows(const torch::Tensor& x, int64_t k, const char* op) {
  TORCH_CHECK_VALUE(x.dim() >= 1 && x.size(-1) == k && x.device().is_cpu() &&
                        (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16),
                    op, ": x must be float32 or bfloat16 [..., K = ", k, "] on the CPU, got ",
                    shape_string(x.sizes()), " ", x.scalar_type(), " on ", x.device().str());
  return x.reshape({-1, k}).contiguous();
}

// The bias as the scale-back reads it (float32), checked.
std::optional<torch::Tensor> float_bias(const torch::Tensor& bias, int64_t n, const char* op) {
  TORCH_CHECK_VALUE(!bias.defined() || (bias.dim() == 1 && bias.size(0) == n), op,
                    ": bias must be [N = ", n, "], got ",
                    bias.defined() ? shape_string(bias.sizes()) : "undefined");
  if (!bias.defined()) return std::nullopt;
  return bias.detach().to(torch::kCPU, torch::kFloat).contiguous();
}

Int8Rows quantized_rows(const torch::Tensor& rows) {
  auto [values, scales] = kernels::quantize_rows_int8(rows);
  return {values, scales};
}

// activation(in·Wᵀ + b) as dtype: the integer product, then its scale-back.
torch::Tensor scaled_product(const Int8Rows& in, const Int8Weight& weight,
                             const std::optional<torch::Tensor>& bias, Activation activation,
                             torch::ScalarType dtype) {
  if (in.values.size(0) == 0) {
    return torch::empty({0, weight.out_features()}, in.scales.options().dtype(dtype));
  }
  torch::NoGradGuard no_grad;
  if (weight.packed.defined()) {  // the scale-back in the product's tiles
    return kernels::int8_linear_packed_cpu(in.values, in.scales, weight.packed, weight.scale, bias,
                                           to_string(activation), dtype);
  }
  const auto acc = integer_product(in.values, weight);  // [M, N] int32 or float32
  return kernels::dequantize_rows_int8(acc, in.scales, weight.scale, bias, to_string(activation),
                                       dtype);
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
  Int8Weight quantized{q.t().contiguous(), scale.contiguous(), {}};
  if (own_int8_product(quantized.in_features())) {
    quantized.packed = kernels::pack_int8_weight_cpu(quantized.weight_t);
  }
  return quantized;
}

torch::Tensor int8_linear(const Int8Rows& x, const Int8Weight& weight, const torch::Tensor& bias,
                          Activation activation, torch::ScalarType dtype) {
  constexpr const char* op = "int8_linear";
  TORCH_CHECK_VALUE(x.values.dim() == 2 && x.values.size(1) == weight.in_features() &&
                        x.values.scalar_type() == torch::kChar,
                    op, ": rows must be int8 [M, K = ", weight.in_features(), "], got ",
                    shape_string(x.values.sizes()), " ", x.values.scalar_type());
  return scaled_product(x, weight, float_bias(bias, weight.out_features(), op), activation, dtype);
}

torch::Tensor int8_linear(const torch::Tensor& x, const Int8Weight& weight,
                          const torch::Tensor& bias, Activation activation) {
  constexpr const char* op = "int8_linear";
  const auto rows = input_rows(x, weight.in_features(), op);
  const auto b = float_bias(bias, weight.out_features(), op);
  auto sizes = x.sizes().vec();
  sizes.back() = weight.out_features();
  return scaled_product(quantized_rows(rows), weight, b, activation, x.scalar_type()).view(sizes);
}

Int8Rows int8_linear_to_rows(const torch::Tensor& x, const Int8Weight& weight,
                             const torch::Tensor& bias, Activation activation) {
  constexpr const char* op = "int8_linear_to_rows";
  const auto rows = input_rows(x, weight.in_features(), op);
  const auto b = float_bias(bias, weight.out_features(), op);
  const auto in = quantized_rows(rows);
  if (rows.size(0) == 0) {
    return {torch::empty({0, weight.out_features()}, in.values.options()), in.scales};
  }
  torch::NoGradGuard no_grad;
  const auto acc = integer_product(in.values, weight);
  auto [values, scales] =
      kernels::requantize_rows_int8(acc, in.scales, weight.scale, b, to_string(activation));
  return {values, scales};
}

}  // namespace attnzoo
