// The int8 matrix product of the CPU's int8 linear layers, y = x·W with int32 sums, on processors
// with AVX-512 VNNI: the weight packed once, then register-blocked tiles of vpdpbusd (per int32
// lane, the sum of four products of an unsigned and a signed byte).
//
// vpdpbusd multiplies unsigned bytes by signed ones, and both x and W are signed (symmetric
// quantization, values in [−127, 127]). The weight is therefore stored shifted, W + 128 in
// [1, 255], as the unsigned operand, and x stays signed, broadcast from memory four bytes (four
// consecutive k) at a time:
//   Σ_k x[m, k]·(W[k, n] + 128) = Σ_k x[m, k]·W[k, n] + 128·Σ_k x[m, k],
// so each output subtracts 128 times its row's sum of x, computed once per call. No sum can
// overflow int32: |x·(W + 128)| ≤ 128·255 per product and K ≤ 2^16 (checked).
//
// Layout. The packed weight is panels of kPanel = 32 output columns, the K rows in groups of 4:
// [P][K/4][32][4] uint8, element [p][g][j][i] = W[4g + i, 32p + j] + 128 (128, a zero weight,
// past N). A tile is kTileRows = 12 rows of x against one panel: 24 accumulators of 16 int32
// lanes (12 rows × 2 vectors), and per group of 4 k two vector loads of the panel and 12
// broadcasts of x. Work split: common/cpu_panel_units.h's units with a chunk of one tile, so that
// each tile sweeps every panel while its rows of x stay in L1 and the panels stream from L2 (an
// int8 weight is a quarter of the float32 one: ViT-S's largest, 384 x 1536, is 576 KB). Chunks of
// 256 KB of x, as the float32 product takes them, were 1.1 to 1.2 times slower at 1576 rows.
//
// int8_linear_packed_cpu applies the scale-back of the int8 linear layers to the tile in registers
// (float32 sums times the row's and the column's scales, the bias, the activation; float32 or
// bfloat16 out), so that the int32 sums never reach memory.
//
// Against LibTorch's integer product (at::_int_mm, oneDNN), which takes the weight unpacked at
// every call: docs/benchmarks.md, "int8 where it pays".
#include <attnzoo/kernels/common/cpu_activation.h>
#include <attnzoo/kernels/common/cpu_lanes_io.h>
#include <attnzoo/kernels/common/cpu_panel_units.h>
#include <attnzoo/kernels/common/cpu_vector.h>
#include <attnzoo/kernels/cpu_parallel.h>
#include <attnzoo/kernels/ops.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#ifdef ATTNZOO_CPU_X86_KERNELS
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#pragma GCC diagnostic ignored "-Wpsabi"  // vectors never cross a call: common/cpu_vector.h

