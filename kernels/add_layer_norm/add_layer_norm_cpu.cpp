// Tier 3 of the fused residual add + LayerNorm, CPU part: one pass over each row writes the sum
// and keeps it in cache for the statistics and the normalisation, where LibTorch's ops make three
// passes over memory (the add, then layer_norm's moments and its normalisation). Registered for
// attnzoo::_add_layer_norm_forward on the CPU dispatch key, so that the op and its autograd
// formula run it for float32 and bfloat16 CPU tensors; float64 and float16 take the LibTorch
// reference (add_layer_norm_op.cpp), which stays the oracle of the tests.
//
// Per row of length N, with s = x + residual rounded to x's dtype:
//   mean = s_0 + sum(s - s_0) / N, var = sum((s - mean)^2) / N (two passes over the cached row:
//   no cancellation for rows whose mean is far from zero), rstd = 1 / sqrt(var + eps),
//   normed = (s - mean) * rstd * weight + bias.
// Statistics and normalisation in float32, as the reference computes them. The row loops are
// written for the compiler to vectorise, once each for AVX-512, for AVX2 + FMA and for the
// baseline, picked at run time by what the processor supports (the partial sums in the same order
// on each).
#include <attnzoo/kernels/add_layer_norm/add_layer_norm_op.h>
#include <attnzoo/kernels/common/cpu_vector.h>
#include <attnzoo/kernels/cpu_parallel.h>

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

namespace attnzoo::kernels {
namespace {

// Independent partial sums: lets the compiler keep them in vector registers without reordering
// a single accumulator (which it may not do for floating point).
constexpr int64_t kLanes = 16;

// kLanes partial sums as two vectors of half of them (GCC's and Clang's vector extension): the
// compilers left the same sums over an array of kLanes floats scalar.
using Half = float __attribute__((vector_size(kLanes / 2 * sizeof(float))));

// Lane j of the kLanes (lo's, then hi's) added in order, as the array of partial sums was.
inline __attribute__((always_inline)) float lanes_sum(const Half& lo, const Half& hi) {
  float total = 0.0f;
  for (int64_t j = 0; j < kLanes / 2; ++j) total += lo[j];
  for (int64_t j = 0; j < kLanes / 2; ++j) total += hi[j];
  return total;
}

// What one call normalises: rows of `cols` contiguous elements. T: float, or uint16_t for
// bfloat16, whose bits the loops convert themselves (through c10::BFloat16's conversions, a
// struct and a NaN branch per element, the compilers left the loops scalar: 3 times slower than
// float32 and than LibTorch's unfused ops).
template <typename T>
struct RowsView {
  const T* x;
  const T* residual;
  const T* weight;  // null: no weight
  const T* bias;    // null: no bias
  T* sum;
  T* normed;
  float* mean;
  float* rstd;
  int64_t cols;
  float eps;
};

inline float widen(float v) { return v; }

// bfloat16 bits to float32: the upper half of its bits.
inline float widen(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

template <typename T>
inline T narrow_to(float v) {
  return v;
}

// float32 to bfloat16 bits as c10::BFloat16 converts (round to nearest even, NaN to 0x7fc0),
// without a branch.
template <>
inline uint16_t narrow_to<uint16_t>(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : rounded);
}

// Rows [begin, end). `row` holds the widened sum of the current row (float32, cols elements).
template <typename T>
inline __attribute__((always_inline)) void normalize_rows(const RowsView<T>& v, int64_t begin,
                                                          int64_t end, float* __restrict row) {
  const int64_t n = v.cols;
  const int64_t whole = n - n % kLanes;
  const T* __restrict weight = v.weight;
  const T* __restrict bias = v.bias;
  for (int64_t r = begin; r < end; ++r) {
    const T* __restrict x = v.x + r * n;
    const T* __restrict res = v.residual + r * n;
    T* __restrict s = v.sum + r * n;
    T* __restrict out = v.normed + r * n;

    // The sum, rounded to T, and its widened copy in `row` for the passes below.
    for (int64_t i = 0; i < n; ++i) {
      const T rounded = narrow_to<T>(widen(x[i]) + widen(res[i]));
      s[i] = rounded;
      row[i] = widen(rounded);
    }
    // The sum's elements are summed relative to its first: a row far from zero (mean 1000,
    // spread 1) then adds numbers of its spread, not of its mean.
    const float pivot = row[0];
    Half lo = {}, hi = {}, a, b;
    for (int64_t i = 0; i < whole; i += kLanes) {
      std::memcpy(&a, row + i, sizeof a);
      std::memcpy(&b, row + i + kLanes / 2, sizeof b);
      lo += a - pivot;
      hi += b - pivot;
    }
    float total = 0.0f;
    for (int64_t i = whole; i < n; ++i) total += row[i] - pivot;
    total += lanes_sum(lo, hi);
    const float mean = pivot + total / static_cast<float>(n);

    lo = Half{};
    hi = Half{};
    for (int64_t i = 0; i < whole; i += kLanes) {
      std::memcpy(&a, row + i, sizeof a);
      std::memcpy(&b, row + i + kLanes / 2, sizeof b);
      a -= mean;
      b -= mean;
      lo += a * a;
      hi += b * b;
    }
    float squares = 0.0f;
    for (int64_t i = whole; i < n; ++i) {
      const float d = row[i] - mean;
      squares += d * d;
    }
    squares += lanes_sum(lo, hi);
    const float rstd = 1.0f / std::sqrt(squares / static_cast<float>(n) + v.eps);
    v.mean[r] = mean;
    v.rstd[r] = rstd;

    // Four loops rather than a branch per element, so that each vectorises. float32 rows are
    // written to the output; bfloat16 ones back into `row`, then rounded in a loop of their own
    // (clang left the fused form scalar).
    float* dst;
    if constexpr (std::is_same_v<T, float>) {
      dst = out;
    } else {
      dst = row;
    }
    if (weight && bias) {
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = (row[i] - mean) * rstd * widen(weight[i]) + widen(bias[i]);
      }
    } else if (weight) {
      for (int64_t i = 0; i < n; ++i) dst[i] = (row[i] - mean) * rstd * widen(weight[i]);
    } else if (bias) {
      for (int64_t i = 0; i < n; ++i) dst[i] = (row[i] - mean) * rstd + widen(bias[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = (row[i] - mean) * rstd;
    }
    if constexpr (!std::is_same_v<T, float>) {
      for (int64_t i = 0; i < n; ++i) out[i] = narrow_to<T>(row[i]);
    }
  }
}

template <typename T>
void normalize_rows_baseline(const RowsView<T>& v, int64_t begin, int64_t end, float* row) {
  normalize_rows(v, begin, end, row);
}

#ifdef ATTNZOO_CPU_X86_KERNELS
template <typename T>
ATTNZOO_TARGET_AVX512 void normalize_rows_avx512(const RowsView<T>& v, int64_t begin, int64_t end,
                                                 float* row) {
  normalize_rows(v, begin, end, row);
}

template <typename T>
ATTNZOO_TARGET_AVX2_FMA void normalize_rows_avx2(const RowsView<T>& v, int64_t begin, int64_t end,
                                                 float* row) {
  normalize_rows(v, begin, end, row);
}
#endif

template <typename T>
void run_rows(const RowsView<T>& v, int64_t rows) {
  // About 16K elements a task: a ViT-B row block of 197 x 768 splits across two threads, a
  // Conformer-S frame of 144 values does not get a thread of its own.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / v.cols);
  kernels::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(v.cols));
#ifdef ATTNZOO_CPU_X86_KERNELS
    if (cpu::has_avx512()) {
      normalize_rows_avx512(v, begin, end, row.data());
      return;
    }
    if (cpu::has_avx2_fma()) {
      normalize_rows_avx2(v, begin, end, row.data());
      return;
    }
#endif
    normalize_rows_baseline(v, begin, end, row.data());
  });
}

