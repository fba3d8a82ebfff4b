// Whole-model inference captured once in a CUDA graph and replayed (at::cuda::CUDAGraph, as
// torch.cuda.CUDAGraph in Python): for a fixed input shape, dtype and device, a replay launches
// every kernel of the forward pass with one call, so the host's per-op cost (hundreds of small
// launches for a ViT at batch 1) disappears.
//
//   CudaGraphForward graph([&](const torch::Tensor& x) { return vit(x); }, example);
//   auto logits = graph(images);   // images: example's shape, dtype and device
//
// The capture follows PyTorch's recipe: warm-up calls on a side stream (so that lazily created
// state, cuBLAS workspaces and the allocator's blocks exist before recording), then one recorded
// call under InferenceMode into the graph's private memory pool. The forward must be a pure
// function of its input on the device: no host synchronisation (.item(), printing), no host
// tensors copied in, no shape that depends on values. Each call copies the input into the graph's
// static input and returns a copy of its static output, so earlier results stay valid.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>

namespace attnzoo {

class CudaGraphForward {
 public:
  using Forward = std::function<torch::Tensor(const torch::Tensor&)>;

  // Records `forward` on a tensor like `example` (a CUDA tensor). Throws c10::Error when this
  // build has no CUDA support, when `example` is not on a CUDA device, or when the capture fails
  // (the message then names the likely cause: a host synchronisation inside the forward).
  CudaGraphForward(Forward forward, const torch::Tensor& example, int64_t warmup = 2);
  ~CudaGraphForward();
  CudaGraphForward(const CudaGraphForward&) = delete;
  CudaGraphForward& operator=(const CudaGraphForward&) = delete;

  // x: the example's shape, dtype and device -> the forward's output (a fresh tensor).
  torch::Tensor operator()(const torch::Tensor& x);
  // True when x has the example's shape, dtype and device.
  bool accepts(const torch::Tensor& x) const;

  // True when attnzoo was built with CUDA (the graphs need LibTorch's CUDA part).
  static bool built_with_cuda();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnzoo
