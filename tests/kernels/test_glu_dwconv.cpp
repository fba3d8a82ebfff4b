// attnzoo::glu_dwconv_swish: on CPU against the Conformer convolution module's own unfused
// sequence in float64; autograd (x, weight, bias, scale, shift) against float64 autograd of the
// reference expression and against finite differences; every input check; and, with a GPU, the
// CUDA kernel against float64 by FlashAttention's rule (error at most twice LibTorch's own at the
// same precision).
//
// The test binary links only attnzoo::kernels, not layers/, so the module's sequence (from
// ConformerConvModuleImpl::forward and ConvNormImpl::forward in evaluation, layers/
// conformer_parts.cpp) is reproduced here with the same LibTorch ops, in the same order, on the
// same channels-first [B, 2C, T] tensor that its pointwise_conv1 produces.
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
#include <vector>

namespace test_glu_dwconv {
using attnzoo::testing::error_of;

using ::testing::HasSubstr;
using OptTensor = std::optional<at::Tensor>;

constexpr const char* kKernelName = "glu_dwconv_swish";

// By name through the dispatcher, as torch.ops.attnzoo.glu_dwconv_swish is called.
at::Tensor call_op(const at::Tensor& x, const at::Tensor& weight, const OptTensor& bias,
                   const at::Tensor& scale, const at::Tensor& shift, int64_t left_pad,
                   const OptTensor& lengths = std::nullopt) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("attnzoo::glu_dwconv_swish", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const OptTensor&,
                            const at::Tensor&, const at::Tensor&, int64_t, const OptTensor&)>();
  return op.call(x, weight, bias, scale, shift, left_pad, lengths);
}

// The module's padding of its depthwise convolution (ConformerConvModuleImpl::left_padding /
// right_padding).
int64_t left_padding(int64_t k, bool causal) { return causal ? k - 1 : (k - 1) / 2; }
int64_t right_padding(int64_t k, bool causal) { return causal ? 0 : k / 2; }

// valid [B, T] bool from lengths, as the model builds the module's mask.
at::Tensor valid_frames(const at::Tensor& lengths, int64_t time) {
  return torch::arange(time, torch::dtype(torch::kLong).device(lengths.device())).view({1, -1}) <
         lengths.to(torch::kLong).view({-1, 1});
}

// The parameters of the module's middle: depthwise_conv (weight [C, 1, K], bias [C]) and
// conv_norm's BatchNorm (weight, bias, running_mean, running_var, eps).
struct Middle {
  at::Tensor conv_weight;  // [C, 1, K]
  OptTensor conv_bias;     // [C]
  at::Tensor gamma, beta, running_mean, running_var;
  double eps = 1e-5;

  // The op's folded form.
  at::Tensor weight() const { return conv_weight.squeeze(1); }
  at::Tensor scale() const { return gamma * torch::rsqrt(running_var + eps); }
  at::Tensor shift() const { return beta - running_mean * scale(); }
};

Middle random_middle(int64_t channels, int64_t k, bool with_bias, const at::TensorOptions& o) {
  Middle m;
  m.conv_weight = torch::randn({channels, 1, k}, o) / std::sqrt(static_cast<double>(k));
  if (with_bias) {
    m.conv_bias = torch::randn({channels}, o);
  }
  m.gamma = torch::rand({channels}, o) + 0.5;
  m.beta = torch::randn({channels}, o);
  m.running_mean = torch::randn({channels}, o) * 0.5;
  m.running_var = torch::rand({channels}, o) + 0.2;
  return m;
}

// ConformerConvModuleImpl::forward from the GLU to the Swish, with ConvNorm's batch_norm in
// evaluation. pw: pointwise_conv1's output [B, 2C, T]; valid: [B, T] bool or undefined.
// -> [B, C, T]
at::Tensor module_middle(const at::Tensor& pw, const Middle& m, bool causal,
                         const at::Tensor& valid) {
  const int64_t k = m.conv_weight.size(2);
  const int64_t channels = m.conv_weight.size(0);
  auto y = torch::glu(pw, 1);
  if (valid.defined()) {
    y = y.masked_fill(valid.logical_not().unsqueeze(1), 0.0);
  }
  y = torch::constant_pad_nd(y, {left_padding(k, causal), right_padding(k, causal)}, 0.0);
  y = torch::nn::functional::conv1d(y, m.conv_weight,
                                    torch::nn::functional::Conv1dFuncOptions()
                                        .bias(m.conv_bias.value_or(at::Tensor()))
                                        .groups(channels));
  const auto per_channel = [](const torch::Tensor& t) { return t.view({1, -1, 1}); };
  y = (y - per_channel(m.running_mean)) * torch::rsqrt(per_channel(m.running_var) + m.eps) *
          per_channel(m.gamma) +
      per_channel(m.beta);
  return torch::silu(y);
}

