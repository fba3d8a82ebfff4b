// attnzoo::add_layer_norm: on CPU against torch::nn::functional::layer_norm of (x + residual) in
// float64 (values, saved statistics, reduced precision within a stated bound); autograd through
// both outputs against the reference expression's autograd and against finite differences; every
// input check; and, with a GPU, the CUDA kernel against float64 by FlashAttention's rule (error at
// most twice LibTorch's own at the same precision).
#include <attnzoo/kernels/ops.h>
#include "common/test_util.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include "kernel_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace test_add_layer_norm {
using attnzoo::testing::error_of;

using ::testing::HasSubstr;
using OptTensor = std::optional<at::Tensor>;

constexpr double kEps = 1e-5;

constexpr const char* kKernelName = "add_layer_norm";

// By name through the dispatcher, as torch.ops.attnzoo.add_layer_norm is called.
std::tuple<at::Tensor, at::Tensor> call_op(const at::Tensor& x, const at::Tensor& residual,
                                           const OptTensor& weight, const OptTensor& bias,
                                           double eps = kEps) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("attnzoo::add_layer_norm", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                    const OptTensor&, const OptTensor&, double)>();
  return op.call(x, residual, weight, bias, eps);
}

// The forward with its statistics: sum, normed, mean, rstd.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> call_forward(const at::Tensor& x,
                                                                        const at::Tensor& residual,
                                                                        const OptTensor& weight,
                                                                        const OptTensor& bias,
                                                                        double eps = kEps) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("attnzoo::_add_layer_norm_forward", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const OptTensor&, const OptTensor&, double)>();
  return op.call(x, residual, weight, bias, eps);
}

using BackwardResult = std::tuple<OptTensor, OptTensor, OptTensor>;

// The backward from the forward's saved tensors: d_x, d_weight, d_bias.
BackwardResult call_backward(const OptTensor& d_sum, const at::Tensor& d_normed,
                             const at::Tensor& sum, const at::Tensor& mean, const at::Tensor& rstd,
                             const OptTensor& weight, bool need_x = true, bool need_weight = true,
                             bool need_bias = true) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("attnzoo::_add_layer_norm_backward", "")
          .typed<BackwardResult(const OptTensor&, const at::Tensor&, const at::Tensor&,
                                const at::Tensor&, const at::Tensor&, const OptTensor&, bool, bool,
                                bool)>();
  return op.call(d_sum, d_normed, sum, mean, rstd, weight, need_x, need_weight, need_bias);
}

// torch::nn::functional::layer_norm of s, with the optional affine parameters.
at::Tensor layer_norm(const at::Tensor& s, const OptTensor& weight, const OptTensor& bias,
                      double eps = kEps) {
  auto options = torch::nn::functional::LayerNormFuncOptions({s.size(-1)}).eps(eps);
  if (weight) options.weight(*weight);
  if (bias) options.bias(*bias);
  return torch::nn::functional::layer_norm(s, options);
}

OptTensor to64(const OptTensor& t) { return t ? OptTensor(t->to(torch::kFloat64)) : std::nullopt; }

// The oracle: layer_norm(x + residual) with everything in float64 (the inputs exactly widened).
at::Tensor reference64(const at::Tensor& x, const at::Tensor& residual, const OptTensor& weight,
                       const OptTensor& bias) {
  return layer_norm(x.to(torch::kFloat64) + residual.to(torch::kFloat64), to64(weight), to64(bias));
}

double max_abs(const at::Tensor& t) { return t.numel() == 0 ? 0.0 : t.abs().max().item<double>(); }

double max_error(const at::Tensor& ours, const at::Tensor& expected) {
  return max_abs(ours.to(torch::kFloat64) - expected.to(torch::kFloat64));
}

// x = randn, residual = randn + 3: the rows' mean is far from 0, which a one-pass variance gets
// wrong at low precision.
at::Tensor randn(at::IntArrayRef shape, const at::TensorOptions& options, double shift = 0) {
  return torch::randn(shape, options.dtype(torch::kFloat64)).add(shift).to(options);
}

// Inputs of awkward layouts and sizes: x and residual of the same shape, each in its own layout.
struct Layout {
  std::string name;
  std::function<at::Tensor(const at::TensorOptions&)> make_x;
  std::function<at::Tensor(const at::TensorOptions&)> make_residual;
};

// What makes a layout of a tensor drawn contiguous: a transpose, a permutation, a slice, ...
using View = std::function<at::Tensor(const at::Tensor&)>;

at::Tensor as_drawn(const at::Tensor& t) { return t; }
at::Tensor transposed(const at::Tensor& t) { return t.t(); }
at::Tensor dims_reversed(const at::Tensor& t) { return t.permute({2, 1, 0}); }
View columns(int64_t begin, int64_t end) {
  return [=](const at::Tensor& t) { return t.slice(1, begin, end); };
}

// x drawn as `x_shape`, then `x_view` of it; the residual likewise (drawn around 3).
Layout viewed(const std::string& name, std::vector<int64_t> x_shape, View x_view,
              std::vector<int64_t> residual_shape, View residual_view) {
  return {name, [=](const auto& o) { return x_view(randn(x_shape, o)); },
          [=](const auto& o) { return residual_view(randn(residual_shape, o, 3)); }};
}

Layout plain(const std::string& name, const std::vector<int64_t>& shape) {
  return viewed(name, shape, as_drawn, shape, as_drawn);
}

// Every row length of the brief (1, an odd one, the Conformer's 36, BERT's 768, 1000) with a few
// rows; then one row, no leading dim, 3-D, no rows, and non-contiguous x and residual.
std::vector<Layout> cpu_layouts() {
  std::vector<Layout> layouts;
  for (const int64_t n : {1, 7, 36, 768, 1000}) {
    layouts.push_back(plain("N=" + std::to_string(n), {3, n}));
  }
  layouts.push_back(plain("one row", {1, 36}));
  layouts.push_back(plain("1-D", {7}));
  layouts.push_back(plain("1-D N=1", {1}));
  layouts.push_back(plain("3-D", {2, 3, 36}));
  layouts.push_back(plain("no rows", {0, 7}));
  layouts.push_back(viewed("transposed x", {7, 4}, transposed, {4, 7}, as_drawn));
  layouts.push_back(viewed("transposed residual", {4, 36}, as_drawn, {36, 4}, transposed));
  layouts.push_back(viewed("permuted 3-D", {7, 3, 2}, dims_reversed, {2, 3, 7}, as_drawn));
  layouts.push_back(
      viewed("slices of wider rows", {4, 10}, columns(1, 8), {4, 12}, columns(5, 12)));
  return layouts;
}

struct Affine {
  std::string name;
  bool weight;
  bool bias;
};
const Affine kAffines[] = {
    {"weight and bias", true, true},
    {"weight only", true, false},
    {"bias only", false, true},
    {"no affine", false, false},
};