namespace attnzoo::kernels {
namespace {

constexpr int64_t kPanel = 32;
constexpr int kTileRows = 12;
static_assert(kTileRows == 12, "ATTNZOO_SWITCH_TILE_ROWS covers tiles of 1 to 12 rows");
constexpr int64_t kMaxK = int64_t{1} << 16;  // keeps every int32 sum below 2^31

#ifdef ATTNZOO_CPU_X86_KERNELS
#define ATTNZOO_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

bool has_vnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

// Four bytes of x (k, k + 1, k + 2, k + 3 of one row) as the int32 every lane of a broadcast holds.
inline int32_t four_bytes(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Where a tile's sums go: int32 as they are (Int32Sink), or scaled back to float32 or bfloat16
// (ScaledSink). sink_store(sink, row, col, sums, count): sums[0 : 16] are y[row, col : col + 16],
// of which the first `count` are the output's (col + count <= N). The sums come through memory
// (a tile's stack, in L1): a vector cannot cross from the tile's AVX-512 code into the
// vector-extension helpers, which take no instruction set of their own.
struct Int32Sink {
  int32_t* y;
  int64_t ldy;
};

ATTNZOO_TARGET_VNNI inline void sink_store(const Int32Sink& sink, int64_t row, int64_t col,
                                           const int32_t* sums, int64_t count) {
  const auto mask = static_cast<__mmask16>(count >= 16 ? 0xffffu : (1u << count) - 1);
  _mm512_mask_storeu_epi32(sink.y + row * sink.ldy + col, mask, _mm512_load_si512(sums));
}

// act(sums·r_row·s_col + b_col) as Out (float, or uint16_t: bfloat16 bits): the arithmetic of
// dequantize_rows_int8 (int8_rows/int8_rows_cpu.cpp) in the same order: the same values, but for
// an ulp where the compiler contracts an activation's polynomial into FMAs differently in the two
// places. col_scales and bias are padded to whole panels.
template <cpu::Act A, typename Out>
struct ScaledSink {
  Out* y;
  int64_t ldy;
  const float* row_scales;
  const float* col_scales;
  const float* bias;  // null: none
};

// Vector-extension code only (no intrinsics), always inlined into the tile: cpu_vector.h's helpers
// take the tile's instruction set from the function they are inlined into.
template <cpu::Act A, typename Out>
inline __attribute__((always_inline)) void sink_store(const ScaledSink<A, Out>& sink, int64_t row,
                                                      int64_t col, const int32_t* sums,
                                                      int64_t count) {
  using F = cpu::Lanes<16>::F;
  F v = cpu::widen<16>(sums) * (sink.row_scales[row] * cpu::load<16>(sink.col_scales + col));
  if (sink.bias != nullptr) v += cpu::load<16>(sink.bias + col);
  cpu::store_part<16>(sink.y + row * sink.ldy + col, count, cpu::activate<A, 16>(v));
}

// The sums of R rows of x (from `row`, k values each, rows ldx apart) with the panel's 32 columns
// (from `col`; cols of them the output's), less 128·row_sums[r] (see the top of the file), to
// the sink.
template <int R, typename Sink>
ATTNZOO_TARGET_VNNI inline void tile(const int8_t* x, int64_t ldx, int64_t k, const uint8_t* panel,
                                     const int32_t* row_sums, const Sink& sink, int64_t row,
                                     int64_t col, int64_t cols) {
  __m512i acc[R][2];
  ATTNZOO_UNROLL for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
  for (int64_t g = 0; g < k / 4; ++g) {
    const __m512i w0 = _mm512_loadu_si512(panel + g * kPanel * 4);
    const __m512i w1 = _mm512_loadu_si512(panel + g * kPanel * 4 + 64);
    ATTNZOO_UNROLL for (int r = 0; r < R; ++r) {
      const __m512i xv = _mm512_set1_epi32(four_bytes(x + r * ldx + g * 4));
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], w0, xv);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], w1, xv);
    }
  }
  const int64_t low = std::min<int64_t>(cols, 16), high = cols - low;
  alignas(64) int32_t sums[2][16];
  ATTNZOO_UNROLL for (int r = 0; r < R; ++r) {
    const __m512i correction = _mm512_set1_epi32(128 * row_sums[r]);
    _mm512_store_si512(sums[0], _mm512_sub_epi32(acc[r][0], correction));
    _mm512_store_si512(sums[1], _mm512_sub_epi32(acc[r][1], correction));
    sink_store(sink, row + r, col, sums[0], low);
    if (high > 0) sink_store(sink, row + r, col + 16, sums[1], high);
  }
}

// Σ_k x[m, k] of each row: vpdpbusd of ones (unsigned) with x (signed), four bytes a lane.
ATTNZOO_TARGET_VNNI void row_sums(const int8_t* x, int64_t m, int64_t k, int32_t* sums) {
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t r = 0; r < m; ++r) {
    const int8_t* row = x + r * k;
    __m512i acc = _mm512_setzero_si512();
    int64_t c = 0;
    for (; c + 64 <= k; c += 64) {
      acc = _mm512_dpbusd_epi32(acc, ones, _mm512_loadu_si512(row + c));
    }
    int32_t sum = _mm512_reduce_add_epi32(acc);
    for (; c < k; ++c) sum += row[c];
    sums[r] = sum;
  }
}

struct Problem {
  const int8_t* x;        // [M, K] rows contiguous
  const uint8_t* packed;  // [P][K/4][32][4]
  const int32_t* row_sums;
  int64_t k, n;
  cpu::PanelUnits units;
};

template <typename Sink>
ATTNZOO_TARGET_VNNI void run_units(const Problem& p, const Sink& sink, int64_t begin, int64_t end) {
  for (int64_t u = begin; u < end; ++u) {
    const auto [row, rows, panel] = p.units[u];
    const int8_t* x = p.x + row * p.k;
    const uint8_t* w = p.packed + panel * p.k * kPanel;
    const int32_t* sums = p.row_sums + row;
    const int64_t col = panel * kPanel;
    const int64_t cols = std::min(kPanel, p.n - col);
#define ATTNZOO_TILE(R) tile<R>(x, p.k, p.k, w, sums, sink, row, col, cols)
    ATTNZOO_SWITCH_TILE_ROWS(rows, ATTNZOO_TILE)
#undef ATTNZOO_TILE
  }
}