// The op's definition with LibTorch ops, in x's dtype (what LibTorch computes at that precision),
// differentiable in every input. x: [B, T, 2C] -> [B, T, C]
at::Tensor reference(const at::Tensor& x, const at::Tensor& weight, const OptTensor& bias,
                     const at::Tensor& scale, const at::Tensor& shift, int64_t left_pad,
                     const OptTensor& lengths = std::nullopt) {
  const int64_t k = weight.size(1);
  auto a = torch::glu(x.transpose(1, 2), 1);
  if (lengths) {
    a = a.masked_fill(valid_frames(*lengths, x.size(1)).logical_not().unsqueeze(1), 0.0);
  }
  a = torch::constant_pad_nd(a, {left_pad, k - 1 - left_pad}, 0.0);
  auto z = torch::nn::functional::conv1d(a, weight.unsqueeze(1),
                                         torch::nn::functional::Conv1dFuncOptions()
                                             .bias(bias.value_or(at::Tensor()))
                                             .groups(weight.size(0)));
  z = z * scale.view({1, -1, 1}) + shift.view({1, -1, 1});
  return torch::silu(z).transpose(1, 2);
}

at::Tensor lengths_for(int64_t time, const at::TensorOptions& o = torch::kLong) {
  // A full utterance, a half one, a single frame.
  return torch::tensor({time, (time + 1) / 2, int64_t{1}}, o);
}

