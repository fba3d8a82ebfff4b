#pragma once
// What the elementwise kernels of kernels/ share: float conversion of the three storage types
// (every op computes in fp32), and 16-byte packs. Device code only, no torch headers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace attnzoo::kernels::detail {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Round to nearest even, as LibTorch's casts do.
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// 16-byte accesses (one LDG.128/STG.128 per thread) are what saturates memory bandwidth for an
// elementwise op; narrower types pack more elements into the same access.
template <typename T>
constexpr int kMaxPackSize = 16 / static_cast<int>(sizeof(T));

template <typename T, int kPackSize>
struct alignas(sizeof(T) * kPackSize) Pack {
  T v[kPackSize];
};

}  // namespace attnzoo::kernels::detail
