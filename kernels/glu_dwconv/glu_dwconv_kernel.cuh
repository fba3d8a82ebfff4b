#pragma once
// Tier 2 of the Conformer convolution module's middle, GLU -> depthwise conv1d -> folded BatchNorm
// -> Swish: the kernel template and its launcher. Included only by the per-dtype
// glu_dwconv_{fp32,fp16,bf16}.cu files, which instantiate run_glu_dwconv<T>.
#include <attnzoo/kernels/common/static_switch.h>
#include <attnzoo/kernels/glu_dwconv/glu_dwconv_params.h>
#include <attnzoo/kernels/common/elementwise.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

namespace attnzoo::kernels {
namespace detail {

// 1 / (1 + e^-v), the formula of at::sigmoid, at::glu and at::silu; 0 (not NaN) for v -> -inf.
__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

// A block computes y for one batch, kTimeTile consecutive frames and kChannelTile consecutive
// channels. Thread (run, lane) owns channel c0 + lane and the kRun consecutive frames
// t0 + run * kRun ...: a warp is 32 consecutive channels of one run, so that its shared-memory
// reads hit 32 banks and its stores of y are coalesced along the channels.
constexpr int kThreads = 256;
constexpr int kChannelTile = 64;
constexpr int kRun = 16;
constexpr int kTimeTile = kRun * (kThreads / kChannelTile);  // 64
// Taps per pass: the GLU of kTimeTile + kTapChunk - 1 frames (the tile and its halo) sits in
// shared memory at once. K <= kTapChunk (every Conformer's K) takes one pass; a longer kernel
// takes several, each reloading its shifted window, so that any K fits in fixed shared memory.
constexpr int kTapChunk = 32;
constexpr int kRows = kTimeTile + kTapChunk - 1;
constexpr int kWeightPitch = kChannelTile + 1;  // see the weight loads

// kPack > 1: channels last with aligned packs; threads of a warp walk the channels of a frame.
// kPack == 1, !kTimeFastest: the same mapping, one element at a time (odd C, misaligned views).
// kPack == 1, kTimeFastest: x's frames are closer than its channels (the transposed view of a
// channels-first [B, 2C, T] tensor): threads walk the frames, so that the loads coalesce, and the
// shared rows get one float of padding, so that the stores down a column hit distinct banks.
template <typename T, int kPack, bool kTimeFastest>
__global__ void __launch_bounds__(kThreads) glu_dwconv_kernel(const GluDwConvParams p) {
  static_assert(!kTimeFastest || kPack == 1, "the frame-major load is elementwise");
  static_assert(kChannelTile % kPack == 0, "a pack never straddles two channel tiles");
  constexpr int kPitch = kTimeFastest ? kChannelTile + 1 : kChannelTile;
  constexpr int kUnits = kChannelTile / kPack;  // loads per row of the tile
  // a_s[row][channel]: the GLU (zero where masked or outside [0, time)) of input frame
  // t0 + k0 - left_pad + row; w_s[tap][channel]: the pass's taps.
  __shared__ __align__(16) float a_s[kRows * kPitch];
  __shared__ float w_s[kTapChunk * kWeightPitch];

  const T* __restrict__ x = static_cast<const T*>(p.x);
  const T* __restrict__ weight = static_cast<const T*>(p.weight);
  const T* __restrict__ bias = static_cast<const T*>(p.bias);
  const T* __restrict__ scale = static_cast<const T*>(p.scale);
  const T* __restrict__ shift = static_cast<const T*>(p.shift);
  T* __restrict__ y = static_cast<T*>(p.y);

  const int64_t channel_tiles = (p.channels + kChannelTile - 1) / kChannelTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x % channel_tiles) * kChannelTile;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x / channel_tiles) * kTimeTile;
  const int lane = static_cast<int>(threadIdx.x) % kChannelTile;
  const int run = static_cast<int>(threadIdx.x) / kChannelTile;
  const int64_t c = c0 + lane;
  const int64_t gate_offset = p.channels * p.x_channel_stride;