TEST(GluDwConv, CpuOpMatchesTheModuleInFloat64) {
  torch::manual_seed(0);
  const auto f64 = torch::dtype(torch::kFloat64);
  int cases = 0;
  for (const int64_t k : {1, 3, 15, 31}) {
    for (const int64_t time : {1, 7, 100}) {
      for (const int64_t channels : {36, 144, 256}) {
        for (const bool causal : {false, true}) {
          for (const bool masked : {false, true}) {
            SCOPED_TRACE("K " + std::to_string(k) + ", T " + std::to_string(time) + ", C " +
                         std::to_string(channels) + (causal ? ", causal" : ", same") +
                         (masked ? ", lengths" : ""));
            const int64_t batch = 3;
            const auto pw = torch::randn({batch, 2 * channels, time}, f64) * 2;
            const auto m = random_middle(channels, k, /*with_bias=*/true, f64);
            const auto lengths = lengths_for(time);
            const auto expected =
                module_middle(pw, m, causal, masked ? valid_frames(lengths, time) : at::Tensor())
                    .transpose(1, 2);
            const OptTensor op_lengths = masked ? OptTensor(lengths) : std::nullopt;
            // The module's own layout (a view, no copy) and channels last.
            for (const auto& x : {pw.transpose(1, 2), pw.transpose(1, 2).contiguous()}) {
              const auto y = call_op(x, m.weight(), m.conv_bias, m.scale(), m.shift(),
                                     left_padding(k, causal), op_lengths);
              ASSERT_EQ(y.sizes(), expected.sizes());
              EXPECT_TRUE(y.is_contiguous());
              EXPECT_TRUE(torch::allclose(y, expected, 1e-12, 1e-12))
                  << "max abs error " << (y - expected).abs().max().item<double>();
            }
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 144);
}

TEST(GluDwConv, EvenKernelsPadOneMoreFrameOnTheRight) {
  // The module's even K (the paper's 32): (K - 1) / 2 frames on the left, K / 2 on the right.
  torch::manual_seed(1);
  const auto f64 = torch::dtype(torch::kFloat64);
  for (const int64_t k : {2, 4, 32}) {
    for (const bool causal : {false, true}) {
      SCOPED_TRACE("K " + std::to_string(k) + (causal ? ", causal" : ", same"));
      const auto pw = torch::randn({2, 2 * 20, 50}, f64);
      const auto m = random_middle(20, k, true, f64);
      const auto y = call_op(pw.transpose(1, 2), m.weight(), m.conv_bias, m.scale(), m.shift(),
                             left_padding(k, causal));
      const auto expected = module_middle(pw, m, causal, at::Tensor()).transpose(1, 2);
      EXPECT_TRUE(torch::allclose(y, expected, 1e-12, 1e-12));
    }
  }
}

TEST(GluDwConv, WithoutConvBiasMatchesTheModule) {
  torch::manual_seed(2);
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto pw = torch::randn({2, 2 * 36, 40}, f64);
  const auto m = random_middle(36, 15, /*with_bias=*/false, f64);
  const auto lengths = torch::tensor({40, 17});
  const auto y =
      call_op(pw.transpose(1, 2), m.weight(), std::nullopt, m.scale(), m.shift(), 7, lengths);
  const auto expected = module_middle(pw, m, false, valid_frames(lengths, 40)).transpose(1, 2);
  EXPECT_TRUE(torch::allclose(y, expected, 1e-12, 1e-12));
}

TEST(GluDwConv, ArbitraryLeftPaddingShiftsTheWindow) {
  // Any left_pad in [0, K - 1]: the output at t sees inputs t - left_pad ... t + K - 1 - left_pad.
  torch::manual_seed(3);
  const auto f64 = torch::dtype(torch::kFloat64);
  const int64_t k = 5;
  const auto x = torch::randn({2, 9, 2 * 6}, f64);
  const auto m = random_middle(6, k, true, f64);
  for (int64_t left = 0; left < k; ++left) {
    SCOPED_TRACE("left_pad " + std::to_string(left));
    const auto y = call_op(x, m.weight(), m.conv_bias, m.scale(), m.shift(), left);
    // Written out per frame and tap.
    const auto a = torch::glu(x, 2);  // [B, T, C]
    auto z = m.conv_bias->view({1, 1, -1}).expand({2, 9, 6}).clone();
    for (int64_t t = 0; t < 9; ++t) {
      for (int64_t tap = 0; tap < k; ++tap) {
        const int64_t input = t + tap - left;
        if (input >= 0 && input < 9) {
          z.select(1, t) += a.select(1, input) * m.weight().select(1, tap);
        }
      }
    }
    const auto v = z * m.scale() + m.shift();
    EXPECT_TRUE(torch::allclose(y, v * torch::sigmoid(v), 1e-12, 1e-12));
  }
}

TEST(GluDwConv, LengthsBeyondTheSequenceOrNegativeAreClamped) {
  torch::manual_seed(4);
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto x = torch::randn({3, 10, 8}, f64);
  const auto m = random_middle(4, 3, true, f64);
  const auto op = [&](const at::Tensor& lengths) {
    return call_op(x, m.weight(), m.conv_bias, m.scale(), m.shift(), 1, lengths);
  };
  EXPECT_TRUE(torch::equal(op(torch::tensor({15, -2, 10})), op(torch::tensor({10, 0, 10}))));
  EXPECT_TRUE(torch::equal(op(torch::tensor({10, 10, 10})),
                           call_op(x, m.weight(), m.conv_bias, m.scale(), m.shift(), 1)));
  // Any integer dtype.
  EXPECT_TRUE(torch::equal(op(torch::tensor({4, 7, 1}, torch::kInt)),
                           op(torch::tensor({4, 7, 1}, torch::kLong))));
}

TEST(GluDwConv, NonContiguousInputsMatchContiguousOnes) {
  torch::manual_seed(5);
  const auto f64 = torch::dtype(torch::kFloat64);
  const int64_t channels = 36;
  const auto m = random_middle(channels, 7, true, f64);
  const std::vector<std::pair<std::string, at::Tensor>> layouts = {
      {"channels first", torch::randn({2, 2 * channels, 30}, f64).transpose(1, 2)},
      {"slice of wider rows", torch::randn({2, 30, 2 * channels + 5}, f64).slice(2, 3, 3 + 72)},
      {"time major", torch::randn({30, 2, 2 * channels}, f64).transpose(0, 1)},
      {"broadcast batch", torch::randn({1, 30, 2 * channels}, f64).expand({2, 30, 2 * channels})},
      {"strided frames", torch::randn({2, 60, 2 * channels}, f64).slice(1, 0, 60, 2)},
  };
  for (const auto& [name, x] : layouts) {
    SCOPED_TRACE(name);
    ASSERT_FALSE(x.is_contiguous());
    const auto lengths = torch::tensor({30, 11});
    const auto y = call_op(x, m.weight(), m.conv_bias, m.scale(), m.shift(), 3, lengths);
    const auto expected =
        call_op(x.contiguous(), m.weight(), m.conv_bias, m.scale(), m.shift(), 3, lengths);
    EXPECT_TRUE(torch::allclose(y, expected, 1e-13, 1e-13));
    // Non-contiguous parameters too.
    const auto w_t = m.weight().t().contiguous().t();
    const auto scale2 = torch::stack({m.scale(), m.scale()}, 1).select(1, 0);
    EXPECT_TRUE(torch::allclose(call_op(x, w_t, m.conv_bias, scale2, m.shift(), 3, lengths),
                                expected, 1e-13, 1e-13));
  }
}

TEST(GluDwConv, LowerPrecisionsMatchFloat64) {
  // The CPU op is the LibTorch reference in x's dtype: every stage rounded to it.
  struct Tolerance {
    torch::Dtype dtype;
    double rtol;
    double atol;
  };
  const Tolerance tolerances[] = {{torch::kFloat32, 1e-5, 1e-5}, {torch::kBFloat16, 5e-2, 5e-2}};
  torch::manual_seed(6);
  for (const auto& [dtype, rtol, atol] : tolerances) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto f64 = torch::dtype(torch::kFloat64);
    const auto x = torch::randn({2, 25, 2 * 36}, f64).to(dtype);
    const auto m = random_middle(36, 15, true, f64);
    const auto weight = m.weight().to(dtype);
    const auto bias = m.conv_bias->to(dtype);
    const auto scale = m.scale().to(dtype);
    const auto shift = m.shift().to(dtype);
    const auto lengths = torch::tensor({25, 9});
    const auto y = call_op(x, weight, bias, scale, shift, 7, lengths);
    EXPECT_EQ(y.scalar_type(), dtype);
    const auto expected =
        reference(x.to(torch::kFloat64), weight.to(torch::kFloat64), bias.to(torch::kFloat64),
                  scale.to(torch::kFloat64), shift.to(torch::kFloat64), 7, lengths);
    EXPECT_TRUE(torch::allclose(y.to(torch::kFloat64), expected, rtol, atol))
        << "max abs error " << (y.to(torch::kFloat64) - expected).abs().max().item<double>();
  }
}

TEST(GluDwConv, CppEntryCallsTheOp) {
  torch::manual_seed(7);
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto x = torch::randn({2, 9, 12}, f64);
  const auto m = random_middle(6, 3, true, f64);
  const auto lengths = torch::tensor({9, 4});
  EXPECT_TRUE(torch::equal(attnzoo::kernels::glu_dwconv_swish(x, m.weight(), m.conv_bias, m.scale(),
                                                              m.shift(), 1, lengths),
                           call_op(x, m.weight(), m.conv_bias, m.scale(), m.shift(), 1, lengths)));
  EXPECT_TRUE(torch::equal(
      attnzoo::kernels::glu_dwconv_swish(x, m.weight(), std::nullopt, m.scale(), m.shift(), 2),
      call_op(x, m.weight(), std::nullopt, m.scale(), m.shift(), 2)));
}

TEST(GluDwConv, MetaTensorsGiveTheOutputShape) {
  const auto meta = torch::dtype(torch::kFloat16).device(torch::kMeta);
  const auto y = call_op(torch::empty({2, 5, 12}, meta), torch::empty({6, 3}, meta),
                         torch::empty({6}, meta), torch::empty({6}, meta), torch::empty({6}, meta),
                         1, torch::empty({2}, torch::dtype(torch::kLong).device(torch::kMeta)));
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 5, 6}));
  EXPECT_EQ(y.scalar_type(), torch::kFloat16);
}

