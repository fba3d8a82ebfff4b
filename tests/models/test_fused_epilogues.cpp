// The fused-epilogue switch (layers/fused_epilogues.h): with it on, the ViT block's add +
// LayerNorm, the MLP's bias + GELU and the Conformer convolution module's GLU → depthwise conv →
// BatchNorm → Swish go through kernels/ops.h. On the CPU every output and gradient must equal the
// unfused model's (float64, and float32 to rounding); with a GPU the fused kernels must stay within
// float32 rounding of the unfused model on CUDA. Without the switch, inference on the CPU takes
// add_layer_norm at every block boundary (counted through the dispatcher) and gives the separate
// ops' output within float32 rounding.
#include <attnzoo/layers/fused_epilogues.h>
#include <attnzoo/layers/transformer_parts.h>
#include <attnzoo/models/conformer.h>
#include <attnzoo/models/vit.h>

#include <torch/torch.h>

#include "common/op_counter.h"

#include <gtest/gtest.h>

#include "common/test_util.h"

#include <algorithm>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace attnzoo {
namespace test_fused_epilogues {

// Sets the switch for a scope and restores it afterwards.
class FusedEpilogues {
 public:
  explicit FusedEpilogues(bool on) : before_(fused_epilogues()) { set_fused_epilogues(on); }
  ~FusedEpilogues() { set_fused_epilogues(before_); }
  FusedEpilogues(const FusedEpilogues&) = delete;
  FusedEpilogues& operator=(const FusedEpilogues&) = delete;

 private:
  bool before_;
};

// Every floating parameter and buffer random (variances positive), so that no affine weight is 1,
// no bias 0 and no running statistic trivial.
void randomize(torch::nn::Module& module, int64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters()) p.value().copy_(torch::randn_like(p.value()) * 0.5);
  for (auto& b : module.named_buffers()) {
    if (!b.value().is_floating_point()) continue;
    const bool variance = b.key().find("running_var") != std::string::npos;
    b.value().copy_(variance ? torch::rand_like(b.value()) + 0.5 : torch::randn_like(b.value()));
  }
}

constexpr auto max_diff = testing::max_abs_diff;

// run() with the switch off and on: outputs, and gradients of every parameter through
// sum(output * weights), within tol.
void expect_same_either_way(torch::nn::Module& module, const std::function<torch::Tensor()>& run,
                            double tol, bool gradients) {
  torch::Tensor off, on;
  std::vector<torch::Tensor> grads_off, grads_on;
  for (const bool fused : {false, true}) {
    FusedEpilogues guard(fused);
    module.zero_grad();
    const auto out = run();
    if (gradients) {
      torch::manual_seed(99);
      (out * torch::randn_like(out)).sum().backward();
      auto& grads = fused ? grads_on : grads_off;
      for (const auto& p : module.parameters()) grads.push_back(p.grad().clone());
    }
    (fused ? on : off) = out.detach();
  }
  ASSERT_EQ(off.sizes(), on.sizes());
  EXPECT_LE(max_diff(off, on), tol);
  for (size_t i = 0; i < grads_off.size(); ++i) {
    EXPECT_LE(max_diff(grads_off[i], grads_on[i]), tol) << "parameter " << i;
  }
}

TEST(FusedEpilogues, IsOffByDefaultAndSetForEveryThread) {
  EXPECT_FALSE(fused_epilogues());  // the suite runs without ATTNZOO_FUSED_EPILOGUES
  FusedEpilogues guard(true);
  bool seen = false;
  std::thread([&] { seen = fused_epilogues(); }).join();
  EXPECT_TRUE(seen);
}

TEST(FusedEpilogues, MlpBiasGeluEqualsTheUnfusedMlp) {
  for (const auto activation : {Activation::kGelu, Activation::kGeluTanh}) {
    for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
      Mlp mlp(MlpOptions(12, 40).activation(activation));
      mlp->to(dtype);
      randomize(*mlp, 1);
      const auto x = torch::randn({3, 5, 12}, dtype);
      expect_same_either_way(
          *mlp, [&] { return mlp(x); }, dtype == torch::kFloat64 ? 1e-12 : 1e-5, true);
    }
  }
}

TEST(FusedEpilogues, VisionTransformerEqualsTheUnfusedModel) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    VisionTransformer vit(ViTOptions()
                              .img_size(32)
                              .patch_size(8)
                              .embed_dim(48)
                              .depth(3)
                              .num_heads(4)
                              .num_classes(5)
                              .init_values(0.5));
    vit->to(dtype);
    randomize(*vit, 2);
    const auto images = torch::randn({2, 3, 32, 32}, dtype);
    const double tol = dtype == torch::kFloat64 ? 1e-11 : 1e-4;
    vit->eval();
    expect_same_either_way(
        *vit, [&] { return vit(images); }, tol, false);
    vit->train();  // training too: the fused ops are differentiable (no dropout here)
    expect_same_either_way(
        *vit, [&] { return vit(images); }, tol, true);
  }
}

