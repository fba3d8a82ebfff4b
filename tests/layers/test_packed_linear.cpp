// PackedLinear: the inference paths (oneDNN's product, attnzoo's own) equal x·Wᵀ + b and the
// activation in float64 (to the matrix product's rounding), is taken only where no autograd can see
// it, repacks when the weight changes, and serves several threads at once.
#include <attnzoo/layers/packed_linear.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <thread>

namespace attnzoo {
namespace test_packed_linear {

// y = act(x·Wᵀ + b) in float64 from the definitions of the activations, written independently of
// apply_activation (which the fallback path calls): GELU x·Φ(x) by erf, its tanh approximation,
// SiLU x / (1 + e^-x), ReLU max(x, 0).
torch::Tensor reference(const torch::nn::Linear& linear, const torch::Tensor& x,
                        Activation activation) {
  const auto w = linear->weight.to(torch::kDouble);
  auto y = torch::matmul(x.to(torch::kDouble), w.t());
  if (linear->bias.defined()) y = y + linear->bias.to(torch::kDouble);
  switch (activation) {
    case Activation::kGelu:
      return 0.5 * y * (1.0 + torch::erf(y / std::sqrt(2.0)));
    case Activation::kGeluTanh:
      return 0.5 * y * (1.0 + torch::tanh(std::sqrt(2.0 / M_PI) * (y + 0.044715 * y.pow(3))));
    case Activation::kSilu:
      return y / (1.0 + torch::exp(-y));
    case Activation::kRelu:
      return torch::where(y > 0, y, torch::zeros_like(y));
    case Activation::kNone:
      break;
  }
  return y;
}

double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max() /
          b.to(torch::kDouble).abs().max().clamp_min(1e-30))
      .item<double>();
}

// 40 outputs take oneDNN's product; 64 take attnzoo's own where the processor has AVX-512
// (own_kernel_pays).
TEST(PackedLinear, EqualsLinearAndActivationInInference) {
  torch::manual_seed(0);
  for (const auto& [bias, outputs] :
       std::vector<std::pair<bool, int64_t>>{{true, 40}, {false, 40}, {true, 64}, {false, 64}}) {
    torch::nn::Linear linear(torch::nn::LinearOptions(48, outputs).bias(bias));
    const PackedLinear packed;
    for (auto activation : {Activation::kNone, Activation::kGelu, Activation::kGeluTanh,
                            Activation::kSilu, Activation::kRelu}) {
      for (const auto& shape : std::vector<std::vector<int64_t>>{{7, 48}, {2, 5, 48}}) {
        const auto x = torch::randn(shape);
        torch::InferenceMode inference;
        ASSERT_TRUE(PackedLinear::applies(x, linear->weight) || !at::hasMKLDNN());
        const auto got = packed(linear, x, activation);
        auto expected_shape = shape;
        expected_shape.back() = outputs;
        EXPECT_EQ(got.sizes().vec(), expected_shape);
        EXPECT_LE(relative_error(got, reference(linear, x, activation)), 1e-5)
            << "bias " << bias << " outputs " << outputs << " activation "
            << static_cast<int>(activation);
      }
    }
  }
}

// attnzoo's float32 product where it measured faster (up to 768 inputs and 1536 outputs, whole
// panels of 32 outputs), oneDNN's elsewhere; set_own_kernel(false) sends every call to oneDNN's,
// which agrees to the products' rounding.
TEST(PackedLinear, OwnKernelWhereItPays) {
  EXPECT_TRUE(PackedLinear::own_kernel_pays(192, 576));
  EXPECT_TRUE(PackedLinear::own_kernel_pays(768, 192));
  EXPECT_TRUE(PackedLinear::own_kernel_pays(384, 1536));
  EXPECT_FALSE(PackedLinear::own_kernel_pays(769, 192));
  EXPECT_FALSE(PackedLinear::own_kernel_pays(768, 2304));
  EXPECT_FALSE(PackedLinear::own_kernel_pays(3072, 768));
  EXPECT_FALSE(PackedLinear::own_kernel_pays(576, 144));
  torch::manual_seed(4);
  torch::nn::Linear linear(96, 128);
  const auto x = torch::randn({29, 96});
  torch::InferenceMode inference;
  const PackedLinear packed;
  const auto own = packed(linear, x, Activation::kGelu);
  PackedLinear::set_own_kernel(false);
  const auto onednn = packed(linear, x, Activation::kGelu);
  PackedLinear::set_own_kernel(true);
  EXPECT_LE(relative_error(own, onednn), 1e-5);
  EXPECT_LE(relative_error(own, reference(linear, x, Activation::kGelu)), 1e-5);
}