// --- autograd --------------------------------------------------------------------------------

using Fn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

// d/d(inputs) of sum(grad_y * f(inputs)); the inputs that get a gradient are leaves.
std::vector<at::Tensor> grads_of(const Fn& f, const std::vector<at::Tensor>& inputs,
                                 const at::Tensor& grad_y) {
  std::vector<at::Tensor> leaves;
  for (const auto& t : inputs) {
    leaves.push_back(t.detach().requires_grad_());
  }
  return torch::autograd::grad({f(leaves)}, leaves, {grad_y});
}

TEST(GluDwConvAutograd, GradientsMatchTheReferenceExpression) {
  torch::manual_seed(8);
  const auto f64 = torch::dtype(torch::kFloat64);
  for (const int64_t k : {1, 4, 15}) {
    for (const bool causal : {false, true}) {
      for (const bool masked : {false, true}) {
        for (const bool with_bias : {false, true}) {
          SCOPED_TRACE("K " + std::to_string(k) + (causal ? ", causal" : ", same") +
                       (masked ? ", lengths" : "") + (with_bias ? ", bias" : ""));
          const int64_t channels = 36;
          const int64_t time = 23;
          // Channels first: the module's layout, a non-contiguous x.
          const auto x = torch::randn({3, 2 * channels, time}, f64).transpose(1, 2);
          const auto m = random_middle(channels, k, with_bias, f64);
          const auto grad_y = torch::randn({3, time, channels}, f64);
          const OptTensor lengths = masked ? OptTensor(lengths_for(time)) : std::nullopt;
          const int64_t left = left_padding(k, causal);
          std::vector<at::Tensor> inputs = {x, m.weight(), m.scale(), m.shift()};
          if (with_bias) {
            inputs.push_back(*m.conv_bias);
          }
          const auto unpack = [&](const std::vector<at::Tensor>& in) {
            return with_bias ? OptTensor(in[4]) : std::nullopt;
          };
          const auto ours = grads_of(
              [&](const auto& in) {
                return call_op(in[0], in[1], unpack(in), in[2], in[3], left, lengths);
              },
              inputs, grad_y);
          const auto expected = grads_of(
              [&](const auto& in) {
                return reference(in[0], in[1], unpack(in), in[2], in[3], left, lengths);
              },
              inputs, grad_y);
          const char* names[] = {"x", "weight", "scale", "shift", "bias"};
          for (size_t i = 0; i < inputs.size(); ++i) {
            SCOPED_TRACE(names[i]);
            ASSERT_EQ(ours[i].sizes(), inputs[i].sizes());
            EXPECT_TRUE(torch::allclose(ours[i], expected[i], 1e-10, 1e-10))
                << "max abs error " << (ours[i] - expected[i]).abs().max().item<double>();
          }
          if (masked) {
            // Masked frames take no part: no gradient reaches them.
            EXPECT_EQ(ours[0].select(0, 2).slice(0, 1).abs().max().item<double>(), 0.0);
          }
        }
      }
    }
  }
}