ConformerEncoder conformer(bool causal) {
  return ConformerEncoder(
      ConformerEncoderOptions(20, ConformerOptions(16, 4, 32, 2, 5).causal_conv(causal))
          .subsampling(Subsampling::kConv2d4)
          .subsampling_channels(6));
}

TEST(FusedEpilogues, ConformerEqualsTheUnfusedModelAtInference) {
  // Padded utterances (the convolution module zeroes their padding before its depthwise
  // convolution), centred and causal kernels.
  for (const bool causal : {false, true}) {
    for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
      auto model = conformer(causal);
      model->to(dtype);
      randomize(*model, 3);
      model->eval();
      const auto x = torch::randn({3, 61, 20}, dtype);
      const auto lengths = torch::tensor({61, 40, 23});
      expect_same_either_way(
          *model, [&] { return std::get<0>(model->forward(x, lengths)); },
          dtype == torch::kFloat64 ? 1e-11 : 1e-4, true);
    }
  }
}

// Inference on the CPU in float32 takes add_layer_norm at every block boundary without the
// switch (`calls` of it), and gives the separate ops' output (run with autograd recording, which
// keeps them) within float32 rounding.
void expect_fused_at_cpu_inference(const std::function<torch::Tensor()>& run, int calls) {
  ASSERT_FALSE(fused_epilogues());
  torch::Tensor fused;
  {
    torch::NoGradGuard no_grad;
    testing::OpCounter counter({"attnzoo::add_layer_norm"});
    fused = run();
    EXPECT_EQ(counter.calls("attnzoo::add_layer_norm"), calls);
  }
  torch::Tensor separate;
  {
    testing::OpCounter counter({"attnzoo::add_layer_norm"});
    separate = run().detach();
    EXPECT_EQ(counter.calls("attnzoo::add_layer_norm"), 0);
  }
  ASSERT_EQ(fused.sizes(), separate.sizes());
  const double scale = separate.abs().max().item<double>();
  EXPECT_LE(max_diff(fused, separate), 1e-5 * std::max(1.0, scale));
}

TEST(FusedEpilogues, VisionTransformerFusesItsBlockBoundariesAtCpuInference) {
  struct Case {
    std::string name;
    ViTOptions options;
    int calls;  // two a block; the last block's second only with a final norm over all tokens
  };
  const auto base = ViTOptions().img_size(32).patch_size(8).embed_dim(48).depth(3).num_heads(4);
  const Case cases[] = {
      {"final norm", ViTOptions(base), 6},
      {"LayerScale", ViTOptions(base).init_values(0.5), 6},
      {"avg pool with fc_norm", ViTOptions(base).global_pool(GlobalPool::kAvg), 5},
      {"no final norm", ViTOptions(base).final_norm(false), 5},
      {"pre-norm (CLIP)", ViTOptions(base).pre_norm(true), 6},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    VisionTransformer vit(c.options);
    randomize(*vit, 6);
    vit->eval();
    const auto images = torch::randn({2, 3, 32, 32});
    expect_fused_at_cpu_inference([&] { return vit(images); }, c.calls);
  }
}

TEST(FusedEpilogues, ConformerFusesEveryBranchBoundaryAtCpuInference) {
  for (const bool convolution_first : {false, true}) {
    SCOPED_TRACE(convolution_first ? "convolution first" : "attention first");
    auto model = ConformerEncoder(
        ConformerEncoderOptions(
            20, ConformerOptions(16, 4, 32, 2, 5).convolution_first(convolution_first))
            .subsampling(Subsampling::kConv2d4)
            .subsampling_channels(6));
    randomize(*model, 7);
    model->eval();
    const auto x = torch::randn({3, 61, 20});
    const auto lengths = torch::tensor({61, 40, 23});
    // Four a block (after each branch), two blocks.
    expect_fused_at_cpu_inference([&] { return std::get<0>(model->forward(x, lengths)); }, 8);
  }
}

// With a GPU: the fused kernels against the unfused model, both on CUDA in float32.
TEST(FusedEpilogues, KernelsStayWithinFloat32RoundingOfTheUnfusedModels_CUDA) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  torch::NoGradGuard no_grad;
  VisionTransformer vit(
      ViTOptions().img_size(64).patch_size(16).embed_dim(192).depth(4).num_heads(3).num_classes(
          10));
  randomize(*vit, 4);
  vit->to(torch::kCUDA);
  vit->eval();
  const auto images = torch::randn({4, 3, 64, 64}, torch::kCUDA);
  expect_same_either_way(
      *vit, [&] { return vit(images); }, 1e-4, false);
  auto model = conformer(false);
  randomize(*model, 5);
  model->to(torch::kCUDA);
  model->eval();
  const auto x = torch::randn({3, 161, 20}, torch::kCUDA);
  const auto lengths = torch::tensor({161, 100, 37}, torch::kCUDA);
  expect_same_either_way(
      *model, [&] { return std::get<0>(model->forward(x, lengths)); }, 1e-4, false);
}

}  // namespace test_fused_epilogues
}  // namespace attnzoo
