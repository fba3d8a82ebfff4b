// attnzoo::bias_gelu: on CPU against its reference gelu(x + bias) and against the GELU formulas
// written out in float64; autograd against the reference expression's autograd and against finite
// differences; the input checks; and, with a GPU, the CUDA kernel against float64 by
// FlashAttention's rule (error at most twice LibTorch's own at the same precision).
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
#include <string>
#include <vector>

namespace test_bias_gelu {
using attnzoo::testing::error_of;

using ::testing::HasSubstr;

const std::vector<std::string> kApproximations = {"none", "tanh"};

constexpr const char* kKernelName = "bias_gelu";

// By name through the dispatcher, as torch.ops.attnzoo.bias_gelu is called.
at::Tensor call_op(const at::Tensor& x, const at::Tensor& bias, const std::string& approximate) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("attnzoo::bias_gelu", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view)>();
  return op.call(x, bias, approximate);
}

// GELU written out (Hendrycks & Gimpel 2016, eq. 1 and its tanh approximation), independently of
// at::gelu. z: float64.
at::Tensor gelu_formula(const at::Tensor& z, const std::string& approximate) {
  if (approximate == "tanh") {
    return 0.5 * z * (1 + torch::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z.pow(3))));
  }
  return 0.5 * z * (1 + torch::erf(z * M_SQRT1_2));
}

// Inputs of awkward layouts; all have last dim N = x_cols(make_x).
struct Layout {
  std::string name;
  std::function<at::Tensor(const at::TensorOptions&)> make_x;
};

// Scaled so that both tails of GELU and the region where the two approximations differ are hit.
at::Tensor randn(at::IntArrayRef shape, const at::TensorOptions& options) {
  return torch::randn(shape, options.dtype(torch::kFloat64)).mul(3).to(options);
}

// Shapes every device is tested on: a single element, a single column, an odd row length.
std::vector<Layout> basic_layouts() {
  return {
      {"1-D N=1", [](const auto& o) { return randn({1}, o); }},
      {"N=1",
       [](const auto& o) {
         return randn({5, 1}, o);
       }},
      {"odd N",
       [](const auto& o) {
         return randn({4, 7}, o);
       }},
  };
}

std::vector<Layout> cpu_layouts() {
  auto layouts = basic_layouts();
  layouts.insert(layouts.end(), {
                                    {"3-D",
                                     [](const auto& o) {
                                       return randn({2, 3, 7}, o);
                                     }},
                                    {"transposed",
                                     [](const auto& o) {
                                       return randn({7, 4}, o).t();
                                     }},
                                    {"permuted 3-D",
                                     [](const auto& o) {
                                       return randn({7, 3, 2}, o).permute({2, 1, 0});
                                     }},
                                    {"slice of wider rows",
                                     [](const auto& o) {
                                       return randn({4, 10}, o).slice(1, 1, 8);
                                     }},
                                    {"no rows",
                                     [](const auto& o) {
                                       return randn({0, 7}, o);
                                     }},
                                });
  return layouts;
}

TEST(BiasGelu, CpuOpIsTheReferenceExpression) {
  torch::manual_seed(0);
  for (const auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16}) {
    for (const auto& approximate : kApproximations) {
      for (const auto& layout : cpu_layouts()) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + ", " + approximate + ", " + layout.name);
        const auto x = layout.make_x(torch::dtype(dtype));
        const auto bias = randn({x.size(-1)}, torch::dtype(dtype));
        const auto y = call_op(x, bias, approximate);
        EXPECT_EQ(y.sizes(), x.sizes());
        EXPECT_EQ(y.dtype(), x.dtype());
        EXPECT_TRUE(torch::equal(y, torch::gelu(x + bias, approximate)));
      }
    }
  }
}