  for (int64_t b = blockIdx.y; b < p.batch; b += gridDim.y) {
    const T* xb = x + b * p.x_batch_stride;
    // Frames at or beyond the utterance's length are zero before the convolution, as the
    // module's masked_fill makes them; a length beyond `time` masks nothing.
    const int64_t length = p.lengths == nullptr ? p.time : p.lengths[b];
    const int64_t valid_time = length < p.time ? length : p.time;  // a negative one masks all
    float acc[kRun];
#pragma unroll
    for (int j = 0; j < kRun; ++j) {
      acc[j] = 0.0f;
    }
    for (int64_t k0 = 0; k0 < p.kernel_size; k0 += kTapChunk) {
      const int kc =
          static_cast<int>(p.kernel_size - k0 < kTapChunk ? p.kernel_size - k0 : kTapChunk);
      const int rows = kTimeTile + kc - 1;
      const int64_t first_frame = t0 + k0 - p.left_pad;  // input frame of row 0
      __syncthreads();  // the previous pass (or batch) has finished reading a_s and w_s

      for (int i = static_cast<int>(threadIdx.x); i < rows * kUnits; i += kThreads) {
        int row;
        int unit;
        if constexpr (kTimeFastest) {
          row = i % rows;
          unit = i / rows;
        } else {
          row = i / kUnits;
          unit = i % kUnits;
        }
        const int64_t t = first_frame + row;
        const int64_t cu = c0 + static_cast<int64_t>(unit) * kPack;
        float a[kPack];
        // C % kPack == 0 on the packed path, so a pack is all in or all out.
        if (t >= 0 && t < valid_time && cu < p.channels) {
          const T* xv = xb + t * p.x_time_stride + cu * p.x_channel_stride;
          if constexpr (kPack > 1) {
            const Pack<T, kPack> v = *reinterpret_cast<const Pack<T, kPack>*>(xv);
            const Pack<T, kPack> g = *reinterpret_cast<const Pack<T, kPack>*>(xv + gate_offset);
#pragma unroll
            for (int j = 0; j < kPack; ++j) {
              a[j] = to_float(v.v[j]) * sigmoid(to_float(g.v[j]));
            }
          } else {
            a[0] = to_float(xv[0]) * sigmoid(to_float(xv[gate_offset]));
          }
        } else {
#pragma unroll
          for (int j = 0; j < kPack; ++j) {
            a[j] = 0.0f;
          }
        }
        float* dst = a_s + row * kPitch + unit * kPack;
        if constexpr (kPack % 4 == 0) {
#pragma unroll
          for (int q = 0; q < kPack / 4; ++q) {
            reinterpret_cast<float4*>(dst)[q] =
                make_float4(a[4 * q], a[4 * q + 1], a[4 * q + 2], a[4 * q + 3]);
          }
        } else {
#pragma unroll
          for (int j = 0; j < kPack; ++j) {
            dst[j] = a[j];
          }
        }
      }

      // Consecutive threads read consecutive taps of one channel (weight is [C, K], contiguous)
      // and store them down a column of w_s, whose odd pitch keeps the stores on distinct banks.
      for (int i = static_cast<int>(threadIdx.x); i < kTapChunk * kChannelTile; i += kThreads) {
        const int ch = i / kTapChunk;
        const int k = i % kTapChunk;
        const int64_t cw = c0 + ch;
        w_s[k * kWeightPitch + ch] =
            k < kc && cw < p.channels ? to_float(weight[cw * p.kernel_size + k0 + k]) : 0.0f;
      }
      __syncthreads();

      // Output frame t0 + run * kRun + j takes tap k from row run * kRun + j + k. The window
      // holds rows run * kRun + k ... + kRun - 1 and slides down by one row per tap, so that each
      // tap costs one shared load of a and one of the weight for kRun FMAs. The last row read is
      // kTimeTile - 1 + kc - 1 = rows - 1.
      const float* column = a_s + run * kRun * kPitch + lane;
      float window[kRun];
#pragma unroll
      for (int j = 0; j < kRun; ++j) {
        window[j] = column[j * kPitch];
      }
      for (int k = 0; k < kc; ++k) {
        if (k > 0) {
#pragma unroll
          for (int j = 0; j < kRun - 1; ++j) {
            window[j] = window[j + 1];
          }
          window[kRun - 1] = column[(kRun - 1 + k) * kPitch];
        }
        const float w = w_s[k * kWeightPitch + lane];
#pragma unroll
        for (int j = 0; j < kRun; ++j) {
          acc[j] = fmaf(w, window[j], acc[j]);
        }
      }
    }

    if (c < p.channels) {
      const float bias_c = bias == nullptr ? 0.0f : to_float(bias[c]);
      const float scale_c = to_float(scale[c]);
      const float shift_c = to_float(shift[c]);
      T* yb = y + b * p.time * p.channels + c;
#pragma unroll
      for (int j = 0; j < kRun; ++j) {
        const int64_t t = t0 + run * kRun + j;
        if (t < p.time) {
          const float v = (acc[j] + bias_c) * scale_c + shift_c;
          yb[t * p.channels] = from_float<T>(v * sigmoid(v));
        }
      }
    }
  }
}

template <typename T, int kPack, bool kTimeFastest>
void launch_glu_dwconv(const GluDwConvParams& params, cudaStream_t stream) {
  // Batches beyond gridDim.y's limit loop inside the blocks.
  constexpr int64_t kMaxBatchBlocks = 65535;
  const int64_t channel_tiles = (params.channels + kChannelTile - 1) / kChannelTile;
  const int64_t time_tiles = (params.time + kTimeTile - 1) / kTimeTile;
  const dim3 grid(static_cast<unsigned int>(channel_tiles * time_tiles),
                  static_cast<unsigned int>(std::min(params.batch, kMaxBatchBlocks)));
  glu_dwconv_kernel<T, kPack, kTimeFastest><<<grid, kThreads, 0, stream>>>(params);
}

inline bool is_aligned(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

}  // namespace detail

template <typename T>
void run_glu_dwconv(const GluDwConvParams& params, cudaStream_t stream) {
  using namespace detail;
  if (params.batch == 0 || params.time == 0 || params.channels == 0) {
    return;  // a zero-block launch is an error, and there is nothing to do
  }
  // Packed loads need contiguous channels and every pack on a 16-byte boundary: the base pointer,
  // C (the gate half's offset) and the strides that are used (a size-1 dim's never is) in whole
  // packs. The rest (odd C, slices, channels-first views) loads element by element, without a
  // copy.
  constexpr int kPack = kMaxPackSize<T>;
  const bool packed = params.x_channel_stride == 1 && params.channels % kPack == 0 &&
                      (params.time == 1 || params.x_time_stride % kPack == 0) &&
                      (params.batch == 1 || params.x_batch_stride % kPack == 0) &&
                      is_aligned(params.x, kPack * static_cast<int64_t>(sizeof(T)));
  if (packed) {
    launch_glu_dwconv<T, kPack, false>(params, stream);
    return;
  }
  const bool time_fastest = params.time > 1 && params.x_time_stride < params.x_channel_stride;
  BOOL_SWITCH(time_fastest, kTimeFastest,
              [&] { launch_glu_dwconv<T, 1, kTimeFastest>(params, stream); });
}

}  // namespace attnzoo::kernels