// The product of x's rows with the packed weight into the sink, across LibTorch's threads.
template <typename Sink>
void run(const at::Tensor& x, const at::Tensor& packed, int64_t n, const Sink& sink) {
  const int64_t m = x.size(0), k = x.size(1);
  std::vector<int32_t> sums(static_cast<size_t>(m));
  row_sums(x.const_data_ptr<int8_t>(), m, k, sums.data());
  const Problem p{x.const_data_ptr<int8_t>(),
                  packed.const_data_ptr<uint8_t>(),
                  sums.data(),
                  k,
                  n,
                  cpu::PanelUnits(m, k, packed.size(0), kTileRows, /*chunk_bytes=*/0)};
  // About four million multiply-adds a range (a quarter of the float32 product's time each).
  const int64_t grain =
      std::max<int64_t>(1, (int64_t{1} << 22) / (kTileRows * kPanel * std::max<int64_t>(k, 1)));
  kernels::parallel_for(0, p.units.count(), grain,
                        [&](int64_t begin, int64_t end) { run_units(p, sink, begin, end); });
}
#endif

void check_int8_cpu(const at::Tensor& t, at::ScalarType dtype, const char* op, const char* name) {
  TORCH_CHECK_VALUE(t.scalar_type() == dtype && t.device().is_cpu(), op, ": ", name, " must be a ",
                    dtype, " CPU tensor, got ", t.scalar_type(), " on ", t.device().str());
}

// x and the packed weight of `n` outputs, as the two ops take them.
void check_product_args(const at::Tensor& x, const at::Tensor& packed, int64_t n, const char* op) {
  check_int8_cpu(x, at::kChar, op, "x");
  check_int8_cpu(packed, at::kByte, op, "packed");
  TORCH_CHECK_VALUE(x.dim() == 2, op, ": x must be [M, K], got ", x.sizes());
  const int64_t k = x.dim() == 2 ? x.size(1) : 0;
  const int64_t panels = (n + kPanel - 1) / kPanel;
  TORCH_CHECK_VALUE(n >= 0 && packed.dim() == 4 && packed.is_contiguous() &&
                        packed.size(0) == panels && packed.size(1) * 4 == k &&
                        packed.size(2) == kPanel && packed.size(3) == 4,
                    op, ": packed must be pack_int8_weight_cpu's [", panels, ", ", k / 4,
                    ", 32, 4] for ", n, " outputs of x's ", k, " inputs, got ", packed.sizes());
  TORCH_CHECK_VALUE(int8_matmul_packed_cpu_available(), op,
                    ": needs a processor with AVX-512 VNNI (int8_matmul_packed_cpu_available())");
}

// attnzoo::int8_matmul_packed_cpu on the CPU dispatch key.
at::Tensor int8_matmul_packed_cpu_kernel(const at::Tensor& x, const at::Tensor& packed,
                                         int64_t out_features) {
  constexpr const char* op = "int8_matmul_packed_cpu";
  check_product_args(x, packed, out_features, op);
  const int64_t m = x.size(0), n = out_features;
  at::Tensor y = at::empty({m, n}, x.options().dtype(at::kInt));
  if (m == 0 || n == 0) return y;
#ifdef ATTNZOO_CPU_X86_KERNELS
  run(x.contiguous(), packed, n, Int32Sink{y.mutable_data_ptr<int32_t>(), n});
#endif
  return y;
}

// A [n] float32 vector copied into whole panels (zeros after it).
std::vector<float> padded_to_panels(const at::Tensor& v, int64_t n) {
  std::vector<float> padded(static_cast<size_t>((n + kPanel - 1) / kPanel * kPanel), 0.0f);
  const at::Tensor c = v.contiguous();
  std::memcpy(padded.data(), c.const_data_ptr<float>(), static_cast<size_t>(n) * sizeof(float));
  return padded;
}

void check_scales(const at::Tensor& t, int64_t size, const char* op, const char* name) {
  TORCH_CHECK_VALUE(
      t.dim() == 1 && t.size(0) == size && t.scalar_type() == at::kFloat && t.device().is_cpu(), op,
      ": ", name, " must be a float32 CPU vector of ", size, " elements, got ", t.sizes(), " ",
      t.scalar_type(), " on ", t.device().str());
}