TEST(BiasGelu, CpuOpMatchesTheGeluFormula) {
  struct Tolerance {
    torch::Dtype dtype;
    double rtol;
    double atol;
  };
  // bfloat16: x + bias and the result are each rounded (unit roundoff 2^-8), and
  // |z * gelu'(z)| < 0.2 for z < 0.
  const Tolerance tolerances[] = {{torch::kFloat64, 1e-12, 1e-13},
                                  {torch::kFloat32, 1e-5, 1e-6},
                                  {torch::kBFloat16, 2e-2, 2e-3}};
  torch::manual_seed(1);
  for (const auto& [dtype, rtol, atol] : tolerances) {
    for (const auto& approximate : kApproximations) {
      for (const auto& layout : cpu_layouts()) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + ", " + approximate + ", " + layout.name);
        const auto x = layout.make_x(torch::dtype(dtype));
        const auto bias = randn({x.size(-1)}, torch::dtype(dtype));
        const auto y = call_op(x, bias, approximate).to(torch::kFloat64);
        const auto expected =
            gelu_formula(x.to(torch::kFloat64) + bias.to(torch::kFloat64), approximate);
        EXPECT_TRUE(torch::allclose(y, expected, rtol, atol))
            << "max abs error " << (y - expected).abs().max().item<double>();
      }
    }
  }
}

TEST(BiasGelu, ApproximationsAreDistinct) {
  // Guards the tests above against inputs on which 'none' and 'tanh' agree to the tolerances.
  torch::manual_seed(2);
  const auto x = randn({64, 7}, torch::dtype(torch::kFloat64));
  const auto bias = randn({7}, torch::dtype(torch::kFloat64));
  const double difference =
      (call_op(x, bias, "none") - call_op(x, bias, "tanh")).abs().max().item<double>();
  EXPECT_GT(difference, 1e-4);
}

TEST(BiasGelu, CppEntryCallsTheOpWithExactGeluByDefault) {
  torch::manual_seed(3);
  const auto x = randn({3, 7}, torch::dtype(torch::kFloat64));
  const auto bias = randn({7}, torch::dtype(torch::kFloat64));
  EXPECT_TRUE(torch::equal(attnzoo::kernels::bias_gelu(x, bias), call_op(x, bias, "none")));
  EXPECT_TRUE(torch::equal(attnzoo::kernels::bias_gelu(x, bias, "tanh"), call_op(x, bias, "tanh")));
}

TEST(BiasGelu, MetaTensorsGiveTheOutputShape) {
  const auto meta = torch::dtype(torch::kFloat16).device(torch::kMeta);
  const auto y = call_op(torch::empty({2, 3, 7}, meta), torch::empty({7}, meta), "tanh");
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 3, 7}));
  EXPECT_EQ(y.scalar_type(), torch::kFloat16);
}

// --- autograd --------------------------------------------------------------------------------

struct Grads {
  at::Tensor x;
  at::Tensor bias;
};

// d/dx and d/dbias of sum(grad_y * f(x, bias)).
Grads grads_of(const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& f,
               const at::Tensor& x, const at::Tensor& bias, const at::Tensor& grad_y) {
  const auto x_leaf = x.detach().requires_grad_();
  const auto bias_leaf = bias.detach().requires_grad_();
  const auto grads = torch::autograd::grad({f(x_leaf, bias_leaf)}, {x_leaf, bias_leaf}, {grad_y});
  return {grads[0], grads[1]};
}

TEST(BiasGeluAutograd, GradientsMatchTheReferenceExpression) {
  torch::manual_seed(4);
  const auto f64 = torch::dtype(torch::kFloat64);
  for (const auto& approximate : kApproximations) {
    for (const auto& layout : cpu_layouts()) {
      SCOPED_TRACE(approximate + ", " + layout.name);
      const auto x = layout.make_x(f64);
      const auto bias = randn({x.size(-1)}, f64);
      const auto grad_y = torch::randn(x.sizes(), f64);
      const auto ours =
          grads_of([&](const auto& a, const auto& b) { return call_op(a, b, approximate); }, x,
                   bias, grad_y);
      const auto reference =
          grads_of([&](const auto& a, const auto& b) { return torch::gelu(a + b, approximate); }, x,
                   bias, grad_y);
      EXPECT_EQ(ours.x.sizes(), x.sizes());
      EXPECT_EQ(ours.bias.sizes(), bias.sizes());
      EXPECT_TRUE(torch::allclose(ours.x, reference.x, 1e-12, 1e-12));
      EXPECT_TRUE(torch::allclose(ours.bias, reference.bias, 1e-12, 1e-12));
    }
  }
}