// weight around 1, bias around 0, as trained LayerNorms have them.
std::pair<OptTensor, OptTensor> make_affine(const Affine& affine, int64_t n,
                                            const at::TensorOptions& options) {
  OptTensor weight;
  OptTensor bias;
  if (affine.weight) weight = randn({n}, options).mul(0.5).add(1).to(options);
  if (affine.bias) bias = randn({n}, options).mul(0.5).to(options);
  return {weight, bias};
}

std::string trace(torch::Dtype dtype, const Affine& affine, const Layout& layout) {
  return std::string(c10::toString(dtype)) + ", " + affine.name + ", " + layout.name;
}

TEST(AddLayerNorm, CpuOpMatchesFloat64LayerNorm) {
  struct Tolerance {
    torch::Dtype dtype;
    double atol;
  };
  // Normalised outputs are O(1) (|x - mean| * rstd <= sqrt(N)); float32 rounds them at 2^-24.
  const Tolerance tolerances[] = {{torch::kFloat64, 1e-12}, {torch::kFloat32, 2e-5}};
  torch::manual_seed(0);
  for (const auto& [dtype, atol] : tolerances) {
    for (const auto& affine : kAffines) {
      for (const auto& layout : cpu_layouts()) {
        SCOPED_TRACE(trace(dtype, affine, layout));
        const auto o = torch::dtype(dtype);
        const auto x = layout.make_x(o);
        const auto residual = layout.make_residual(o);
        const auto [weight, bias] = make_affine(affine, x.size(-1), o);
        const auto [sum, normed] = call_op(x, residual, weight, bias);
        EXPECT_EQ(sum.sizes(), x.sizes());
        EXPECT_EQ(normed.sizes(), x.sizes());
        EXPECT_EQ(sum.dtype(), x.dtype());
        EXPECT_EQ(normed.dtype(), x.dtype());
        EXPECT_TRUE(sum.is_contiguous());
        EXPECT_TRUE(normed.is_contiguous());
        EXPECT_TRUE(torch::equal(sum, x + residual));
        const auto expected = reference64(x, residual, weight, bias);
        EXPECT_LE(max_error(normed, expected), atol);
      }
    }
  }
}

// Unit roundoff (half an ulp of 1) of the dtypes: round-to-nearest is within u relative.
double unit_roundoff(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat16:
      return std::ldexp(1.0, -11);
    case torch::kBFloat16:
      return std::ldexp(1.0, -8);
    case torch::kFloat64:
      return std::ldexp(1.0, -53);
    default:
      return std::ldexp(1.0, -24);
  }
}

TEST(AddLayerNorm, CpuReducedPrecisionIsWithinTheRoundingBound) {
  // The bound: sum is x + residual rounded once (relative error <= u); normed is the float32
  // normalisation of that rounded sum, rounded once more. An error of u |s| in an element of the
  // sum moves its normed value by u |s| rstd |w| (and the statistics by less, being averages), so
  //   |normed - reference| <= 4u (max |reference| + max |w| max(|sum| rstd))
  // with a factor 2 to spare for the float32 arithmetic and the statistics.
  torch::manual_seed(1);
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    const double u = unit_roundoff(dtype);
    for (const auto& affine : kAffines) {
      for (const auto& layout : cpu_layouts()) {
        SCOPED_TRACE(trace(dtype, affine, layout));
        const auto o = torch::dtype(dtype);
        const auto x = layout.make_x(o);
        const auto residual = layout.make_residual(o);
        if (x.numel() == 0) continue;
        const auto [weight, bias] = make_affine(affine, x.size(-1), o);
        const auto [sum, normed] = call_op(x, residual, weight, bias);
        ASSERT_EQ(sum.dtype(), dtype);
        ASSERT_EQ(normed.dtype(), dtype);
        const auto exact_sum = x.to(torch::kFloat64) + residual.to(torch::kFloat64);
        EXPECT_TRUE(torch::all((sum.to(torch::kFloat64) - exact_sum).abs() <= u * exact_sum.abs())
                        .item<bool>());
        const auto expected = reference64(x, residual, weight, bias);
        const auto rstd =
            1 / torch::sqrt(exact_sum.var(-1, /*unbiased=*/false, /*keepdim=*/true) + kEps);
        const double w_max = weight ? max_abs(*weight) : 1.0;
        const double bound = 4 * u * (max_abs(expected) + w_max * max_abs(exact_sum * rstd));
        EXPECT_LE(max_error(normed, expected), bound);
      }
    }
  }
}

// mean and rstd, as the backward reuses them: float32 (float64 for float64 inputs), shaped like x
// without its last dim, of the sum as returned (rounded to x's dtype).
void expect_statistics(const at::Tensor& sum, const at::Tensor& mean, const at::Tensor& rstd,
                       double rtol) {
  const auto stat = sum.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  const auto leading = sum.sizes().slice(0, sum.dim() - 1);
  ASSERT_EQ(mean.scalar_type(), stat);
  ASSERT_EQ(rstd.scalar_type(), stat);
  ASSERT_EQ(mean.sizes(), leading);
  ASSERT_EQ(rstd.sizes(), leading);
  ASSERT_EQ(mean.device(), sum.device());
  if (sum.numel() == 0) return;
  const auto s = sum.to(torch::kFloat64).cpu();
  const auto expected_mean = s.mean(-1);
  const auto expected_rstd = 1 / torch::sqrt(s.var(-1, /*unbiased=*/false) + kEps);
  // The mean relative to the row's magnitude (it may be ~0), rstd relative to itself.
  const auto scale = s.abs().amax(-1);
  EXPECT_TRUE(torch::all((mean.cpu().to(torch::kFloat64) - expected_mean).abs() <= rtol * scale)
                  .item<bool>())
      << "max mean error " << max_error(mean.cpu(), expected_mean);
  EXPECT_TRUE(torch::allclose(rstd.cpu().to(torch::kFloat64), expected_rstd, rtol, 0))
      << "max rstd error " << max_error(rstd.cpu(), expected_rstd);
}