TEST(PackedLinear, TakenOnlyWhereAutogradCannotSeeIt) {
  torch::nn::Linear linear(8, 4);
  const auto x = torch::randn({3, 8});
  // Training: the weight requires grad and grad mode records.
  EXPECT_FALSE(PackedLinear::applies(x, linear->weight));
  {
    torch::NoGradGuard no_grad;
    EXPECT_EQ(PackedLinear::applies(x, linear->weight), at::hasMKLDNN());
  }
  {
    torch::InferenceMode inference;
    EXPECT_EQ(PackedLinear::applies(x, linear->weight), at::hasMKLDNN());
    EXPECT_FALSE(PackedLinear::applies(x.to(torch::kDouble), linear->weight.to(torch::kDouble)));
    EXPECT_FALSE(PackedLinear::applies(x.to(torch::kHalf), linear->weight.to(torch::kHalf)));
    PackedLinear::set_enabled(false);
    EXPECT_FALSE(PackedLinear::applies(x, linear->weight));
    PackedLinear::set_enabled(true);
  }
  // Gradients flow through the fallback as through torch::linear.
  const PackedLinear packed;
  auto y = packed(linear, x.clone().requires_grad_(), Activation::kGelu);
  y.sum().backward();
  EXPECT_TRUE(linear->weight.grad().defined());
}

TEST(PackedLinear, RepacksWhenTheWeightChanges) {
  torch::manual_seed(1);
  torch::nn::Linear linear(16, 8);
  const PackedLinear packed;
  const auto x = torch::randn({4, 16});
  const auto run = [&](const torch::Tensor& input) {
    torch::InferenceMode inference;
    return packed(linear, input);
  };
  const auto expect_reference = [&](const torch::Tensor& input, double tolerance) {
    torch::InferenceMode inference;
    EXPECT_LE(relative_error(run(input), reference(linear, input, Activation::kNone)), tolerance);
  };
  const auto before = run(x);
  {
    torch::NoGradGuard no_grad;
    linear->weight.mul_(2.0);  // in place: the version counter moves
  }
  const auto after = run(x);
  expect_reference(x, 1e-5);
  EXPECT_GT((after - before).abs().max().item<double>(), 1e-3);
  {
    torch::NoGradGuard no_grad;
    linear->weight.set_data(torch::randn({8, 16}));  // another storage altogether
  }
  expect_reference(x, 1e-5);
  // bfloat16 after float32: repacked in the new dtype.
  linear->to(torch::kBFloat16);
  const auto xb = x.to(torch::kBFloat16);
  EXPECT_EQ(run(xb).scalar_type(), torch::kBFloat16);
  expect_reference(xb, 2e-2);
}

TEST(PackedLinear, FourThreadsAtOnce) {
  torch::manual_seed(2);
  torch::nn::Linear linear(64, 64);
  const PackedLinear packed;
  std::vector<torch::Tensor> inputs, expected;
  for (int i = 0; i < 4; ++i) {
    inputs.push_back(torch::randn({9, 64}));
    torch::InferenceMode inference;
    expected.push_back(reference(linear, inputs.back(), Activation::kGelu));
  }
  std::vector<double> errors(4, 0.0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      torch::InferenceMode inference;
      for (int round = 0; round < 20; ++round) {
        const auto got = packed(linear, inputs[static_cast<size_t>(t)], Activation::kGelu);
        errors[static_cast<size_t>(t)] = std::max(
            errors[static_cast<size_t>(t)], relative_error(got, expected[static_cast<size_t>(t)]));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (double e : errors) EXPECT_LE(e, 1e-5);
}

}  // namespace test_packed_linear
}  // namespace attnzoo
