// The float32 linear layer of CPU inference, y = act(x·Wᵀ + b), on AVX-512 processors: a matrix
// product of our own with the weight packed once, the bias in the accumulators' first value and
// the activation applied to the tile in registers before it is stored.
//
// Beside oneDNN's packed linear (mkldnn::_linear_pointwise), which PackedLinear takes for the
// other layers: on the shapes of a small ViT at batch 1 (197 rows, 192 wide) oneDNN's ran at 66
// to 80% of the processor's FMA rate on two threads and spent about 15 µs a call outside the
// product; this kernel's tile runs at the FMA rate from L1. On layers of more than 768 inputs or
// 1536 outputs it was the slower of the two (PackedLinear::own_kernel_pays; docs/benchmarks.md).
//
// Layout. The packed weight is panels of kPanel = 32 output columns: [P][K][32], P = ⌈N/32⌉,
// element [p][k][j] = W[32p + j, k] (zeros past N). A tile is kTileRows = 12 rows of x against one
// panel: 24 accumulators (12 rows × 2 vectors of 16), and per k two vector loads of the panel and
// 12 broadcasts of x. The panel of a narrow layer (K = 192: 24 KB) stays in L1 across the tiles
// that use it.
//
// Work split: common/cpu_panel_units.h's units of a row tile against a panel, x's rows in chunks
// of kChunkBytes.
//
// Each output element is one float32 sum in the order k = 0, 1, ..., K − 1, begun at the bias (FMA
// at every step); the activation is common/cpu_activation.h's.
#include <attnzoo/kernels/common/cpu_activation.h>
#include <attnzoo/kernels/common/cpu_panel_units.h>
#include <attnzoo/kernels/common/cpu_vector.h>
#include <attnzoo/kernels/cpu_parallel.h>
#include <attnzoo/kernels/ops.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#pragma GCC diagnostic ignored "-Wpsabi"  // vectors never cross a call: common/cpu_vector.h

