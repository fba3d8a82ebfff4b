// The passes over memory around the int8 matrix product of the CPU's int8 linear layers
// (layers/quantized_linear.h): quantizing the rows of the input, and scaling the int32 sums back
// to float with the bias and the activation applied (or, for a layer whose output feeds another
// int8 layer, quantizing that result per row at once, so that it never reaches memory as float).
//
// Each pass is a loop over rows, one row at a time in registers or in a cached scratch row, in
// vectors of the GCC and Clang vector extension (common/cpu_vector.h), compiled for AVX-512, for
// AVX2 + FMA and for the baseline and picked at run time by what the processor supports.
//
// The activations are common/cpu_activation.h's.
#include <attnzoo/kernels/common/cpu_activation.h>
#include <attnzoo/kernels/common/cpu_lanes_io.h>
#include <attnzoo/kernels/common/cpu_vector.h>
#include <attnzoo/kernels/cpu_parallel.h>
#include <attnzoo/kernels/ops.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#pragma GCC diagnostic ignored "-Wpsabi"  // vectors never cross a call: common/cpu_vector.h

namespace attnzoo::kernels {
namespace {

using namespace cpu;  // NOLINT(google-build-using-namespace): the vector helpers

constexpr float kRound = 12582912.0f;  // 1.5·2^23: adding and removing it rounds to an integer

// Quantizes one float32 row of k values into q; returns its scale.
template <int W>
inline __attribute__((always_inline)) float quantize_row(const float* x, int64_t k, int8_t* q) {
  using F = typename Lanes<W>::F;
  using I = typename Lanes<W>::I;
  // The largest magnitude as the largest bit pattern with the sign cleared (non-negative floats
  // order as integers; NaN and the infinities above every finite value).
  I amax = {};
  for_vectors<W>(k, [&](int64_t j, int64_t count) {
    const I bits = (I)widen_part<W>(x + j, count) & 0x7fffffff;
    amax = (I)select<W>((I)(bits > amax), (F)bits, (F)amax);
  });
  int32_t amax_bits = 0;
  for (int l = 0; l < W; ++l) amax_bits = std::max(amax_bits, amax[l]);
  if (amax_bits >= 0x7f800000) {  // NaN or an infinity: no meaningful scale, outputs NaN
    std::memset(q, 0, static_cast<size_t>(k));
    return std::numeric_limits<float>::quiet_NaN();
  }
  float largest;
  std::memcpy(&largest, &amax_bits, sizeof largest);
  const float scale = largest > 0.0f ? largest / 127.0f : 1.0f;
  const float inverse = 1.0f / scale;
  for_vectors<W>(k, [&](int64_t j, int64_t count) {
    // |x·inverse| <= 127: adding and removing 1.5·2^23 rounds it to the nearest integer (ties to
    // even) in float32's default rounding mode. Two statements, so that the product is rounded
    // before the sum on every instruction set (not fused into one FMA where there is one): the
    // same values on every processor.
    const F scaled = widen_part<W>(x + j, count) * inverse;
    const F rounded = (scaled + kRound) - kRound;
    const typename Narrow<W>::I8 bytes =
        __builtin_convertvector(__builtin_convertvector(rounded, I), typename Narrow<W>::I8);
    std::memcpy(q + j, &bytes, static_cast<size_t>(count));
  });
  return scale;
}

template <typename T>
struct QuantizeJob {
  const T* x;
  int64_t k;
  int8_t* q;
  float* scales;

  template <int W>
  inline __attribute__((always_inline)) void run(int64_t begin, int64_t end) const {
    std::vector<float> row;
    if constexpr (!std::is_same_v<T, float>) row.resize(static_cast<size_t>(k));
    for (int64_t m = begin; m < end; ++m) {
      const float* source;
      if constexpr (std::is_same_v<T, float>) {
        source = x + m * k;
      } else {
        for_vectors<W>(k, [&](int64_t j, int64_t count) {
          store_part<W>(row.data() + j, count, widen_part<W>(x + m * k + j, count));
        });
        source = row.data();
      }
      scales[m] = quantize_row<W>(source, k, q + m * k);
    }
  }
};

// y[m, :] = act(acc[m, :]·r_m·s + b) written as Out; with kRequantize, y goes to a scratch row
// and from there to q[m, :] and scales[m] instead.
template <Act A, typename Acc, typename Out, bool kRequantize>
struct ScaleBackJob {
  const Acc* acc;
  int64_t n;
  const float* row_scales;
  const float* col_scales;
  const float* bias;  // null: none
  Out* y;             // unless kRequantize
  int8_t* q;          // with kRequantize
  float* scales;      // with kRequantize