TEST(AddLayerNorm, CpuForwardSavesTheStatisticsOfTheSum) {
  torch::manual_seed(2);
  for (const auto dtype : {torch::kFloat64, torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    for (const auto& layout : cpu_layouts()) {
      SCOPED_TRACE(trace(dtype, kAffines[0], layout));
      const auto o = torch::dtype(dtype);
      const auto x = layout.make_x(o);
      const auto residual = layout.make_residual(o);
      const auto [weight, bias] = make_affine(kAffines[0], x.size(-1), o);
      const auto [sum, normed, mean, rstd] = call_forward(x, residual, weight, bias);
      const auto [op_sum, op_normed] = call_op(x, residual, weight, bias);
      EXPECT_TRUE(torch::equal(sum, op_sum));
      EXPECT_TRUE(torch::equal(normed, op_normed));
      expect_statistics(sum, mean, rstd, dtype == torch::kFloat64 ? 1e-12 : 1e-5);
    }
  }
}

TEST(AddLayerNorm, EpsIsInsideTheSquareRoot) {
  // A constant row has variance 0: normed = 0 * rsqrt(eps) + bias, and rstd = 1 / sqrt(eps).
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto x = torch::full({2, 5}, 1.5, f64);
  const auto residual = torch::full({2, 5}, -0.25, f64);
  const auto bias = torch::arange(5, f64);
  const auto [sum, normed, mean, rstd] = call_forward(x, residual, std::nullopt, bias, 0.25);
  EXPECT_TRUE(torch::allclose(normed, bias.expand({2, 5})));
  EXPECT_TRUE(torch::allclose(mean, torch::full({2}, 1.25, f64)));
  EXPECT_TRUE(torch::allclose(rstd, torch::full({2}, 2.0, f64)));
  // And a non-constant row against layer_norm with that eps.
  torch::manual_seed(3);
  const auto a = randn({3, 7}, f64);
  const auto b = randn({3, 7}, f64);
  EXPECT_TRUE(torch::allclose(std::get<1>(call_op(a, b, std::nullopt, std::nullopt, 0.5)),
                              layer_norm(a + b, std::nullopt, std::nullopt, 0.5), 1e-12, 1e-12));
}

TEST(AddLayerNorm, CppEntryCallsTheOpWithoutAffineAndEps1e5ByDefault) {
  torch::manual_seed(4);
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto x = randn({3, 7}, f64);
  const auto residual = randn({3, 7}, f64);
  const auto weight = randn({7}, f64);
  const auto [sum, normed] = attnzoo::kernels::add_layer_norm(x, residual);
  const auto [op_sum, op_normed] = call_op(x, residual, std::nullopt, std::nullopt, 1e-5);
  EXPECT_TRUE(torch::equal(sum, op_sum));
  EXPECT_TRUE(torch::equal(normed, op_normed));
  const auto with_weight = attnzoo::kernels::add_layer_norm(x, residual, weight, std::nullopt, 0.1);
  EXPECT_TRUE(torch::equal(std::get<1>(with_weight),
                           std::get<1>(call_op(x, residual, weight, std::nullopt, 0.1))));
}

TEST(AddLayerNorm, MetaTensorsGiveTheOutputShapes) {
  const auto meta = torch::dtype(torch::kBFloat16).device(torch::kMeta);
  const auto [sum, normed, mean, rstd] =
      call_forward(torch::empty({2, 3, 36}, meta), torch::empty({2, 3, 36}, meta),
                   torch::empty({36}, meta), torch::empty({36}, meta));
  EXPECT_TRUE(sum.is_meta());
  EXPECT_TRUE(normed.is_meta());
  EXPECT_EQ(sum.sizes(), (std::vector<int64_t>{2, 3, 36}));
  EXPECT_EQ(normed.sizes(), (std::vector<int64_t>{2, 3, 36}));
  EXPECT_EQ(normed.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(mean.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(rstd.scalar_type(), torch::kFloat32);
  const auto [op_sum, op_normed] =
      call_op(torch::empty({4, 7}, meta), torch::empty({4, 7}, meta), std::nullopt, std::nullopt);
  EXPECT_TRUE(op_normed.is_meta());
  EXPECT_EQ(op_normed.sizes(), (std::vector<int64_t>{4, 7}));
}

// --- autograd --------------------------------------------------------------------------------

struct Inputs {
  at::Tensor x;
  at::Tensor residual;
  OptTensor weight;
  OptTensor bias;
};

using Fn = std::function<std::tuple<at::Tensor, at::Tensor>(const Inputs&)>;

Fn op_fn(double eps = kEps) {
  return [eps](const Inputs& in) { return call_op(in.x, in.residual, in.weight, in.bias, eps); };
}

// The reference expression, differentiated by LibTorch's own autograd.
Fn reference_fn(double eps = kEps) {
  return [eps](const Inputs& in) {
    const auto sum = in.x + in.residual;
    return std::make_tuple(sum, layer_norm(sum, in.weight, in.bias, eps));
  };
}

struct Grads {
  at::Tensor x;
  at::Tensor residual;
  at::Tensor weight;  // undefined without a weight
  at::Tensor bias;    // undefined without a bias
};

// Gradients of sum(d_sum * sum) + sum(d_normed * normed) (either term left out when its
// cotangent is undefined) with respect to every input that is given.
Grads grads_of(const Fn& f, const Inputs& in, const at::Tensor& d_sum, const at::Tensor& d_normed) {
  Inputs leaves{in.x.detach().requires_grad_(), in.residual.detach().requires_grad_(), std::nullopt,
                std::nullopt};
  std::vector<at::Tensor> wrt = {leaves.x, leaves.residual};
  if (in.weight) {
    leaves.weight = in.weight->detach().requires_grad_();
    wrt.push_back(*leaves.weight);
  }
  if (in.bias) {
    leaves.bias = in.bias->detach().requires_grad_();
    wrt.push_back(*leaves.bias);
  }
  const auto [sum, normed] = f(leaves);
  std::vector<at::Tensor> outputs;
  std::vector<at::Tensor> cotangents;
  if (d_sum.defined()) {
    outputs.push_back(sum);
    cotangents.push_back(d_sum);
  }
  if (d_normed.defined()) {
    outputs.push_back(normed);
    cotangents.push_back(d_normed);
  }
  const auto grads = torch::autograd::grad(outputs, wrt, cotangents, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
  Grads result{grads[0], grads[1], {}, {}};
  size_t next = 2;
  if (in.weight) result.weight = grads[next++];
  if (in.bias) result.bias = grads[next++];
  return result;
}

// An undefined gradient (an input the loss does not depend on) counts as zeros.
void expect_close(const at::Tensor& ours, const at::Tensor& expected, const at::Tensor& like,
                  double tol, const char* what) {
  const auto a = ours.defined() ? ours : torch::zeros_like(like);
  const auto b = expected.defined() ? expected : torch::zeros_like(like);
  EXPECT_EQ(a.sizes(), like.sizes()) << what;
  EXPECT_LE(max_error(a, b), tol) << what;
}

void expect_same_grads(const Grads& ours, const Grads& expected, const Inputs& in, double tol) {
  expect_close(ours.x, expected.x, in.x, tol, "d_x");
  expect_close(ours.residual, expected.residual, in.residual, tol, "d_residual");
  if (in.weight) expect_close(ours.weight, expected.weight, *in.weight, tol, "d_weight");
  if (in.bias) expect_close(ours.bias, expected.bias, *in.bias, tol, "d_bias");
}

Inputs make_inputs(const Layout& layout, const Affine& affine, const at::TensorOptions& o) {
  Inputs in{layout.make_x(o), layout.make_residual(o), std::nullopt, std::nullopt};
  std::tie(in.weight, in.bias) = make_affine(affine, in.x.size(-1), o);
  return in;
}

TEST(AddLayerNormAutograd, GradientsThroughBothOutputsMatchTheReferenceExpression) {
  torch::manual_seed(5);
  const auto f64 = torch::dtype(torch::kFloat64);
  for (const auto& affine : kAffines) {
    for (const auto& layout : cpu_layouts()) {
      SCOPED_TRACE(trace(torch::kFloat64, affine, layout));
      const auto in = make_inputs(layout, affine, f64);
      const auto d_sum = torch::randn(in.x.sizes(), f64);
      const auto d_normed = torch::randn(in.x.sizes(), f64);
      expect_same_grads(grads_of(op_fn(), in, d_sum, d_normed),
                        grads_of(reference_fn(), in, d_sum, d_normed), in, 1e-10);
    }
  }
}

TEST(AddLayerNormAutograd, EitherOutputAloneGivesItsOwnGradients) {
  // The unused output's gradient reaches the backward undefined.
  torch::manual_seed(6);
  const auto f64 = torch::dtype(torch::kFloat64);
  for (const auto& affine : kAffines) {
    SCOPED_TRACE(affine.name);
    const auto in = make_inputs(plain("3-D", {2, 3, 36}), affine, f64);
    const auto g = torch::randn(in.x.sizes(), f64);
    // Only normed: layer_norm's gradient alone.
    expect_same_grads(grads_of(op_fn(), in, {}, g), grads_of(reference_fn(), in, {}, g), in, 1e-10);
    // Only sum: d_x = d_residual = d_sum, no gradient for weight and bias.
    const auto only_sum = grads_of(op_fn(), in, g, {});
    EXPECT_TRUE(torch::equal(only_sum.x, g));
    EXPECT_TRUE(torch::equal(only_sum.residual, g));
    EXPECT_FALSE(only_sum.weight.defined() && max_abs(only_sum.weight) > 0);
    EXPECT_FALSE(only_sum.bias.defined() && max_abs(only_sum.bias) > 0);
  }
}

TEST(AddLayerNormAutograd, GradientsMatchFiniteDifferences) {
  // Independent of LibTorch's layer_norm backward.
  torch::manual_seed(7);
  const auto f64 = torch::dtype(torch::kFloat64);
  for (const auto& affine : kAffines) {
    SCOPED_TRACE(affine.name);
    const auto in = make_inputs(plain("3-D", {2, 3, 7}), affine, f64);
    const auto d_sum = torch::randn(in.x.sizes(), f64);
    const auto d_normed = torch::randn(in.x.sizes(), f64);
    const Inputs dir = make_inputs(plain("3-D", {2, 3, 7}), affine, f64);
    const auto loss = [&](double t) {
      const auto shift = [t](const OptTensor& a, const OptTensor& b) {
        return a ? OptTensor(*a + t * *b) : std::nullopt;
      };
      const auto [sum, normed] = call_op(in.x + t * dir.x, in.residual + t * dir.residual,
                                         shift(in.weight, dir.weight), shift(in.bias, dir.bias));
      return ((d_sum * sum).sum() + (d_normed * normed).sum()).item<double>();
    };
    constexpr double kStep = 1e-6;
    const double numerical = (loss(kStep) - loss(-kStep)) / (2 * kStep);
    const auto grads = grads_of(op_fn(), in, d_sum, d_normed);
    auto analytical = (grads.x * dir.x).sum() + (grads.residual * dir.residual).sum();
    if (in.weight) analytical = analytical + (grads.weight * *dir.weight).sum();
    if (in.bias) analytical = analytical + (grads.bias * *dir.bias).sum();
    EXPECT_NEAR(analytical.item<double>(), numerical, 1e-6 * std::max(1.0, std::abs(numerical)));
  }
}

TEST(AddLayerNormAutograd, SecondDerivativesMatchTheReferenceExpression) {
  // Under create_graph the backward recomputes the statistics from the saved sum, so that they
  // are differentiated too.
  torch::manual_seed(8);
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto second = [&](const Fn& f, const Inputs& in, const at::Tensor& d_sum,
                          const at::Tensor& d_normed, const at::Tensor& v) {
    const auto x = in.x.detach().requires_grad_();
    const auto residual = in.residual.detach().requires_grad_();
    const auto weight = in.weight->detach().requires_grad_();
    const auto bias = in.bias->detach().requires_grad_();
    const auto [sum, normed] = f({x, residual, weight, bias});
    const auto first =
        torch::autograd::grad({sum, normed}, {x, residual, weight, bias}, {d_sum, d_normed},
                              /*retain_graph=*/true, /*create_graph=*/true);
    return torch::autograd::grad(
        {(first[0] * v).sum() + first[1].square().sum() + (first[2] * first[3]).sum()},
        {x, residual, weight, bias}, {}, /*retain_graph=*/false, /*create_graph=*/false,
        /*allow_unused=*/true);
  };
  const auto in = make_inputs(plain("2-D", {5, 7}), kAffines[0], f64);
  const auto d_sum = torch::randn(in.x.sizes(), f64);
  const auto d_normed = torch::randn(in.x.sizes(), f64);
  const auto v = torch::randn(in.x.sizes(), f64);
  const auto ours = second(op_fn(), in, d_sum, d_normed, v);
  const auto expected = second(reference_fn(), in, d_sum, d_normed, v);
  const char* names[] = {"x", "residual", "weight", "bias"};
  const at::Tensor likes[] = {in.x, in.residual, *in.weight, *in.bias};
  for (size_t i = 0; i < 4; ++i) {
    expect_close(ours[i], expected[i], likes[i], 1e-9, names[i]);
  }
}

TEST(AddLayerNormAutograd, OnlyTheInputsThatRequireGradGetOne) {
  // Without a weight, bias is the third tensor input: its gradient must still be d_bias.
  torch::manual_seed(9);
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto x = randn({4, 7}, f64);
  const auto residual = randn({4, 7}, f64).requires_grad_();
  const auto bias = randn({7}, f64).requires_grad_();
  const auto d_normed = torch::randn({4, 7}, f64);
  std::get<1>(call_op(x, residual, std::nullopt, bias)).backward(d_normed);
  EXPECT_FALSE(x.grad().defined());
  const Inputs in{x, residual, std::nullopt, bias};
  const auto expected = grads_of(reference_fn(), in, {}, d_normed);
  EXPECT_LE(max_error(residual.grad(), expected.residual), 1e-10);
  EXPECT_LE(max_error(bias.grad(), expected.bias), 1e-10);
  // Only the weight requires grad.
  const auto weight = randn({7}, f64).requires_grad_();
  std::get<1>(call_op(x, residual.detach(), weight, std::nullopt)).backward(d_normed);
  const auto expected_w =
      grads_of(reference_fn(), {x, residual.detach(), weight, std::nullopt}, {}, d_normed);
  EXPECT_LE(max_error(weight.grad(), expected_w.weight), 1e-10);
}

TEST(AddLayerNormAutograd, Float32GradientsAreCloseToFloat64) {
  torch::manual_seed(10);
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto in64 = make_inputs(plain("N=768", {3, 768}), kAffines[0], f64);
  const auto f32 = [](const OptTensor& t) { return OptTensor(t->to(torch::kFloat32)); };
  const Inputs in32{in64.x.to(torch::kFloat32), in64.residual.to(torch::kFloat32), f32(in64.weight),
                    f32(in64.bias)};
  const auto d_sum = torch::randn(in64.x.sizes(), f64);
  const auto d_normed = torch::randn(in64.x.sizes(), f64);
  expect_same_grads(
      grads_of(op_fn(), in32, d_sum.to(torch::kFloat32), d_normed.to(torch::kFloat32)),
      grads_of(reference_fn(), in64, d_sum, d_normed), in64, 1e-4);
}

TEST(AddLayerNormAutograd, BackwardOpGivesTheReferenceGradientsAndOnlyThoseAskedFor) {
  torch::manual_seed(11);
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tol = dtype == torch::kFloat64 ? 1e-10 : 1e-4;
    for (const auto& affine : kAffines) {
      for (const bool with_d_sum : {true, false}) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + ", " + affine.name +
                     (with_d_sum ? ", d_sum" : ", no d_sum"));
        const auto o = torch::dtype(dtype);
        const auto in = make_inputs(plain("3-D", {2, 3, 36}), affine, o);
        const auto d_sum = with_d_sum ? torch::randn(in.x.sizes(), o) : at::Tensor();
        const auto d_normed = torch::randn(in.x.sizes(), o);
        const auto [sum, normed, mean, rstd] = call_forward(in.x, in.residual, in.weight, in.bias);
        const auto [d_x, d_weight, d_bias] = call_backward(
            with_d_sum ? OptTensor(d_sum) : std::nullopt, d_normed, sum, mean, rstd, in.weight);
        const auto expected = grads_of(reference_fn(), in, d_sum, d_normed);
        ASSERT_TRUE(d_x.has_value());
        expect_close(*d_x, expected.x, in.x, tol, "d_x");
        EXPECT_EQ(d_weight.has_value(), affine.weight) << "d_weight exactly with a weight";
        if (d_weight) expect_close(*d_weight, expected.weight, *in.weight, tol, "d_weight");
        ASSERT_TRUE(d_bias.has_value());
        if (in.bias) expect_close(*d_bias, expected.bias, *in.bias, tol, "d_bias");
        const auto [none_x, none_weight, none_bias] =
            call_backward(std::nullopt, d_normed, sum, mean, rstd, in.weight, false, false, false);
        EXPECT_FALSE(none_x.has_value());
        EXPECT_FALSE(none_weight.has_value());
        EXPECT_FALSE(none_bias.has_value());
      }
    }
  }
}

// --- input checks ----------------------------------------------------------------------------

TEST(AddLayerNormChecks, XWithoutALastDimIsRejected) {
  EXPECT_THAT(error_of<c10::Error>([] {
                call_op(torch::randn({3, 0}), torch::randn({3, 0}), std::nullopt, std::nullopt);
              }),
              HasSubstr("attnzoo::add_layer_norm: x must have shape [..., N] with N > 0, got "
                        "shape [3, 0]"));
  EXPECT_THAT(error_of<c10::Error>([] {
                call_op(torch::tensor(1.0f), torch::tensor(1.0f), std::nullopt, std::nullopt);
              }),
              HasSubstr("x must have shape [..., N] with N > 0, got shape []"));
}

TEST(AddLayerNormChecks, IntegerXIsRejected) {
  EXPECT_THAT(error_of<c10::Error>([] {
                call_op(torch::ones({4, 7}, torch::kLong), torch::ones({4, 7}, torch::kLong),
                        std::nullopt, std::nullopt);
              }),
              HasSubstr("attnzoo::add_layer_norm: x must be a floating-point tensor, got Long"));
}

TEST(AddLayerNormChecks, ResidualOfAnotherShapeIsRejected) {
  const auto message = error_of<c10::Error>([] {
    call_op(torch::randn({4, 7}), torch::randn({7}), std::nullopt, std::nullopt);
  });
  EXPECT_THAT(message,
              HasSubstr("attnzoo::add_layer_norm: residual must have x's shape [4, 7], got shape "
                        "[7]"));
  // The same check through the C++ entry and under autograd.
  EXPECT_THAT(error_of<c10::Error>([] {
                attnzoo::kernels::add_layer_norm(torch::randn({4, 7}), torch::randn({4, 8}));
              }),
              HasSubstr("residual must have x's shape [4, 7], got shape [4, 8]"));
  EXPECT_THAT(error_of<c10::Error>([] {
                call_op(torch::randn({4, 7}).requires_grad_(),
                        torch::randn({5, 7}).requires_grad_(), std::nullopt, std::nullopt);
              }),
              HasSubstr("residual must have x's shape [4, 7], got shape [5, 7]"));
}

TEST(AddLayerNormChecks, ResidualOfAnotherDtypeIsRejected) {
  EXPECT_THAT(error_of<c10::Error>([] {
                call_op(torch::randn({4, 7}), torch::randn({4, 7}, torch::kFloat64), std::nullopt,
                        std::nullopt);
              }),
              HasSubstr("attnzoo::add_layer_norm: residual must have x's dtype Float, got Double"));
}

TEST(AddLayerNormChecks, ResidualOnAnotherDeviceIsRejected) {
  // The meta device stands in for a GPU: a CPU-only machine has no other device kind.
  EXPECT_THAT(error_of<c10::Error>([] {
                call_op(torch::randn({4, 7}), torch::empty({4, 7}, torch::kMeta), std::nullopt,
                        std::nullopt);
              }),
              HasSubstr("attnzoo::add_layer_norm: residual must be on x's device cpu, got meta"));
}

TEST(AddLayerNormChecks, WeightAndBiasOfTheWrongSizeAreRejected) {
  const auto x = torch::randn({4, 7});
  EXPECT_THAT(error_of<c10::Error>([&] { call_op(x, x, torch::randn({8}), std::nullopt); }),
              HasSubstr("attnzoo::add_layer_norm: weight must be 1-D of shape [N] = [7] (N = last "
                        "dim of x, shape [4, 7]), got shape [8]"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                call_op(x, x, std::nullopt, torch::randn({1, 7}));
              }),
              HasSubstr("attnzoo::add_layer_norm: bias must be 1-D of shape [N] = [7] (N = last "
                        "dim of x, shape [4, 7]), got shape [1, 7]"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                call_op(x.clone().requires_grad_(), x, torch::randn({7}), torch::randn({6}));
              }),
              HasSubstr("bias must be 1-D of shape [N] = [7]"));
}