TEST(GluDwConvAutograd, GradientsMatchFiniteDifferences) {
  // Independent of at::convolution_backward and at::glu_backward, which our backward uses.
  torch::manual_seed(9);
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto x = torch::randn({2, 11, 2 * 5}, f64);
  const auto m = random_middle(5, 3, true, f64);
  const std::vector<at::Tensor> inputs = {x, m.weight(), *m.conv_bias, m.scale(), m.shift()};
  const auto lengths = torch::tensor({11, 6});
  const auto f = [&](const std::vector<at::Tensor>& in) {
    return call_op(in[0], in[1], in[2], in[3], in[4], 2, lengths);
  };
  const auto grad_y = torch::randn({2, 11, 5}, f64);
  std::vector<at::Tensor> directions;
  for (const auto& t : inputs) {
    directions.push_back(torch::randn(t.sizes(), f64));
  }
  const auto loss = [&](double step) {
    std::vector<at::Tensor> moved;
    for (size_t i = 0; i < inputs.size(); ++i) {
      moved.push_back(inputs[i] + step * directions[i]);
    }
    return (grad_y * f(moved)).sum().item<double>();
  };
  constexpr double kStep = 1e-6;
  const double numerical = (loss(kStep) - loss(-kStep)) / (2 * kStep);
  const auto grads = grads_of(f, inputs, grad_y);
  double analytical = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    analytical += (grads[i] * directions[i]).sum().item<double>();
  }
  EXPECT_NEAR(analytical, numerical, 1e-6 * std::max(1.0, std::abs(numerical)));
}

TEST(GluDwConvAutograd, SecondDerivativesMatchTheReferenceExpression) {
  torch::manual_seed(10);
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto x = torch::randn({2, 13, 2 * 6}, f64);
  const auto m = random_middle(6, 5, true, f64);
  const auto lengths = torch::tensor({13, 8});
  const auto grad_y = torch::randn({2, 13, 6}, f64);
  const auto second = [&](const Fn& f) {
    std::vector<at::Tensor> leaves;
    for (const auto& t : {x, m.weight(), *m.conv_bias, m.scale(), m.shift()}) {
      leaves.push_back(t.detach().requires_grad_());
    }
    const auto first = torch::autograd::grad({f(leaves)}, leaves, {grad_y},
                                             /*retain_graph=*/true, /*create_graph=*/true);
    at::Tensor sum = first[0].square().sum();
    for (size_t i = 1; i < first.size(); ++i) {
      sum = sum + first[i].square().sum();
    }
    return torch::autograd::grad({sum}, leaves);
  };
  const auto ours = second(
      [&](const auto& in) { return call_op(in[0], in[1], in[2], in[3], in[4], 2, lengths); });
  const auto expected = second(
      [&](const auto& in) { return reference(in[0], in[1], in[2], in[3], in[4], 2, lengths); });
  for (size_t i = 0; i < ours.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(torch::allclose(ours[i], expected[i], 1e-10, 1e-10));
  }
}

TEST(GluDwConvAutograd, OnlyTheInputsThatRequireGradGetOne) {
  torch::manual_seed(11);
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto x = torch::randn({2, 9, 12}, f64);
  const auto m = random_middle(6, 3, true, f64);
  const auto weight = m.weight().clone().requires_grad_();
  const auto shift = m.shift().clone().requires_grad_();
  const auto grad_y = torch::randn({2, 9, 6}, f64);
  call_op(x, weight, m.conv_bias, m.scale(), shift, 1).backward(grad_y);
  EXPECT_FALSE(x.grad().defined());
  const auto expected = grads_of(
      [&](const auto& in) { return reference(x, in[0], m.conv_bias, m.scale(), in[1], 1); },
      {m.weight(), m.shift()}, grad_y);
  EXPECT_TRUE(torch::allclose(weight.grad(), expected[0], 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(shift.grad(), expected[1], 1e-12, 1e-12));
}

// --- input checks ----------------------------------------------------------------------------

struct Inputs {
  at::Tensor x = torch::randn({2, 5, 8});
  at::Tensor weight = torch::randn({4, 3});
  OptTensor bias = torch::randn({4});
  at::Tensor scale = torch::randn({4});
  at::Tensor shift = torch::randn({4});
  int64_t left_pad = 1;
  OptTensor lengths = std::nullopt;

  std::string error() const {
    return error_of<c10::Error>([&] { call_op(x, weight, bias, scale, shift, left_pad, lengths); });
  }
};

TEST(GluDwConvChecks, XOfTheWrongShapeIsRejected) {
  Inputs in;
  in.x = torch::randn({5, 8});
  EXPECT_THAT(in.error(), HasSubstr("attnzoo::glu_dwconv_swish: x must be [B, T, 2C] with an even "
                                    "last dim 2C > 0, got shape [5, 8]"));
  in.x = torch::randn({2, 5, 7});
  EXPECT_THAT(in.error(), HasSubstr("even last dim 2C > 0, got shape [2, 5, 7]"));
  in.x = torch::randn({2, 5, 0});
  EXPECT_THAT(in.error(), HasSubstr("even last dim 2C > 0, got shape [2, 5, 0]"));
  // Under autograd and through the C++ entry too.
  in.x = torch::randn({2, 5, 7}).requires_grad_();
  EXPECT_THAT(in.error(), HasSubstr("x must be [B, T, 2C]"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                attnzoo::kernels::glu_dwconv_swish(torch::randn({2, 5, 7}), in.weight, in.bias,
                                                   in.scale, in.shift, 1);
              }),
              HasSubstr("x must be [B, T, 2C]"));
}

