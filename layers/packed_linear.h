// y = act(x·Wᵀ + b) for inference on the CPU with the weight reordered once into a blocked layout
// and the bias and activation fused into the matrix product: what ONNX Runtime and torch.compile's
// CPU backend do, and what plain torch::linear (an addmm that first copies
// the broadcast bias into the output, then a separate GELU pass) does not. On a 2-core AVX-512
// CPU this halves the time of a ViT-B MLP's first projection (docs/benchmarks.md).
//
// The fast path is taken only where nothing can observe the difference: CPU tensors of float32 or
// bfloat16 (bfloat16 where oneDNN has the instructions for it: AVX-512 BW/VL/DQ or AVX-NE-CONVERT),
// no autograd recording (torch::InferenceMode or NoGradGuard), a LibTorch with oneDNN.
// Everywhere else (training, CUDA, float64, half) it is torch::linear and the activation. The
// results equal those up to the matrix product's summation order (~1e-6 relative).
//
// With set_int8(true), the same calls run int8_linear (layers/quantized_linear.h) instead:
// dynamic quantization, the weight per output channel, the activations per row; except where int8
// does not pay (int8_pays below), which takes the float path as if int8 were off.
//
// The reordered (or quantized) weight is cached per PackedLinear and rebuilt when the weight
// changes (another storage, dtype or an in-place update: its version counter); the cache is
// guarded by a mutex, so a module may run from several threads at once.
//
// float32 on an AVX-512 processor takes attnzoo's own packed product instead of oneDNN's
// (kernels::linear_packed_cpu: the weight packed once in panels of 32 outputs, bias and activation
// in the tile's epilogue) where own_kernel_pays, faster on the narrow layers of small ViTs
// (docs/benchmarks.md); ATTNZOO_LINEAR_CPU=onednn in the environment keeps oneDNN's, to compare.
#pragma once

#include <attnzoo/layers/activation.h>
#include <attnzoo/layers/quantized_linear.h>

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

namespace attnzoo {

class PackedLinear {
 public:
  PackedLinear() = default;
  // A copy (e.g. a cloned module) starts with an empty cache: its weight is another tensor.
  // The int8 setting is copied.
  PackedLinear(const PackedLinear& other) : int8_(other.int8_) {}
  PackedLinear& operator=(const PackedLinear& other) {
    int8_ = other.int8_;
    return *this;
  }

  torch::Tensor operator()(const torch::nn::Linear& linear, const torch::Tensor& x,
                           Activation activation = Activation::kNone) const;

  // Whether a float32 call on an AVX-512 processor takes attnzoo's own product
  // (kernels::linear_packed_cpu) rather than oneDNN's. Measured per layer against oneDNN's
  // (tools/bench/bench_linear_cpu, 2 threads, docs/benchmarks.md) on a 2-core Zen 5 EPYC: 0.76 to
  // 1.01 of its time on the layers of at most 768 inputs and 1536 outputs (ViT-Ti at batch 1:
  // 0.76 to 0.94); 1.02 to 1.04 on ViT-B's 768 -> 2304 and 768 -> 3072, 1.1 to 1.15 on more
  // inputs (ViT-B's fc2, 3072) and where the outputs end in a part-filled panel of 32
  // (conformer_s's 144).
  static constexpr int64_t kOwnKernelMaxIn = 768;
  static constexpr int64_t kOwnKernelMaxOut = 1536;
  static bool own_kernel_pays(int64_t in_features, int64_t out_features);
  // Turns attnzoo's own float32 product off (every float32 call on oneDNN's) or on again,
  // process-wide; on by default, off when the environment has ATTNZOO_LINEAR_CPU=onednn.
  static void set_own_kernel(bool enabled);

  // Whether the fast path (oneDNN's or attnzoo's packed product) would serve x and weight now (for
  // tests and benchmarks).
  static bool applies(const torch::Tensor& x, const torch::Tensor& weight);
  // Turns the fast path off (or on again) process-wide, e.g. to compare; on by default, off when
  // the environment has ATTNZOO_PACKED_LINEAR=0.
  static void set_enabled(bool enabled);

  // Inference calls (those autograd does not record) run in int8: float32 or bfloat16 CPU
  // tensors, anything else an error naming the device or dtype; off by default.
  void set_int8(bool on) { int8_ = on; }
  bool int8() const { return int8_; }

  // Whether an int8 layer runs a call of `rows` rows in int8. int8_linear adds two passes over the
  // activations (quantizing the rows, scaling the product back) to a faster product; on a layer
  // narrower than kInt8MinWidth (its input or its output) over more than kInt8MaxNarrowRows rows,
  // they may cost what the product saves, so such calls take the float path. Measured per layer
  // against the float path (tools/bench/bench_int8_linear, 2 threads, docs/benchmarks.md): on a
  // 2-core Zen 5 EPYC (AVX-512 VNNI) every layer of ViT-Ti, -S, -B and conformer_s/m gains, 0.29
  // to 0.95 of the float time, from 197 to 1576 rows; 144 wide (conformer_s) is the narrowest
  // measured, and narrower layers over many rows stay float.
  static constexpr int64_t kInt8MinWidth = 144;
  static constexpr int64_t kInt8MaxNarrowRows = 512;
  static bool int8_pays(int64_t rows, int64_t in_features, int64_t out_features);
  // Turns that fallback off (every int8 call in int8, e.g. to measure int8's accuracy alone) or
  // on again, process-wide; on by default, off when the environment has ATTNZOO_INT8_FALLBACK=0.
  static void set_int8_fallback(bool enabled);

  // second(activation(first(x))), both layers through their PackedLinear, where both run this
  // call in int8: the hidden activations go from the first layer's scale-back to the second
  // layer's product as int8 rows (int8_linear_to_rows), never as float in memory. nullopt where
  // either would not (int8 off, autograd recording, int8_pays); the caller then runs the layers
  // one by one. Errors as operator() gives them.
  static std::optional<torch::Tensor> int8_pair(const PackedLinear& first,
                                                const torch::nn::Linear& first_linear,
                                                const PackedLinear& second,
                                                const torch::nn::Linear& second_linear,
                                                const torch::Tensor& x, Activation activation);

 private:
  // Whether this call runs in int8 (int8 on, autograd not recording, int8_pays); an error for an
  // int8 call on another device or dtype.
  bool runs_int8(const torch::Tensor& x, const torch::Tensor& weight, int64_t rows) const;
  // Whether `weight` is the one the cache was built from.
  bool cached(const torch::Tensor& weight) const;
  void remember(const torch::Tensor& weight) const;
  void forget_other_weight(const torch::Tensor& weight) const;
  torch::Tensor packed(const torch::Tensor& weight) const;
  torch::Tensor panels(const torch::Tensor& weight) const;
  Int8Weight quantized(const torch::Tensor& weight) const;

  bool int8_ = false;
  mutable std::mutex mutex_;
  mutable torch::Tensor packed_;  // oneDNN's layout (bfloat16, or float32 without AVX-512)
  mutable torch::Tensor panels_;  // kernels::pack_linear_weight_cpu's (float32 on AVX-512)
  mutable Int8Weight quantized_;
  mutable const void* data_ = nullptr;
  mutable uint32_t version_ = 0;
  mutable torch::ScalarType dtype_ = torch::kFloat;
};

}  // namespace attnzoo