TEST(BiasGeluAutograd, GradientsMatchFiniteDifferences) {
  // Independent of at::gelu_backward, which both our backward and the reference's use.
  torch::manual_seed(5);
  const auto f64 = torch::dtype(torch::kFloat64);
  for (const auto& approximate : kApproximations) {
    SCOPED_TRACE(approximate);
    const auto x = randn({3, 4, 7}, f64);
    const auto bias = randn({7}, f64);
    const auto grad_y = torch::randn(x.sizes(), f64);
    const auto dx = torch::randn(x.sizes(), f64);
    const auto dbias = torch::randn(bias.sizes(), f64);
    const auto loss = [&](double t) {
      return (grad_y * call_op(x + t * dx, bias + t * dbias, approximate)).sum().item<double>();
    };
    constexpr double kStep = 1e-6;
    const double numerical = (loss(kStep) - loss(-kStep)) / (2 * kStep);
    const auto grads = grads_of(
        [&](const auto& a, const auto& b) { return call_op(a, b, approximate); }, x, bias, grad_y);
    const double analytical = ((grads.x * dx).sum() + (grads.bias * dbias).sum()).item<double>();
    EXPECT_NEAR(analytical, numerical, 1e-6 * std::max(1.0, std::abs(numerical)));
  }
}

TEST(BiasGeluAutograd, SecondDerivativesMatchTheReferenceExpression) {
  torch::manual_seed(6);
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto second_grads =
      [&](const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& f,
          const at::Tensor& x, const at::Tensor& bias, const at::Tensor& grad_y,
          const at::Tensor& v) {
        const auto x_leaf = x.detach().requires_grad_();
        const auto bias_leaf = bias.detach().requires_grad_();
        const auto first = torch::autograd::grad({f(x_leaf, bias_leaf)}, {x_leaf, bias_leaf},
                                                 {grad_y}, /*retain_graph=*/true,
                                                 /*create_graph=*/true);
        return torch::autograd::grad({(first[0] * v).sum() + first[1].sum()}, {x_leaf, bias_leaf});
      };
  for (const auto& approximate : kApproximations) {
    SCOPED_TRACE(approximate);
    const auto x = randn({5, 7}, f64);
    const auto bias = randn({7}, f64);
    const auto grad_y = torch::randn(x.sizes(), f64);
    const auto v = torch::randn(x.sizes(), f64);
    const auto ours =
        second_grads([&](const auto& a, const auto& b) { return call_op(a, b, approximate); }, x,
                     bias, grad_y, v);
    const auto reference =
        second_grads([&](const auto& a, const auto& b) { return torch::gelu(a + b, approximate); },
                     x, bias, grad_y, v);
    EXPECT_TRUE(torch::allclose(ours[0], reference[0], 1e-12, 1e-12));
    EXPECT_TRUE(torch::allclose(ours[1], reference[1], 1e-12, 1e-12));
  }
}

TEST(BiasGeluAutograd, OnlyTheInputsThatRequireGradGetOne) {
  torch::manual_seed(7);
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto x = randn({4, 7}, f64);
  const auto bias = randn({7}, f64).requires_grad_();
  const auto grad_y = torch::randn(x.sizes(), f64);
  call_op(x, bias, "tanh").backward(grad_y);
  EXPECT_FALSE(x.grad().defined());
  const auto reference = grads_of(
      [](const auto& a, const auto& b) { return torch::gelu(a + b, "tanh"); }, x, bias, grad_y);
  EXPECT_TRUE(torch::allclose(bias.grad(), reference.bias, 1e-12, 1e-12));
}

// --- input checks ----------------------------------------------------------------------------

TEST(BiasGeluChecks, BiasOfTheWrongSizeIsRejected) {
  const auto x = torch::randn({4, 7});
  const auto message = error_of<c10::Error>([&] { call_op(x, torch::randn({8}), "none"); });
  EXPECT_THAT(message, HasSubstr("attnzoo::bias_gelu: bias must be 1-D of shape [N] = [7]"));
  EXPECT_THAT(message, HasSubstr("got shape [8]"));
  // The same check through the C++ entry and under autograd.
  EXPECT_THAT(error_of<c10::Error>([&] {
                attnzoo::kernels::bias_gelu(x, torch::randn({1, 7}));
              }),
              HasSubstr("bias must be 1-D of shape [N] = [7] (N = last dim of x, shape [4, 7]), "
                        "got shape [1, 7]"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                call_op(x.clone().requires_grad_(), torch::randn({6}).requires_grad_(), "none");
              }),
              HasSubstr("bias must be 1-D of shape [N] = [7]"));
}