namespace attnzoo::kernels {
namespace {

using namespace cpu;  // NOLINT(google-build-using-namespace): the vector helpers

constexpr int64_t kPanel = 32;
constexpr int kTileRows = 12;
static_assert(kTileRows == 12, "ATTNZOO_SWITCH_TILE_ROWS covers tiles of 1 to 12 rows");
constexpr int64_t kChunkBytes = 256 * 1024;

#ifdef ATTNZOO_CPU_X86_KERNELS
using F = Lanes<16>::F;

// y[r, 0 : cols] = act(bias + Σ_k x[r, k]·panel[k, :]) for R rows of x (k values each, rows ldx
// apart) into y (rows ldy apart); bias: 32 values (zeros past cols).
template <int R, Act A>
inline __attribute__((always_inline)) void tile(const float* x, int64_t ldx, int64_t k,
                                                const float* panel, const float* bias, float* y,
                                                int64_t ldy, int64_t cols) {
  F acc[R][2];
  const F b0 = load<16>(bias), b1 = load<16>(bias + 16);
  ATTNZOO_UNROLL for (int r = 0; r < R; ++r) {
    acc[r][0] = b0;
    acc[r][1] = b1;
  }
  for (int64_t c = 0; c < k; ++c) {
    const F w0 = load<16>(panel + c * kPanel), w1 = load<16>(panel + c * kPanel + 16);
    ATTNZOO_UNROLL for (int r = 0; r < R; ++r) {
      const F xv = splat<16>(x[r * ldx + c]);
      acc[r][0] += xv * w0;
      acc[r][1] += xv * w1;
    }
  }
  if (cols == kPanel) {
    ATTNZOO_UNROLL for (int r = 0; r < R; ++r) {
      store<16>(y + r * ldy, activate<A, 16>(acc[r][0]));
      store<16>(y + r * ldy + 16, activate<A, 16>(acc[r][1]));
    }
  } else {
    float row[kPanel];
    for (int r = 0; r < R; ++r) {
      store<16>(row, activate<A, 16>(acc[r][0]));
      store<16>(row + 16, activate<A, 16>(acc[r][1]));
      std::memcpy(y + r * ldy, row, static_cast<size_t>(cols) * sizeof(float));
    }
  }
}

// The problem as the units see it.
struct Problem {
  const float* x;       // [M, K] rows contiguous
  const float* packed;  // [P][K][32]
  const float* bias;    // [P·32], zeros past N
  float* y;             // [M, N]
  int64_t k, n;
  PanelUnits units;
};

// Units [begin, end).
template <Act A>
ATTNZOO_TARGET_AVX512 void run_units(const Problem& p, int64_t begin, int64_t end) {
  for (int64_t u = begin; u < end; ++u) {
    const auto [row, rows, panel] = p.units[u];
    const float* x = p.x + row * p.k;
    const float* w = p.packed + panel * p.k * kPanel;
    const float* b = p.bias + panel * kPanel;
    float* y = p.y + row * p.n + panel * kPanel;
    const int64_t cols = std::min(kPanel, p.n - panel * kPanel);
#define ATTNZOO_TILE(R) tile<R, A>(x, p.k, p.k, w, b, y, p.n, cols)
    ATTNZOO_SWITCH_TILE_ROWS(rows, ATTNZOO_TILE)
#undef ATTNZOO_TILE
  }
}

void run(const Problem& p, Act act) {
  const int64_t units = p.units.count();
  // About a million multiply-adds a range: below that the team costs more than it saves.
  const int64_t grain =
      std::max<int64_t>(1, (int64_t{1} << 20) / (kTileRows * kPanel * std::max<int64_t>(p.k, 1)));
  kernels::parallel_for(0, units, grain, [&](int64_t begin, int64_t end) {
    with_activation(act, [&](auto a) { run_units<decltype(a)::value>(p, begin, end); });
  });
}
#endif

void check_float_cpu(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK_VALUE(t.scalar_type() == at::kFloat && t.device().is_cpu(), op, ": ", name,
                    " must be a float32 CPU tensor, got ", t.scalar_type(), " on ",
                    t.device().str());
}

}  // namespace

bool linear_packed_cpu_available() {
#ifdef ATTNZOO_CPU_X86_KERNELS
  return has_avx512();
#else
  return false;
#endif
}

at::Tensor pack_linear_weight_cpu(const at::Tensor& weight) {
  constexpr const char* op = "pack_linear_weight_cpu";
  check_float_cpu(weight, op, "weight");
  TORCH_CHECK_VALUE(weight.dim() == 2, op, ": weight must be [out_features, in_features], got ",
                    weight.sizes());
  const int64_t n = weight.size(0), k = weight.size(1);
  const int64_t panels = (n + kPanel - 1) / kPanel;
  // [N, K] -> zero rows up to P·32 -> [P, 32, K] -> [P, K, 32]
  const at::Tensor padded =
      at::constant_pad_nd(weight.detach(), {0, 0, 0, panels * kPanel - n}, 0.0);
  return padded.view({panels, kPanel, k}).transpose(1, 2).contiguous();
}

namespace {

// attnzoo::linear_packed_cpu on the CPU dispatch key.
at::Tensor linear_packed_cpu_kernel(const at::Tensor& x, const at::Tensor& packed,
                                    int64_t out_features, const std::optional<at::Tensor>& bias,
                                    c10::string_view activation_name) {
  constexpr const char* op = "linear_packed_cpu";
  const std::string activation(activation_name);
  const Act act = parse_activation(activation, op);
  check_float_cpu(x, op, "x");
  check_float_cpu(packed, op, "packed");
  TORCH_CHECK_VALUE(x.dim() >= 1, op, ": x must have at least one dimension");
  const int64_t k = x.size(-1);
  const int64_t n = out_features;
  const int64_t panels = (n + kPanel - 1) / kPanel;
  TORCH_CHECK_VALUE(n >= 0 && packed.dim() == 3 && packed.is_contiguous() &&
                        packed.size(0) == panels && packed.size(1) == k && packed.size(2) == kPanel,
                    op, ": packed must be pack_linear_weight_cpu's [", panels, ", ", k,
                    ", 32] for ", n, " outputs of x's ", k, " inputs, got ", packed.sizes());
  const bool has_bias = bias && bias->defined();
  if (has_bias) {
    check_float_cpu(*bias, op, "bias");
    TORCH_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == n, op, ": bias must be [", n, "], got ",
                      bias->sizes());
  }
  TORCH_CHECK_VALUE(linear_packed_cpu_available(), op,
                    ": needs an AVX-512 processor (linear_packed_cpu_available())");
  auto sizes = x.sizes().vec();
  sizes.back() = n;
  const int64_t m = c10::multiply_integers(x.sizes().slice(0, x.dim() - 1));
  const at::Tensor rows = x.reshape({m, k}).contiguous();
  at::Tensor y = at::empty({m, n}, x.options());
  if (m == 0 || n == 0) return y.view(sizes);
#ifdef ATTNZOO_CPU_X86_KERNELS
  std::vector<float> padded_bias(static_cast<size_t>(panels * kPanel), 0.0f);
  if (has_bias) {
    const at::Tensor b = bias->contiguous();
    std::memcpy(padded_bias.data(), b.const_data_ptr<float>(),
                static_cast<size_t>(n) * sizeof(float));
  }
  const Problem p{rows.const_data_ptr<float>(),
                  packed.const_data_ptr<float>(),
                  padded_bias.data(),
                  y.mutable_data_ptr<float>(),
                  k,
                  n,
                  PanelUnits(m, k * int64_t{sizeof(float)}, panels, kTileRows, kChunkBytes)};
  run(p, act);
#endif
  return y.view(sizes);
}

}  // namespace

at::Tensor linear_packed_cpu(const at::Tensor& x, const at::Tensor& packed, int64_t out_features,
                             const std::optional<at::Tensor>& bias, const std::string& activation) {
  // Through the dispatcher, so that LibTorch's profiler (attnzoo bench --profile-ops) sees it.
  static const auto handle =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("attnzoo::linear_packed_cpu", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t,
                            const std::optional<at::Tensor>&, c10::string_view)>();
  return handle.call(x, packed, out_features, bias, activation);
}

}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CPU, m) {
  m.impl("linear_packed_cpu", TORCH_FN(attnzoo::kernels::linear_packed_cpu_kernel));
}