TEST(AddLayerNormChecks, WeightAndBiasOfAnotherDtypeAreRejected) {
  const auto x = torch::randn({4, 7});
  EXPECT_THAT(error_of<c10::Error>(
                  [&] { call_op(x, x, torch::randn({7}, torch::kBFloat16), std::nullopt); }),
              HasSubstr("attnzoo::add_layer_norm: weight must have x's dtype Float, got BFloat16"));
  EXPECT_THAT(error_of<c10::Error>(
                  [&] { call_op(x, x, torch::randn({7}), torch::randn({7}, torch::kFloat64)); }),
              HasSubstr("attnzoo::add_layer_norm: bias must have x's dtype Float, got Double"));
}

TEST(AddLayerNormChecks, WeightAndBiasOnAnotherDeviceAreRejected) {
  const auto x = torch::randn({4, 7});
  EXPECT_THAT(
      error_of<c10::Error>([&] { call_op(x, x, torch::empty({7}, torch::kMeta), std::nullopt); }),
      HasSubstr("attnzoo::add_layer_norm: weight must be on x's device cpu, got meta"));
  EXPECT_THAT(
      error_of<c10::Error>([&] { call_op(x, x, std::nullopt, torch::empty({7}, torch::kMeta)); }),
      HasSubstr("attnzoo::add_layer_norm: bias must be on x's device cpu, got meta"));
}