TEST(GluDwConvChecks, IntegerXIsRejected) {
  Inputs in;
  in.x = torch::ones({2, 5, 8}, torch::kLong);
  EXPECT_THAT(in.error(), HasSubstr("x must be a floating-point tensor, got Long"));
}

TEST(GluDwConvChecks, WeightOfTheWrongShapeDtypeOrDeviceIsRejected) {
  Inputs in;
  in.weight = torch::randn({4, 1, 3});  // Conv1d's layout: squeeze(1) it
  EXPECT_THAT(in.error(),
              HasSubstr("attnzoo::glu_dwconv_swish: weight must be [C, K] = [4, K >= 1] (C = half "
                        "the last dim of x, shape [2, 5, 8]), got shape [4, 1, 3]"));
  in.weight = torch::randn({5, 3});
  EXPECT_THAT(in.error(), HasSubstr("weight must be [C, K] = [4, K >= 1]"));
  in.weight = torch::randn({4, 0});
  EXPECT_THAT(in.error(), HasSubstr("got shape [4, 0]"));
  in.weight = torch::randn({4, 3}, torch::kFloat64);
  EXPECT_THAT(in.error(), HasSubstr("weight must have x's dtype Float, got Double"));
  // The meta device stands in for a GPU: a CPU-only machine has no other device kind.
  in.weight = torch::empty({4, 3}, torch::kMeta);
  EXPECT_THAT(in.error(), HasSubstr("weight must be on x's device cpu, got meta"));
}

TEST(GluDwConvChecks, ParametersOfTheWrongShapeDtypeOrDeviceAreRejected) {
  for (const std::string name : {"bias", "scale", "shift"}) {
    SCOPED_TRACE(name);
    const auto with = [&](const at::Tensor& p) {
      Inputs in;
      if (name == "bias") in.bias = p;
      if (name == "scale") in.scale = p;
      if (name == "shift") in.shift = p;
      return in.error();
    };
    EXPECT_THAT(with(torch::randn({5})),
                HasSubstr("attnzoo::glu_dwconv_swish: " + name +
                          " must be 1-D of shape [C] = [4] (C = half the last dim of x, shape "
                          "[2, 5, 8]), got shape [5]"));
    EXPECT_THAT(with(torch::randn({1, 4})), HasSubstr(name + " must be 1-D of shape [C] = [4]"));
    EXPECT_THAT(with(torch::randn({4}, torch::kFloat16)),
                HasSubstr(name + " must have x's dtype Float, got Half"));
    EXPECT_THAT(with(torch::empty({4}, torch::kMeta)),
                HasSubstr(name + " must be on x's device cpu, got meta"));
  }
}

TEST(GluDwConvChecks, LeftPadOutsideTheKernelIsRejected) {
  for (const int64_t left_pad : {-1, 3, 10}) {
    Inputs in;
    in.left_pad = left_pad;
    EXPECT_THAT(in.error(),
                HasSubstr("attnzoo::glu_dwconv_swish: left_pad must be in [0, K - 1] = [0, 2] (K = "
                          "weight.size(1)), got " +
                          std::to_string(left_pad)));
  }
}

TEST(GluDwConvChecks, BadLengthsAreRejected) {
  Inputs in;
  in.lengths = torch::tensor({5, 4, 3}, torch::kLong);
  EXPECT_THAT(in.error(), HasSubstr("attnzoo::glu_dwconv_swish: lengths must be integer [B] = [2], "
                                    "got Long [3]"));
  in.lengths = torch::tensor({5.0f, 4.0f});
  EXPECT_THAT(in.error(), HasSubstr("lengths must be integer [B] = [2], got Float [2]"));
  in.lengths = torch::tensor({true, false});
  EXPECT_THAT(in.error(), HasSubstr("lengths must be integer [B] = [2], got Bool [2]"));
  in.lengths = torch::empty({2}, torch::dtype(torch::kLong).device(torch::kMeta));
  EXPECT_THAT(in.error(), HasSubstr("lengths must be on x's device cpu, got meta"));
}