  template <int W>
  inline __attribute__((always_inline)) void run(int64_t begin, int64_t end) const {
    using F = typename Lanes<W>::F;
    std::vector<float> row;
    if constexpr (kRequantize) row.resize(static_cast<size_t>(n));
    for (int64_t m = begin; m < end; ++m) {
      const Acc* a = acc + m * n;
      const float rm = row_scales[m];
      auto* out = [&] {
        if constexpr (kRequantize) {
          return row.data();
        } else {
          return y + m * n;
        }
      }();
      for_vectors<W>(n, [&](int64_t j, int64_t count) {
        F v = widen_part<W>(a + j, count) * (rm * widen_part<W>(col_scales + j, count));
        if (bias != nullptr) v += widen_part<W>(bias + j, count);
        store_part<W>(out + j, count, activate<A, W>(v));
      });
      if constexpr (kRequantize) scales[m] = quantize_row<W>(row.data(), n, q + m * n);
    }
  }
};

enum class Isa { kBaseline, kAvx2, kAvx512 };

// The instruction set the passes take: the processor's best, lowered by ATTNZOO_INT8_ROWS_ISA
// (read at each call).
Isa chosen_isa() {
  Isa best = Isa::kBaseline;
#ifdef ATTNZOO_CPU_X86_KERNELS
  best = has_avx512() ? Isa::kAvx512 : has_avx2_fma() ? Isa::kAvx2 : Isa::kBaseline;
#endif
  const char* wanted = std::getenv("ATTNZOO_INT8_ROWS_ISA");
  if (wanted == nullptr) return best;
  if (std::strcmp(wanted, "baseline") == 0) return Isa::kBaseline;
  if (std::strcmp(wanted, "avx2") == 0) return std::min(best, Isa::kAvx2);
  return best;
}

#ifdef ATTNZOO_CPU_X86_KERNELS
template <typename Job>
ATTNZOO_TARGET_AVX512 void run_avx512(const Job& job, int64_t begin, int64_t end) {
  job.template run<16>(begin, end);
}

template <typename Job>
ATTNZOO_TARGET_AVX2_FMA void run_avx2(const Job& job, int64_t begin, int64_t end) {
  job.template run<8>(begin, end);
}
#endif

template <typename Job>
void run_baseline(const Job& job, int64_t begin, int64_t end) {
  job.template run<4>(begin, end);
}

// The job's rows across LibTorch's threads, about 16K elements a task.
template <typename Job>
void run_rows(const Job& job, int64_t rows, int64_t cols) {
  const Isa isa = chosen_isa();
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(cols, 1));
  kernels::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    switch (isa) {
#ifdef ATTNZOO_CPU_X86_KERNELS
      case Isa::kAvx512:
        return run_avx512(job, begin, end);
      case Isa::kAvx2:
        return run_avx2(job, begin, end);
#endif
      default:
        return run_baseline(job, begin, end);
    }
  });
}

void check_rows(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK_VALUE(t.dim() == 2 && t.device().is_cpu() && t.is_contiguous(), op, ": ", name,
                    " must be a contiguous 2-D CPU tensor, got ", t.sizes(), " on ",
                    t.device().str());
}

void check_vector(const at::Tensor& t, int64_t size, const char* op, const char* name) {
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == size && t.scalar_type() == at::kFloat &&
                        t.device().is_cpu() && t.is_contiguous(),
                    op, ": ", name, " must be a contiguous float32 CPU vector of ", size,
                    " elements, got ", t.sizes(), " ", t.scalar_type(), " on ", t.device().str());
}

struct ScaleBackArgs {
  const at::Tensor& acc;
  const at::Tensor& row_scales;
  const at::Tensor& col_scales;
  const float* bias;
};

ScaleBackArgs checked_scale_back_args(const at::Tensor& acc, const at::Tensor& row_scales,
                                      const at::Tensor& col_scales,
                                      const std::optional<at::Tensor>& bias, const char* op) {
  check_rows(acc, op, "acc");
  TORCH_CHECK_VALUE(acc.scalar_type() == at::kInt || acc.scalar_type() == at::kFloat, op,
                    ": acc must be int32 or float32, got ", acc.scalar_type());
  check_vector(row_scales, acc.size(0), op, "row_scales");
  check_vector(col_scales, acc.size(1), op, "col_scales");
  const bool has_bias = bias && bias->defined();
  if (has_bias) check_vector(*bias, acc.size(1), op, "bias");
  return {acc, row_scales, col_scales, has_bias ? bias->const_data_ptr<float>() : nullptr};
}