TEST(AddLayerNormChecks, NegativeOrNonFiniteEpsIsRejected) {
  const auto x = torch::randn({4, 7});
  EXPECT_THAT(error_of<c10::Error>([&] { call_op(x, x, std::nullopt, std::nullopt, -1e-5); }),
              HasSubstr("attnzoo::add_layer_norm: eps must be finite and >= 0, got -1e-05"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                call_op(x, x, std::nullopt, std::nullopt, std::numeric_limits<double>::quiet_NaN());
              }),
              HasSubstr("eps must be finite and >= 0, got nan"));
}

TEST(AddLayerNormChecks, TheForwardWithStatisticsChecksToo) {
  EXPECT_THAT(
      error_of<c10::Error>([] {
        call_forward(torch::randn({4, 7}), torch::randn({4, 6}), std::nullopt, std::nullopt);
      }),
      HasSubstr("attnzoo::add_layer_norm: residual must have x's shape [4, 7]"));
}

TEST(AddLayerNormChecks, TheBackwardChecksItsInputs) {
  const auto sum = torch::randn({4, 7});
  const auto mean = torch::zeros({4});
  EXPECT_THAT(error_of<c10::Error>([&] {
                call_backward(std::nullopt, torch::randn({4, 6}), sum, mean, mean, std::nullopt);
              }),
              HasSubstr("attnzoo::_add_layer_norm_backward: d_normed must have sum's shape [4, 7], "
                        "dtype Float and device cpu, got [4, 6], Float, cpu"));
  EXPECT_THAT(
      error_of<c10::Error>([&] {
        call_backward(torch::randn({4, 7}, torch::kFloat64), sum, sum, mean, mean, std::nullopt);
      }),
      HasSubstr("attnzoo::_add_layer_norm_backward: d_sum must have sum's shape [4, 7], "
                "dtype Float and device cpu, got [4, 7], Double, cpu"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                call_backward(std::nullopt, sum, sum, torch::zeros({4}, torch::kFloat64), mean,
                              std::nullopt);
              }),
              HasSubstr("attnzoo::_add_layer_norm_backward: mean must be Float [4] on cpu, got "
                        "Double [4] on cpu"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                call_backward(std::nullopt, sum, sum, mean, torch::zeros({4, 1}), std::nullopt);
              }),
              HasSubstr("attnzoo::_add_layer_norm_backward: rstd must be Float [4] on cpu, got "
                        "Float [4, 1] on cpu"));
  EXPECT_THAT(error_of<c10::Error>(
                  [&] { call_backward(std::nullopt, sum, sum, mean, mean, torch::randn({8})); }),
              HasSubstr("attnzoo::_add_layer_norm_backward: weight must be Float [7] on cpu, got "
                        "Float [8] on cpu"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                call_backward(std::nullopt, torch::ones({4, 7}, torch::kLong),
                              torch::ones({4, 7}, torch::kLong), mean, mean, std::nullopt);
              }),
              HasSubstr("attnzoo::_add_layer_norm_backward: sum must be a floating-point [..., N] "
                        "with N > 0, got Long [4, 7]"));
}