// --- CUDA ------------------------------------------------------------------------------------

using attnzoo::testing::epsilon;
using attnzoo::testing::poison_allocator;

// FlashAttention's rule: the kernel's max error against float64 is at most twice that of the
// LibTorch expression at the same precision, plus one unit in the last place of the largest
// output for the case where LibTorch happens to be exact.
void expect_as_accurate_as_libtorch(const at::Tensor& x, const at::Tensor& weight,
                                    const OptTensor& bias, const at::Tensor& scale,
                                    const at::Tensor& shift, int64_t left_pad,
                                    const OptTensor& lengths) {
  const std::vector<int64_t> shape = {x.size(0), x.size(1), x.size(2) / 2};
  poison_allocator(shape, x.options());
  const auto y = call_op(x, weight, bias, scale, shift, left_pad, lengths);
  ASSERT_EQ(y.sizes(), at::IntArrayRef(shape));
  ASSERT_EQ(y.dtype(), x.dtype());
  ASSERT_EQ(y.device(), x.device());
  if (y.numel() == 0) {
    return;
  }
  EXPECT_TRUE(torch::isfinite(y).all().item<bool>()) << "the kernel left elements unwritten";
  const auto f64 = [](const at::Tensor& t) { return t.to(torch::kFloat64); };
  const OptTensor bias64 = bias ? OptTensor(f64(*bias)) : std::nullopt;
  const auto exact =
      reference(f64(x), f64(weight), bias64, f64(scale), f64(shift), left_pad, lengths);
  const auto libtorch = reference(x, weight, bias, scale, shift, left_pad, lengths);
  const double ours = (f64(y) - exact).abs().max().item<double>();
  const double theirs = (f64(libtorch) - exact).abs().max().item<double>();
  const double ulp = epsilon(x.scalar_type()) * exact.abs().max().item<double>();
  EXPECT_LE(ours, 2 * theirs + ulp) << "LibTorch's error: " << theirs;
}

struct CudaCase {
  std::string name;
  int64_t batch, time, channels, k, left_pad;
  bool masked, with_bias;
  // x from a float64 CPU tensor: "last" (contiguous [B, T, 2C]), "first" (the transposed view of
  // [B, 2C, T]), "misaligned" (a slice starting one element in), "broadcast" (batch stride 0).
  std::string layout;
};

at::Tensor make_x(const CudaCase& c, const at::TensorOptions& o) {
  const auto f64 = torch::dtype(torch::kFloat64);
  const int64_t b = c.batch, t = c.time, w = 2 * c.channels;
  at::Tensor x;
  if (c.layout == "first") {
    return (torch::randn({b, w, t}, f64) * 2).to(o).transpose(1, 2);
  }
  if (c.layout == "misaligned") {
    return (torch::randn({b, t, w + 1}, f64) * 2).to(o).slice(2, 1);
  }
  if (c.layout == "broadcast") {
    return (torch::randn({1, t, w}, f64) * 2).to(o).expand({b, t, w});
  }
  return (torch::randn({b, t, w}, f64) * 2).to(o);
}

std::vector<CudaCase> cuda_cases() {
  std::vector<CudaCase> cases;
  for (const int64_t k : {1, 3, 15, 31}) {
    for (const int64_t time : {1, 7, 100}) {
      for (const int64_t channels : {36, 144, 256}) {
        for (const bool causal : {false, true}) {
          const std::string name = "K " + std::to_string(k) + ", T " + std::to_string(time) +
                                   ", C " + std::to_string(channels) +
                                   (causal ? ", causal" : ", same");
          cases.push_back({name, 3, time, channels, k, left_padding(k, causal), true, true,
                           time % 2 == 0 ? "last" : "first"});
        }
      }
    }
  }
  // Several passes over the taps (kTapChunk = 32), odd channel counts, and the other layouts.
  cases.push_back({"K 32 same", 2, 130, 64, 32, 15, true, true, "last"});
  cases.push_back({"K 33 causal", 2, 130, 64, 33, 32, false, true, "last"});
  cases.push_back({"K 70 same", 2, 200, 40, 70, 34, true, false, "first"});
  cases.push_back({"C 1", 2, 50, 1, 5, 2, true, true, "last"});
  cases.push_back({"C 5", 2, 50, 5, 5, 4, true, true, "last"});
  cases.push_back({"C 100, T 65", 2, 65, 100, 15, 7, false, true, "last"});
  cases.push_back({"misaligned", 2, 50, 64, 15, 7, true, true, "misaligned"});
  cases.push_back({"broadcast batch", 3, 50, 64, 15, 7, true, true, "broadcast"});
  cases.push_back({"no bias, channels first", 2, 77, 144, 31, 15, true, false, "first"});
  cases.push_back({"no frames", 2, 0, 16, 3, 1, false, true, "last"});
  cases.push_back({"no batch", 0, 5, 16, 3, 1, false, true, "last"});
  return cases;
}

