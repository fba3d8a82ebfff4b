#pragma once
// Tier 1 of the Conformer convolution module's middle (GLU -> depthwise conv1d -> folded
// BatchNorm -> Swish): what the launcher needs, in plain types. Included by the torch-free .cu
// files and by the ops layer, so it must stay free of torch (and of anything that nvcc compiles
// slowly).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace attnzoo::kernels {

// For b < batch, t < time, c < channels (C):
//   a[b, t, c]  = x[b, t, c] * sigmoid(x[b, t, C + c]), and 0 where t >= lengths[b]
//   z[b, t, c]  = sum_k weight[c, k] * a[b, t + k - left_pad, c] (a is 0 outside [0, time))
//                 + bias[c]
//   v[b, t, c]  = z[b, t, c] * scale[c] + shift[c]
//   y[b, t, c]  = v * sigmoid(v)
// x is read by its three strides (any layout: channels last [B, T, 2C], or the transposed view of
// a channels-first [B, 2C, T] tensor); y is written contiguous [B, T, C]. The parameters are
// contiguous, of x's type; pointers are typed by the launcher's template argument. All sums in
// float32.
struct GluDwConvParams {
  const void* x = nullptr;
  const void* weight = nullptr;      // [C, K]
  const void* bias = nullptr;        // [C], or nullptr: no conv bias
  const void* scale = nullptr;       // [C]
  const void* shift = nullptr;       // [C]
  const int64_t* lengths = nullptr;  // [batch], or nullptr: every frame is valid
  void* y = nullptr;                 // [batch, time, channels], contiguous
  int64_t batch = 0;
  int64_t time = 0;
  int64_t channels = 0;          // C: x has 2C channels
  int64_t kernel_size = 0;       // K >= 1
  int64_t left_pad = 0;          // in [0, K - 1]; K - 1 - left_pad zero frames on the right
  int64_t x_batch_stride = 0;    // in elements
  int64_t x_time_stride = 0;     // in elements
  int64_t x_channel_stride = 0;  // in elements
};

// T is float, __half or __nv_bfloat16; the instantiations live in glu_dwconv_{fp32,fp16,bf16}.cu.
// Launches on `stream` and returns without synchronising; the caller checks for launch errors.
template <typename T>
void run_glu_dwconv(const GluDwConvParams& params, cudaStream_t stream);

}  // namespace attnzoo::kernels