// --- The fused kernels: CPU and CUDA ----------------------------------------------------------

using attnzoo::testing::epsilon;

// The op allocates four outputs (sum, normed, mean, rstd): poison four blocks of those sizes,
// held at once so that they are distinct, in the order the op allocates them.
void poison_outputs(const at::Tensor& x) {
  const auto nan = std::numeric_limits<float>::quiet_NaN();
  const auto leading = x.sizes().slice(0, x.dim() - 1);
  const auto a = torch::full(x.sizes(), nan, x.options());
  const auto b = torch::full(x.sizes(), nan, x.options());
  const auto c = torch::full(leading, nan, x.options().dtype(torch::kFloat32));
  const auto d = torch::full(leading, nan, x.options().dtype(torch::kFloat32));
}

// FlashAttention's rule: the kernel's max error against float64 is at most twice that of
// LibTorch's own layer_norm(x + residual) at the same precision, plus one unit in the last place
// of the largest output for the case where LibTorch happens to be exact on a few elements. The
// sum must be LibTorch's x + residual exactly; the statistics those of the sum in float32.
void expect_as_accurate_as_libtorch(const at::Tensor& x, const at::Tensor& residual,
                                    const OptTensor& weight, const OptTensor& bias) {
  poison_outputs(x);
  const auto [sum, normed, mean, rstd] = call_forward(x, residual, weight, bias);
  ASSERT_EQ(sum.sizes(), x.sizes());
  ASSERT_EQ(normed.sizes(), x.sizes());
  ASSERT_EQ(normed.dtype(), x.dtype());
  ASSERT_EQ(normed.device(), x.device());
  ASSERT_TRUE(sum.is_contiguous());
  ASSERT_TRUE(normed.is_contiguous());
  if (x.numel() == 0) {
    return;
  }
  EXPECT_TRUE(torch::isfinite(normed).all().item<bool>()) << "the kernel left elements unwritten";
  EXPECT_TRUE(torch::isfinite(mean).all().item<bool>()) << "the kernel left a mean unwritten";
  EXPECT_TRUE(torch::isfinite(rstd).all().item<bool>()) << "the kernel left an rstd unwritten";
  EXPECT_TRUE(torch::equal(sum, x + residual)) << "sum is not x + residual rounded once";
  const auto reference = reference64(x, residual, weight, bias);
  const auto libtorch = layer_norm(x + residual, weight, bias);
  const double ours = max_error(normed, reference);
  const double theirs = max_error(libtorch, reference);
  const double ulp = epsilon(x.scalar_type()) * max_abs(reference);
  EXPECT_LE(ours, 2 * theirs + ulp) << "LibTorch's error: " << theirs;
  expect_statistics(sum, mean, rstd, 1e-5);
  // And the public op returns the same two tensors.
  const auto [op_sum, op_normed] = call_op(x, residual, weight, bias);
  EXPECT_TRUE(torch::equal(op_sum, sum));
  EXPECT_TRUE(torch::equal(op_normed, normed));
}

TEST(AddLayerNorm, CpuKernelIsRegisteredForTheCpu) {
  // The forward has a CPU kernel of its own (add_layer_norm_cpu.cpp), not just the reference.
  const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("attnzoo::_add_layer_norm_forward", "");
  EXPECT_TRUE(op.hasKernelForDispatchKey(c10::DispatchKey::CPU));
}