TEST(GluDwConv, MatchesReference_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  torch::manual_seed(20);
  for (const auto dtype : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
    for (const auto& c : cuda_cases()) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + ", " + c.name + ", " + c.layout);
      const auto options = torch::dtype(dtype).device(torch::kCUDA);
      const auto f64 = torch::dtype(torch::kFloat64);
      const auto x = make_x(c, options);
      const auto m = random_middle(c.channels, c.k, c.with_bias, f64);
      const OptTensor bias = c.with_bias ? OptTensor(m.conv_bias->to(options)) : std::nullopt;
      OptTensor lengths;
      if (c.masked) {
        lengths =
            torch::randint(0, c.time + 2, {c.batch}, torch::dtype(torch::kLong)).to(torch::kCUDA);
      }
      expect_as_accurate_as_libtorch(x, m.weight().to(options), bias, m.scale().to(options),
                                     m.shift().to(options), c.left_pad, lengths);
    }
  }
}

TEST(GluDwConv, BatchesBeyondTheGridLoop_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  torch::manual_seed(21);
  const auto options = torch::dtype(torch::kFloat32).device(torch::kCUDA);
  const auto f64 = torch::dtype(torch::kFloat64);
  const int64_t batch = 70000;  // more than gridDim.y's 65535
  const auto x = (torch::randn({batch, 3, 8}, f64) * 2).to(options);
  const auto m = random_middle(4, 3, true, f64);
  const auto lengths = torch::randint(0, 4, {batch}, torch::kLong).to(torch::kCUDA);
  expect_as_accurate_as_libtorch(x, m.weight().to(options), m.conv_bias->to(options),
                                 m.scale().to(options), m.shift().to(options), 1, lengths);
}

TEST(GluDwConv, Float64FallsBackToTheReference_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  torch::manual_seed(22);
  const auto options = torch::dtype(torch::kFloat64).device(torch::kCUDA);
  const auto x = torch::randn({2, 9, 12}, options);
  const auto m = random_middle(6, 3, true, options);
  const auto lengths = torch::tensor({9, 4}, torch::kLong).to(torch::kCUDA);
  EXPECT_TRUE(torch::allclose(
      call_op(x, m.weight(), m.conv_bias, m.scale(), m.shift(), 1, lengths),
      reference(x, m.weight(), m.conv_bias, m.scale(), m.shift(), 1, lengths), 1e-12, 1e-12));
}

TEST(GluDwConv, GradientsMatchTheReference_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  torch::manual_seed(23);
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto x = torch::randn({2, 2 * 36, 40}, f64).transpose(1, 2);
  const auto m = random_middle(36, 15, true, f64);
  const auto lengths = torch::tensor({40, 21});
  const auto grad_y = torch::randn({2, 40, 36}, f64);
  const std::vector<at::Tensor> inputs = {x, m.weight(), *m.conv_bias, m.scale(), m.shift()};
  std::vector<at::Tensor> cuda_inputs;
  for (const auto& t : inputs) {
    cuda_inputs.push_back(t.to(torch::kCUDA, torch::kFloat32));
  }
  const auto cuda_lengths = lengths.to(torch::kCUDA);
  const auto ours = grads_of(
      [&](const auto& in) { return call_op(in[0], in[1], in[2], in[3], in[4], 7, cuda_lengths); },
      cuda_inputs, grad_y.to(torch::kCUDA, torch::kFloat32));
  const auto expected = grads_of(
      [&](const auto& in) { return reference(in[0], in[1], in[2], in[3], in[4], 7, lengths); },
      inputs, grad_y);
  for (size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE(i);
    // TF32 may be allowed in LibTorch's CUDA convolutions: a loose tolerance.
    EXPECT_TRUE(torch::allclose(ours[i].cpu().to(torch::kFloat64), expected[i], 1e-2, 1e-2));
  }
}

TEST(GluDwConv, LengthsOnTheCpuAreRejected_CUDA) {
  SKIP_WITHOUT_CUDA(kKernelName);
  const auto options = torch::dtype(torch::kFloat32).device(torch::kCUDA);
  EXPECT_THAT(error_of<c10::Error>([&] {
                call_op(torch::randn({2, 5, 8}, options), torch::randn({4, 3}, options),
                        torch::randn({4}, options), torch::randn({4}, options),
                        torch::randn({4}, options), 1, torch::tensor({5, 4}));
              }),
              HasSubstr("lengths must be on x's device cuda:0, got cpu"));
}

}  // namespace test_glu_dwconv