// attnzoo::int8_linear_packed_cpu on the CPU dispatch key.
at::Tensor int8_linear_packed_cpu_kernel(const at::Tensor& x, const at::Tensor& row_scales,
                                         const at::Tensor& packed, const at::Tensor& col_scales,
                                         const std::optional<at::Tensor>& bias,
                                         c10::string_view activation_name, at::ScalarType dtype) {
  constexpr const char* op = "int8_linear_packed_cpu";
  const cpu::Act act = cpu::parse_activation(std::string(activation_name), op);
  const int64_t n = col_scales.dim() == 1 ? col_scales.size(0) : -1;
  check_product_args(x, packed, n, op);
  const int64_t m = x.size(0);
  check_scales(row_scales, m, op, "row_scales");
  check_scales(col_scales, n, op, "col_scales");
  const bool has_bias = bias && bias->defined();
  if (has_bias) check_scales(*bias, n, op, "bias");
  TORCH_CHECK_VALUE(dtype == at::kFloat || dtype == at::kBFloat16, op,
                    ": dtype must be float32 or bfloat16, got ", dtype);
  at::Tensor y = at::empty({m, n}, x.options().dtype(dtype));
  if (m == 0 || n == 0) return y;
#ifdef ATTNZOO_CPU_X86_KERNELS
  const std::vector<float> scales = padded_to_panels(col_scales, n);
  const std::vector<float> padded_bias =
      has_bias ? padded_to_panels(*bias, n) : std::vector<float>{};
  const at::Tensor rs = row_scales.contiguous();
  const auto with_out = [&](auto* out, auto act_constant) {
    using Out = std::remove_pointer_t<decltype(out)>;
    run(x.contiguous(), packed, n,
        ScaledSink<decltype(act_constant)::value, Out>{out, n, rs.const_data_ptr<float>(),
                                                       scales.data(),
                                                       has_bias ? padded_bias.data() : nullptr});
  };
  const auto with_act = [&](auto act_constant) {
    if (dtype == at::kFloat) {
      with_out(y.mutable_data_ptr<float>(), act_constant);
    } else {
      with_out(reinterpret_cast<uint16_t*>(y.mutable_data_ptr<at::BFloat16>()), act_constant);
    }
  };
  cpu::with_activation(act, with_act);
#endif
  return y;
}

}  // namespace

bool int8_matmul_packed_cpu_available() {
#ifdef ATTNZOO_CPU_X86_KERNELS
  return has_vnni();
#else
  return false;
#endif
}

at::Tensor pack_int8_weight_cpu(const at::Tensor& weight_t) {
  constexpr const char* op = "pack_int8_weight_cpu";
  check_int8_cpu(weight_t, at::kChar, op, "weight_t");
  TORCH_CHECK_VALUE(weight_t.dim() == 2, op, ": weight_t must be [in_features, out_features], got ",
                    weight_t.sizes());
  const int64_t k = weight_t.size(0), n = weight_t.size(1);
  TORCH_CHECK_VALUE(k % 4 == 0 && k <= kMaxK, op,
                    ": in_features must be a multiple of 4 and at most ", kMaxK, ", got ", k);
  const int64_t panels = (n + kPanel - 1) / kPanel;
  // [K, N] -> + 128 as uint8 -> 128 columns up to P·32 -> [K/4, 4, P, 32] -> [P, K/4, 32, 4]
  const at::Tensor shifted = (weight_t.to(at::kShort) + 128).to(at::kByte);
  const at::Tensor padded = at::constant_pad_nd(shifted, {0, panels * kPanel - n}, 128);
  return padded.view({k / 4, 4, panels, kPanel}).permute({2, 0, 3, 1}).contiguous();
}

at::Tensor int8_matmul_packed_cpu(const at::Tensor& x, const at::Tensor& packed,
                                  int64_t out_features) {
  // Through the dispatcher, so that LibTorch's profiler (attnzoo bench --profile-ops) sees it.
  static const auto handle =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("attnzoo::int8_matmul_packed_cpu", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>();
  return handle.call(x, packed, out_features);
}

at::Tensor int8_linear_packed_cpu(const at::Tensor& x, const at::Tensor& row_scales,
                                  const at::Tensor& packed, const at::Tensor& col_scales,
                                  const std::optional<at::Tensor>& bias,
                                  const std::string& activation, at::ScalarType dtype) {
  static const auto handle =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("attnzoo::int8_linear_packed_cpu", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view,
                            at::ScalarType)>();
  return handle.call(x, row_scales, packed, col_scales, bias, activation, dtype);
}

}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CPU, m) {
  m.impl("int8_matmul_packed_cpu", TORCH_FN(attnzoo::kernels::int8_matmul_packed_cpu_kernel));
  m.impl("int8_linear_packed_cpu", TORCH_FN(attnzoo::kernels::int8_linear_packed_cpu_kernel));
}