TEST(AddLayerNorm, CpuKernelIsAsAccurateAsLibTorch) {
  torch::manual_seed(30);
  // Row lengths around the kernel's 16 lanes and those of the models (Conformer 144 and 256, ViT
  // 384 and 768), a prime above 4096; from one row to enough for several threads' shares.
  const int64_t lengths[] = {1, 15, 16, 17, 36, 144, 256, 768, 4099};
  const int64_t row_counts[] = {1, 3, 197, 1500};
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const int64_t n : lengths) {
      for (const int64_t rows : row_counts) {
        if (n * rows > (int64_t{1} << 22)) continue;
        for (const auto& affine : kAffines) {
          SCOPED_TRACE(std::string(c10::toString(dtype)) + ", " + affine.name + ", " +
                       std::to_string(rows) + " x " + std::to_string(n));
          const auto o = torch::dtype(dtype);
          const auto [weight, bias] = make_affine(affine, n, o);
          expect_as_accurate_as_libtorch(randn({rows, n}, o), randn({rows, n}, o, 3), weight, bias);
        }
      }
    }
  }
}

TEST(AddLayerNorm, CpuKernelKeepsTheVarianceOfRowsFarFromZero) {
  // Rows at 1e3 and 1e4 +- 1: a one-pass E[s^2] - E[s]^2 in float32 loses every digit of the
  // variance, and even the mean summed from zero loses enough that at 1e4 the error is past
  // twice LibTorch's (measured: 4.6e-4 against 1.9e-4); summed relative to the row's first
  // element, and the variance in a second pass over the cached row, it is not.
  torch::manual_seed(31);
  const auto o = torch::dtype(torch::kFloat32);
  for (const double shift : {1e3, 1e4}) {
    for (const int64_t n : {768, 4099}) {
      SCOPED_TRACE(std::to_string(shift) + ", N = " + std::to_string(n));
      const auto x = randn({64, n}, o, shift);
      const auto residual = randn({64, n}, o);
      const auto [weight, bias] = make_affine(kAffines[0], n, o);
      expect_as_accurate_as_libtorch(x, residual, weight, bias);
    }
  }
}

TEST(AddLayerNorm, CpuKernelGivesTheSameResultOnAnyThreadCount) {
  torch::manual_seed(32);
  const auto o = torch::dtype(torch::kFloat32);
  const auto x = randn({1000, 144}, o);
  const auto residual = randn({1000, 144}, o, 3);
  const auto [weight, bias] = make_affine(kAffines[0], 144, o);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto [sum1, normed1, mean1, rstd1] = call_forward(x, residual, weight, bias);
  at::set_num_threads(std::max(2, threads));
  const auto [sum2, normed2, mean2, rstd2] = call_forward(x, residual, weight, bias);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(sum1, sum2));
  EXPECT_TRUE(torch::equal(normed1, normed2));
  EXPECT_TRUE(torch::equal(mean1, mean2));
  EXPECT_TRUE(torch::equal(rstd1, rstd2));
}

std::vector<Layout> cuda_layouts() {
  std::vector<Layout> layouts;
  // Row lengths on both sides of each path: packed or not (N % 8, % 4), cached in registers or
  // not (N <= 1024).
  for (const int64_t n : {1, 7, 12, 36, 64, 768, 1000, 1024, 1025, 1032, 4099, 8192}) {
    layouts.push_back(plain("N=" + std::to_string(n), {5, n}));
  }
  layouts.push_back(plain("one row", {1, 768}));
  layouts.push_back(plain("1-D", {36}));
  layouts.push_back(plain("3-D", {2, 3, 64}));
  layouts.push_back(plain("many rows", {300, 3, 40}));
  layouts.push_back(plain("no rows", {0, 64}));
  layouts.push_back(viewed("transposed x", {64, 8}, transposed, {8, 64}, as_drawn));
  layouts.push_back(viewed("permuted residual", {2, 3, 64}, as_drawn, {64, 3, 2}, dims_reversed));
  layouts.push_back(viewed("misaligned rows", {6, 80}, columns(1, 65), {6, 64}, as_drawn));
  layouts.push_back(
      viewed("aligned strided rows", {6, 80}, columns(8, 72), {6, 96}, columns(16, 80)));
  layouts.push_back(viewed(
      "misaligned base", {6 * 64 + 1},
      [](const at::Tensor& t) {
        return t.slice(0, 1).view({6, 64});
      },
      {6, 64}, as_drawn));
  layouts.push_back(viewed(
      "broadcast rows", {1, 64},
      [](const at::Tensor& t) {
        return t.expand({5, 64});
      },
      {5, 64}, as_drawn));
  return layouts;
}

TEST(AddLayerNorm, MatchesFloat64_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  torch::manual_seed(20);
  for (const auto dtype : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
    for (const auto& affine : kAffines) {
      for (const auto& layout : cuda_layouts()) {
        SCOPED_TRACE(trace(dtype, affine, layout));
        const auto o = torch::dtype(dtype).device(torch::kCUDA);
        const auto x = layout.make_x(o);
        const auto [weight, bias] = make_affine(affine, x.size(-1), o);
        expect_as_accurate_as_libtorch(x, layout.make_residual(o), weight, bias);
      }
    }
  }
}

TEST(AddLayerNorm, LargeInputsLoopOverTheCappedGrid_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  torch::manual_seed(21);
  // More rows than the launcher's 2^16 blocks x 4 rows: one-element path (fp16, N % 8 != 0) and
  // 16-byte path (bf16, N % 8 == 0).
  const std::pair<torch::Dtype, std::vector<int64_t>> cases[] = {{torch::kFloat16, {270000, 36}},
                                                                 {torch::kBFloat16, {270000, 64}}};
  for (const auto& [dtype, shape] : cases) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto o = torch::dtype(dtype).device(torch::kCUDA);
    const auto [weight, bias] = make_affine(kAffines[0], shape.back(), o);
    expect_as_accurate_as_libtorch(randn(shape, o), randn(shape, o, 3), weight, bias);
  }
}

TEST(AddLayerNorm, Float64FallsBackToTheReference_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  torch::manual_seed(22);
  const auto o = torch::dtype(torch::kFloat64).device(torch::kCUDA);
  const auto x = randn({4, 7}, o);
  const auto residual = randn({4, 7}, o);
  const auto [weight, bias] = make_affine(kAffines[0], 7, o);
  const auto [sum, normed, mean, rstd] = call_forward(x, residual, weight, bias);
  EXPECT_TRUE(torch::equal(sum, x + residual));
  EXPECT_LE(max_error(normed.cpu(), reference64(x, residual, weight, bias).cpu()), 1e-12);
  expect_statistics(sum, mean, rstd, 1e-12);
}