TEST(BiasGeluChecks, BiasOfAnotherDtypeIsRejected) {
  EXPECT_THAT(error_of<c10::Error>([] {
                call_op(torch::randn({4, 7}), torch::randn({7}, torch::kFloat64), "none");
              }),
              HasSubstr("bias must have x's dtype Float, got Double"));
}

TEST(BiasGeluChecks, BiasOnAnotherDeviceIsRejected) {
  // The meta device stands in for a GPU: a CPU-only machine has no other device kind.
  const auto meta = torch::device(torch::kMeta);
  EXPECT_THAT(error_of<c10::Error>([&] {
                call_op(torch::randn({4, 7}), torch::empty({7}, meta), "none");
              }),
              HasSubstr("bias must be on x's device cpu, got meta"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                call_op(torch::empty({4, 7}, meta), torch::randn({7}), "none");
              }),
              HasSubstr("bias must be on x's device meta, got cpu"));
}

TEST(BiasGeluChecks, UnknownApproximationIsRejected) {
  EXPECT_THAT(error_of<c10::Error>([] {
                call_op(torch::randn({4, 7}), torch::randn({7}), "fast");
              }),
              HasSubstr("attnzoo::bias_gelu: approximate must be 'none' or 'tanh', got 'fast'"));
}

TEST(BiasGeluChecks, XWithoutALastDimIsRejected) {
  EXPECT_THAT(error_of<c10::Error>([] {
                call_op(torch::randn({3, 0}), torch::randn({0}), "none");
              }),
              HasSubstr("x must have shape [..., N] with N > 0, got shape [3, 0]"));
  EXPECT_THAT(error_of<c10::Error>([] { call_op(torch::tensor(1.0f), torch::randn({1}), "none"); }),
              HasSubstr("x must have shape [..., N] with N > 0, got shape []"));
}

TEST(BiasGeluChecks, IntegerXIsRejected) {
  EXPECT_THAT(error_of<c10::Error>([] {
                call_op(torch::ones({4, 7}, torch::kLong), torch::ones({7}, torch::kLong), "none");
              }),
              HasSubstr("x must be a floating-point tensor, got Long"));
}

// --- CUDA ------------------------------------------------------------------------------------

using attnzoo::testing::epsilon;
using attnzoo::testing::poison_allocator;

// FlashAttention's rule: the kernel's max error against float64 is at most twice that of LibTorch's
// own gelu(x + bias) at the same precision, plus one unit in the last place of the largest output
// for the case where LibTorch happens to be exact on a few elements.
void expect_as_accurate_as_libtorch(const at::Tensor& x, const at::Tensor& bias,
                                    const std::string& approximate) {
  poison_allocator(x.sizes(), x.options());
  const auto y = call_op(x, bias, approximate);
  ASSERT_EQ(y.sizes(), x.sizes());
  ASSERT_EQ(y.dtype(), x.dtype());
  ASSERT_EQ(y.device(), x.device());
  if (y.numel() == 0) {
    return;
  }
  EXPECT_TRUE(torch::isfinite(y).all().item<bool>()) << "the kernel left elements unwritten";
  const auto reference = torch::gelu(x.to(torch::kFloat64) + bias.to(torch::kFloat64), approximate);
  const auto libtorch = torch::gelu(x + bias, approximate);
  const double ours = (y.to(torch::kFloat64) - reference).abs().max().item<double>();
  const double theirs = (libtorch.to(torch::kFloat64) - reference).abs().max().item<double>();
  const double ulp = epsilon(x.scalar_type()) * reference.abs().max().item<double>();
  EXPECT_LE(ours, 2 * theirs + ulp) << "LibTorch's error: " << theirs;
}

std::vector<Layout> cuda_layouts() {
  auto layouts = basic_layouts();
  layouts.insert(layouts.end(), {
                                    {"N = 4 mod 8",
                                     [](const auto& o) {
                                       return randn({3, 12}, o);
                                     }},
                                    {"N multiple of 8, 3-D",
                                     [](const auto& o) {
                                       return randn({2, 3, 64}, o);
                                     }},
                                    {"large odd",
                                     [](const auto& o) {
                                       return randn({257, 4099}, o);
                                     }},
                                    {"transposed",
                                     [](const auto& o) {
                                       return randn({64, 8}, o).t();
                                     }},
                                    {"permuted 3-D",
                                     [](const auto& o) {
                                       return randn({64, 3, 2}, o).permute({2, 1, 0});
                                     }},
                                    {"misaligned rows",
                                     [](const auto& o) {
                                       return randn({6, 80}, o).slice(1, 1, 65);
                                     }},
                                    {"aligned strided rows",
                                     [](const auto& o) {
                                       return randn({6, 80}, o).slice(1, 8, 72);
                                     }},
                                    {"misaligned base",
                                     [](const auto& o) {
                                       return randn({6 * 64 + 1}, o).slice(0, 1).view({6, 64});
                                     }},
                                    {"broadcast rows",
                                     [](const auto& o) {
                                       return randn({1, 64}, o).expand({5, 64});
                                     }},
                                    {"no rows",
                                     [](const auto& o) {
                                       return randn({0, 7}, o);
                                     }},
                                });
  return layouts;
}

