// CudaGraphForward: where it refuses (no CUDA build, a CPU example, another shape), and on a GPU,
// that replays of a recorded ViT and Conformer forward give what the eager forward gives, for new
// inputs each time, without overwriting earlier results.
#include <attnzoo/models/conformer.h>
#include <attnzoo/models/cuda_graph.h>
#include <attnzoo/models/vit.h>
#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace attnzoo {
namespace test_cuda_graph {
using testing::error_of;
using testing::max_abs_diff;

using ::testing::HasSubstr;

TEST(CudaGraph, RefusesWhatItCannotRecord) {
  const auto identity = [](const torch::Tensor& x) { return x * 2; };
  const auto message = error_of([&] { CudaGraphForward(identity, torch::ones({2, 3})); });
  EXPECT_THAT(message, HasSubstr(CudaGraphForward::built_with_cuda()
                                     ? "CUDA graphs record CUDA work; the example is on cpu"
                                     : "this build of attnzoo has no CUDA support"));
  EXPECT_THAT(error_of([&] { CudaGraphForward(nullptr, torch::ones({2})); }),
              HasSubstr("no forward function"));
  EXPECT_THAT(error_of([&] { CudaGraphForward(identity, torch::ones({2}), 0); }),
              HasSubstr("warmup must be >= 1"));
}

#define SKIP_WITHOUT_CUDA()                                                 \
  if (!torch::cuda::is_available() || !CudaGraphForward::built_with_cuda()) \
  GTEST_SKIP() << "no CUDA device (or a build without CUDA): CUDA graphs are untested"

TEST(CudaGraph, ReplaysEqualTheEagerViT_CUDA) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(0);
  VisionTransformer vit(
      ViTOptions().img_size(64).patch_size(16).embed_dim(128).depth(3).num_heads(4).num_classes(
          10));
  vit->eval();
  vit->to(torch::kCUDA, torch::kBFloat16);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto a = torch::randn({4, 3, 64, 64}, options), b = torch::randn({4, 3, 64, 64}, options);
  torch::InferenceMode inference;
  CudaGraphForward graph([&](const torch::Tensor& x) { return vit(x); }, a);
  const auto out_a = graph(a);
  const auto out_b = graph(b);  // a replay with new data: not the recorded input's output
  EXPECT_LE(max_abs_diff(out_a, vit(a)), 1e-2);
  EXPECT_LE(max_abs_diff(out_b, vit(b)), 1e-2);
  EXPECT_GT(max_abs_diff(out_a, out_b), 1e-2);  // out_a was not overwritten by the second replay
  EXPECT_TRUE(graph.accepts(a));
  EXPECT_FALSE(graph.accepts(a.narrow(0, 0, 2)));
  EXPECT_THAT(error_of([&] { graph(a.narrow(0, 0, 2)); }),
              HasSubstr("the graph was recorded for [4, 3, 64, 64]"));
}

TEST(CudaGraph, ReplaysEqualTheEagerConformer_CUDA) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(1);
  Conformer conformer(ConformerOptions(64, 4, 128, 2, 15));
  conformer->eval();
  conformer->to(torch::kCUDA, torch::kHalf);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kHalf);
  const auto lengths = torch::tensor({50L, 31L}, torch::TensorOptions().device(torch::kCUDA));
  const auto forward = [&](const torch::Tensor& x) { return std::get<0>(conformer(x, lengths)); };
  const auto a = torch::randn({2, 50, 64}, options), b = torch::randn({2, 50, 64}, options);
  torch::InferenceMode inference;
  CudaGraphForward graph(forward, a);
  EXPECT_LE(max_abs_diff(graph(b), forward(b)), 1e-2);
  EXPECT_LE(max_abs_diff(graph(a), forward(a)), 1e-2);
}

}  // namespace test_cuda_graph
}  // namespace attnzoo