TEST(AddLayerNorm, GradientsMatchFloat64_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  torch::manual_seed(23);
  const auto f64 = torch::dtype(torch::kFloat64);
  // The fused backward (N = 768) and its LibTorch fallback (N = 1500).
  for (const auto& [layout, affine] :
       {std::make_pair(plain("3-D", {3, 5, 768}), kAffines[0]),
        std::make_pair(plain("3-D", {3, 5, 768}), kAffines[1]),
        std::make_pair(plain("3-D", {3, 5, 768}), kAffines[2]),
        std::make_pair(plain("3-D", {3, 5, 768}), kAffines[3]),
        std::make_pair(plain("long rows", {2, 3, 1500}), kAffines[0])}) {
    SCOPED_TRACE(layout.name + ", " + affine.name);
    const auto in64 = make_inputs(layout, affine, f64);
    const auto cuda32 = [](const OptTensor& t) {
      return t ? OptTensor(t->to(torch::kCUDA, torch::kFloat32)) : std::nullopt;
    };
    const Inputs in32{in64.x.to(torch::kCUDA, torch::kFloat32),
                      in64.residual.to(torch::kCUDA, torch::kFloat32), cuda32(in64.weight),
                      cuda32(in64.bias)};
    const auto d_sum = torch::randn(in64.x.sizes(), f64);
    const auto d_normed = torch::randn(in64.x.sizes(), f64);
    const auto ours = grads_of(op_fn(), in32, d_sum.to(torch::kCUDA, torch::kFloat32),
                               d_normed.to(torch::kCUDA, torch::kFloat32));
    const auto cpu = [](const at::Tensor& t) { return t.defined() ? t.cpu() : t; };
    expect_same_grads({cpu(ours.x), cpu(ours.residual), cpu(ours.weight), cpu(ours.bias)},
                      grads_of(reference_fn(), in64, d_sum, d_normed), in64, 1e-4);
  }
}

// Gradients of layer_norm at s (the forward's rounded sum) by LibTorch's autograd, plus d_sum:
// d_x, d_weight, d_bias. In float64 for the oracle, at the inputs' precision for LibTorch's own.
Grads layer_norm_grads(const at::Tensor& s, const OptTensor& weight, const OptTensor& bias,
                       const at::Tensor& d_sum, const at::Tensor& d_normed) {
  const Inputs in{s, torch::zeros_like(s), weight, bias};
  auto grads = grads_of(reference_fn(), in, {}, d_normed);
  if (d_sum.defined()) grads.x = grads.x + d_sum;
  return grads;
}

// The fused backward (rows up to 1024) and its fallback (longer rows) against float64, by the
// forward's rule: each gradient's max error at most twice that of LibTorch's own autograd of
// layer_norm at the same precision, plus one ulp of the largest; outputs poisoned with NaN first.
TEST(AddLayerNorm, BackwardKernelIsAsAccurateAsLibTorch_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  torch::manual_seed(25);
  std::vector<Layout> layouts;
  for (const int64_t n : {1, 7, 36, 64, 768, 1000, 1024, 1025, 4099}) {
    layouts.push_back(plain("N=" + std::to_string(n), {5, n}));
  }
  // More rows than the backward's grid has warps, so that warps loop and their partials add up.
  layouts.push_back(plain("many rows", {20000, 64}));
  layouts.push_back(plain("many rows, odd N", {20000, 36}));
  for (const auto dtype : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
    for (const auto& affine : kAffines) {
      for (const auto& layout : layouts) {
        for (const bool with_d_sum : {true, false}) {
          SCOPED_TRACE(trace(dtype, affine, layout) + (with_d_sum ? ", d_sum" : ", no d_sum"));
          const auto o = torch::dtype(dtype).device(torch::kCUDA);
          const auto in = make_inputs(layout, affine, o);
          const auto d_sum = with_d_sum ? randn(in.x.sizes(), o) : at::Tensor();
          const auto d_normed = randn(in.x.sizes(), o);
          const auto [sum, normed, mean, rstd] =
              call_forward(in.x, in.residual, in.weight, in.bias);
          poison_outputs(sum);
          const auto [d_x, d_weight, d_bias] = call_backward(
              with_d_sum ? OptTensor(d_sum) : std::nullopt, d_normed, sum, mean, rstd, in.weight);
          ASSERT_TRUE(d_x.has_value());
          ASSERT_TRUE(d_bias.has_value());
          ASSERT_EQ(d_weight.has_value(), affine.weight);
          ASSERT_EQ(d_x->sizes(), sum.sizes());
          ASSERT_EQ(d_x->dtype(), sum.dtype());
          EXPECT_TRUE(torch::isfinite(*d_x).all().item<bool>()) << "d_x left unwritten";
          const auto f64 = [](const at::Tensor& t) {
            return t.defined() ? t.to(torch::kFloat64) : t;
          };
          const auto expected =
              layer_norm_grads(f64(sum), to64(in.weight), to64(in.bias), f64(d_sum), f64(d_normed));
          const auto libtorch = layer_norm_grads(sum, in.weight, in.bias, d_sum, d_normed);
          const auto check = [&](const at::Tensor& ours, const at::Tensor& theirs,
                                 const at::Tensor& reference, const char* what) {
            const double ours_error = max_error(ours, reference);
            const double theirs_error = max_error(theirs, reference);
            const double ulp = epsilon(dtype) * max_abs(reference);
            EXPECT_LE(ours_error, 2 * theirs_error + ulp)
                << what << ": LibTorch's error " << theirs_error;
          };
          check(*d_x, libtorch.x, expected.x, "d_x");
          if (d_weight) check(*d_weight, libtorch.weight, expected.weight, "d_weight");
          if (in.bias) check(*d_bias, libtorch.bias, expected.bias, "d_bias");
        }
      }
    }
  }
}

TEST(AddLayerNorm, WeightOnTheCpuIsRejected_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  const auto x = torch::randn({4, 7}, torch::kCUDA);
  EXPECT_THAT(error_of<c10::Error>([&] { call_op(x, x, torch::randn({7}), std::nullopt); }),
              HasSubstr("weight must be on x's device cuda:0, got cpu"));
  EXPECT_THAT(error_of<c10::Error>([&] { call_op(x, x.cpu(), std::nullopt, std::nullopt); }),
              HasSubstr("residual must be on x's device cuda:0, got cpu"));
}

TEST(AddLayerNorm, RunsOnTheDeviceOfItsInputs_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  if (torch::cuda::device_count() < 2) {
    GTEST_SKIP() << "needs two CUDA devices";
  }
  torch::manual_seed(24);
  const auto o = torch::dtype(torch::kFloat32).device(torch::kCUDA, 1);
  const auto x = randn({4, 64}, o);
  const auto residual = randn({4, 64}, o, 3);
  const auto [weight, bias] = make_affine(kAffines[0], 64, o);
  const auto [sum, normed] = call_op(x, residual, weight, bias);
  EXPECT_EQ(sum.device(), x.device());
  EXPECT_EQ(normed.device(), x.device());
  expect_as_accurate_as_libtorch(x, residual, weight, bias);
}

}  // namespace test_add_layer_norm