TEST(BiasGelu, MatchesReference_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  torch::manual_seed(10);
  for (const auto dtype : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
    for (const auto& approximate : kApproximations) {
      for (const auto& layout : cuda_layouts()) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + ", " + approximate + ", " + layout.name);
        const auto options = torch::dtype(dtype).device(torch::kCUDA);
        const auto x = layout.make_x(options);
        expect_as_accurate_as_libtorch(x, randn({x.size(-1)}, options), approximate);
      }
    }
  }
}

TEST(BiasGelu, LargeInputsLoopOverTheCappedGrid_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  torch::manual_seed(11);
  // More packs than the launcher's 2^16 blocks x 256 threads: one-element path (fp16, N % 8 != 0)
  // and 16-byte path (fp32, N % 4 == 0).
  const std::pair<torch::Dtype, std::vector<int64_t>> cases[] = {{torch::kFloat16, {70000, 260}},
                                                                 {torch::kFloat32, {70000, 1024}}};
  for (const auto& [dtype, shape] : cases) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto options = torch::dtype(dtype).device(torch::kCUDA);
    expect_as_accurate_as_libtorch(randn(shape, options), randn({shape.back()}, options), "none");
  }
}

TEST(BiasGelu, Float64FallsBackToTheReference_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  torch::manual_seed(12);
  const auto options = torch::dtype(torch::kFloat64).device(torch::kCUDA);
  const auto x = randn({4, 7}, options);
  const auto bias = randn({7}, options);
  EXPECT_TRUE(torch::equal(call_op(x, bias, "tanh"), torch::gelu(x + bias, "tanh")));
}

TEST(BiasGelu, GradientsMatchTheReference_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  torch::manual_seed(13);
  const auto f64 = torch::dtype(torch::kFloat64);
  for (const auto& approximate : kApproximations) {
    SCOPED_TRACE(approximate);
    const auto x = randn({3, 5, 7}, f64);
    const auto bias = randn({7}, f64);
    const auto grad_y = torch::randn(x.sizes(), f64);
    const auto ours =
        grads_of([&](const auto& a, const auto& b) { return call_op(a, b, approximate); },
                 x.to(torch::kCUDA, torch::kFloat32), bias.to(torch::kCUDA, torch::kFloat32),
                 grad_y.to(torch::kCUDA, torch::kFloat32));
    const auto reference =
        grads_of([&](const auto& a, const auto& b) { return torch::gelu(a + b, approximate); }, x,
                 bias, grad_y);
    EXPECT_TRUE(torch::allclose(ours.x.cpu().to(torch::kFloat64), reference.x, 1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(ours.bias.cpu().to(torch::kFloat64), reference.bias, 1e-5, 1e-5));
  }
}

TEST(BiasGelu, BiasOnTheCpuIsRejected_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  EXPECT_THAT(error_of<c10::Error>([] {
                call_op(torch::randn({4, 7}, torch::kCUDA), torch::randn({7}), "none");
              }),
              HasSubstr("bias must be on x's device cuda:0, got cpu"));
}

TEST(BiasGelu, RunsOnTheDeviceOfItsInputs_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  if (torch::cuda::device_count() < 2) {
    GTEST_SKIP() << "needs two CUDA devices";
  }
  torch::manual_seed(14);
  const auto options = torch::dtype(torch::kFloat32).device(torch::kCUDA, 1);
  const auto x = randn({4, 64}, options);
  const auto bias = randn({64}, options);
  const auto y = call_op(x, bias, "none");
  EXPECT_EQ(y.device(), x.device());
  expect_as_accurate_as_libtorch(x, bias, "none");
}

}  // namespace test_bias_gelu