// Runs ScaleBackJob<A, Acc, Out, kRequantize> with A and Acc from the arguments.
template <typename Out, bool kRequantize>
void scale_back(const ScaleBackArgs& args, Act act, Out* y, int8_t* q, float* scales) {
  const int64_t m = args.acc.size(0), n = args.acc.size(1);
  auto with_act = [&](auto acc_ptr, auto act_constant) {
    using Acc = std::remove_const_t<std::remove_pointer_t<decltype(acc_ptr)>>;
    ScaleBackJob<decltype(act_constant)::value, Acc, Out, kRequantize> job{
        acc_ptr,
        n,
        args.row_scales.const_data_ptr<float>(),
        args.col_scales.const_data_ptr<float>(),
        args.bias,
        y,
        q,
        scales};
    run_rows(job, m, n);
  };
  auto with_acc = [&](auto acc_ptr) {
    with_activation(act, [&](auto act_constant) { with_act(acc_ptr, act_constant); });
  };
  if (args.acc.scalar_type() == at::kInt) {
    with_acc(args.acc.const_data_ptr<int32_t>());
  } else {
    with_acc(args.acc.const_data_ptr<float>());
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> quantize_rows_int8(const at::Tensor& x) {
  constexpr const char* op = "quantize_rows_int8";
  check_rows(x, op, "x");
  TORCH_CHECK_VALUE(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, op,
                    ": x must be float32 or bfloat16, got ", x.scalar_type());
  const int64_t m = x.size(0), k = x.size(1);
  auto q = at::empty({m, k}, x.options().dtype(at::kChar));
  auto scales = at::empty({m}, x.options().dtype(at::kFloat));
  if (m == 0) return {q, scales};
  if (x.scalar_type() == at::kFloat) {
    run_rows(QuantizeJob<float>{x.const_data_ptr<float>(), k, q.mutable_data_ptr<int8_t>(),
                                scales.mutable_data_ptr<float>()},
             m, k);
  } else {
    run_rows(QuantizeJob<uint16_t>{reinterpret_cast<const uint16_t*>(x.const_data_ptr()), k,
                                   q.mutable_data_ptr<int8_t>(), scales.mutable_data_ptr<float>()},
             m, k);
  }
  return {q, scales};
}

at::Tensor dequantize_rows_int8(const at::Tensor& acc, const at::Tensor& row_scales,
                                const at::Tensor& col_scales, const std::optional<at::Tensor>& bias,
                                const std::string& activation, at::ScalarType dtype) {
  constexpr const char* op = "dequantize_rows_int8";
  const Act act = parse_activation(activation, op);
  const auto args = checked_scale_back_args(acc, row_scales, col_scales, bias, op);
  TORCH_CHECK_VALUE(dtype == at::kFloat || dtype == at::kBFloat16, op,
                    ": dtype must be float32 or bfloat16, got ", dtype);
  auto y = at::empty(acc.sizes(), acc.options().dtype(dtype));
  if (acc.numel() == 0) return y;
  if (dtype == at::kFloat) {
    scale_back<float, false>(args, act, y.mutable_data_ptr<float>(), nullptr, nullptr);
  } else {
    scale_back<uint16_t, false>(args, act, reinterpret_cast<uint16_t*>(y.mutable_data_ptr()),
                                nullptr, nullptr);
  }
  return y;
}

std::tuple<at::Tensor, at::Tensor> requantize_rows_int8(const at::Tensor& acc,
                                                        const at::Tensor& row_scales,
                                                        const at::Tensor& col_scales,
                                                        const std::optional<at::Tensor>& bias,
                                                        const std::string& activation) {
  constexpr const char* op = "requantize_rows_int8";
  const Act act = parse_activation(activation, op);
  const auto args = checked_scale_back_args(acc, row_scales, col_scales, bias, op);
  auto q = at::empty(acc.sizes(), acc.options().dtype(at::kChar));
  auto scales = at::empty({acc.size(0)}, acc.options().dtype(at::kFloat));
  if (acc.size(0) == 0) return {q, scales};
  scale_back<float, true>(args, act, nullptr, q.mutable_data_ptr<int8_t>(),
                          scales.mutable_data_ptr<float>());
  return {q, scales};
}

int64_t int8_rows_cpu_vector_width() {
  switch (chosen_isa()) {
    case Isa::kAvx512:
      return 16;
    case Isa::kAvx2:
      return 8;
    default:
      return 4;
  }
}

}  // namespace attnzoo::kernels
