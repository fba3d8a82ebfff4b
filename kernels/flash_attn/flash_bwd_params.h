#pragma once
// Tier 1 of the flash attention backward: what the launcher needs, in plain types. Included by the
// torch-free .cu files and by the ops layer.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace attnzoo::kernels {

// The gradients of out = softmax(scale q k^T + bias, masked) v (see FlashFwdParams) given d_out,
// from the forward's out and lse (FlashAttention-2's backward, recomputing the probabilities
// P = exp(logit - lse) tile by tile):
//   D[i]   = sum_e d_out[i, e] out[i, e]
//   dV     = P^T dO,   dP = dO V^T,   dS = P (dP - D),   d_bias = dS
//   dQ     = scale dS K,   dK = scale dS^T Q
// over the visible keys only (key_lengths, causal top-left / bottom-right, as the forward); rows
// with lse = -inf (no visible key) contribute nothing.
//
// q, k, v, out and d_out are read by strides, the head dim contiguous (element (b, i, h, e) of q is
// q[b * q_batch_stride + i * q_row_stride + h * q_head_stride + e]); so is the bias, with stride 0
// on a broadcast dimension. The outputs are contiguous. The bias and d_bias are float32 whatever
// the dtype of q, as in the forward.
struct FlashBwdParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* out = nullptr;             // the forward's output
  const void* d_out = nullptr;           // its gradient
  const float* lse = nullptr;            // [B, H, L], contiguous, natural log
  const float* bias = nullptr;           // optional, float32
  const int64_t* key_lengths = nullptr;  // optional, [B]

  void* dq = nullptr;               // [B, L, H, E], contiguous, the dtype of q
  void* dk = nullptr;               // [B, S, H, E], contiguous
  void* dv = nullptr;               // [B, S, H, E], contiguous
  float* dq_accum = nullptr;        // [B, L, H, E], contiguous, ZEROED by the caller
  float* d_rowsum = nullptr;        // [B, H, L], contiguous: D, written by the launcher
  float* d_bias = nullptr;          // optional: [1|B, 1|H, L, S], contiguous, ZEROED by the caller
  bool d_bias_broadcast = false;    // several (b, h) add to one element of d_bias (atomicAdd)
  int64_t d_bias_batch_stride = 0;  // 0 when the bias is broadcast over the batch
  int64_t d_bias_head_stride = 0;   // 0 when the bias is broadcast over the heads
  int64_t d_bias_row_stride = 0;    // S

  int64_t batch = 0, heads = 0;
  int64_t q_len = 0, k_len = 0;  // L and S
  int64_t head_dim = 0;          // E, at most the kernel's padded head dim

  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t out_batch_stride = 0, out_row_stride = 0, out_head_stride = 0;
  int64_t do_batch_stride = 0, do_row_stride = 0, do_head_stride = 0;
  int64_t bias_batch_stride = 0, bias_head_stride = 0, bias_row_stride = 0;  // column stride 1

  float scale = 1.0f;
  bool causal = false;
  bool causal_bottom_right = false;
};

// T is __half or __nv_bfloat16; kHeadDim is the padded head dim (32, 64, 96 or 128), E <= kHeadDim.
// The instantiations live in flash_bwd_<dtype>_hdim<kHeadDim>.cu. Launches the preprocess (D), the
// main kernel and the conversion of dq on `stream` and returns without synchronising:
// cudaErrorInvalidConfiguration when the grid would exceed 2^31 - 1 blocks, the error of raising
// the kernel's dynamic shared memory limit, else cudaSuccess. The caller checks for launch errors.
template <typename T, int kHeadDim>
cudaError_t run_flash_bwd(const FlashBwdParams& params, cudaStream_t stream);

}  // namespace attnzoo::kernels