template <typename T>
const T* data_or_null(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? t->const_data_ptr<T>() : nullptr;
}

// x, residual: [..., N], weight, bias: [N]
//   -> sum [..., N], normed [..., N] (contiguous), mean [...], rstd [...] (float32; float64 for
//      float64 inputs)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> add_layer_norm_forward_cpu(
    const at::Tensor& x_arg, const at::Tensor& residual_arg,
    const std::optional<at::Tensor>& weight_arg, const std::optional<at::Tensor>& bias_arg,
    double eps) {
  check_add_layer_norm_inputs(x_arg, residual_arg, weight_arg, bias_arg, eps);
  const auto dtype = x_arg.scalar_type();
  if (dtype != at::kFloat && dtype != at::kBFloat16) {
    return add_layer_norm_reference(x_arg, residual_arg, weight_arg, bias_arg, eps);
  }
  const at::Tensor x = x_arg.contiguous();
  const at::Tensor residual = residual_arg.contiguous();
  const auto contiguous = [](const std::optional<at::Tensor>& t) {
    return t && t->defined() ? std::optional<at::Tensor>(t->contiguous()) : std::nullopt;
  };
  const std::optional<at::Tensor> weight = contiguous(weight_arg);
  const std::optional<at::Tensor> bias = contiguous(bias_arg);
  const int64_t cols = x.size(-1);
  at::Tensor sum = at::empty(x.sizes(), x.options());
  at::Tensor normed = at::empty(x.sizes(), x.options());
  const auto leading = x.sizes().slice(0, x.dim() - 1);
  at::Tensor mean = at::empty(leading, x.options().dtype(at::kFloat));
  at::Tensor rstd = at::empty(leading, x.options().dtype(at::kFloat));
  const int64_t rows = x.numel() / cols;
  if (rows == 0) {
    return {sum, normed, mean, rstd};
  }
  // T: the tensors' element type; S: what the loops read it as (bfloat16 as its bits).
  const auto run = [&](auto tag) {
    using T = decltype(tag);
    using S = std::conditional_t<std::is_same_v<T, float>, float, uint16_t>;
    const auto in = [](const T* p) { return reinterpret_cast<const S*>(p); };
    const auto out = [](T* p) { return reinterpret_cast<S*>(p); };
    RowsView<S> view{in(x.const_data_ptr<T>()),
                     in(residual.const_data_ptr<T>()),
                     in(data_or_null<T>(weight)),
                     in(data_or_null<T>(bias)),
                     out(sum.mutable_data_ptr<T>()),
                     out(normed.mutable_data_ptr<T>()),
                     mean.mutable_data_ptr<float>(),
                     rstd.mutable_data_ptr<float>(),
                     cols,
                     static_cast<float>(eps)};
    run_rows(view, rows);
  };
  if (dtype == at::kFloat) {
    run(float{});
  } else {
    run(c10::BFloat16{});
  }
  return {sum, normed, mean, rstd};
}

}  // namespace
}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CPU, m) {
  m.impl("_add_layer_norm_forward", TORCH_FN(attnzoo::kernels::add_layer_norm_forward_cpu));
}
