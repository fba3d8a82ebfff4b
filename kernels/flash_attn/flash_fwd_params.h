#pragma once
// Tier 1 of the flash attention forward: what the launcher needs, in plain types. Included by the
// torch-free .cu files and by the ops layer.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace attnzoo::kernels {

// out[b, i, h, :] = softmax_j(scale · q[b, i, h, :] · k[b, j, h, :] + bias[b, h, i, j]) · v[b, j,
// h, :] over the keys j that are valid for (b, i): j < key_lengths[b] (when given), and with
// `causal` j <= i (top-left) or j <= i + S - L (bottom-right). A row without any valid key gets
// zeros and lse = -inf. lse[b, h, i] = log sum_j exp(logit_ij) (natural log), kept for the backward
// pass.
//
// q, k, v are read by strides, so that they can be views of one fused projection [B, L, 3, H, E]
// without a copy: element (b, i, h, e) of q is q[b * q_batch_stride + i * q_row_stride +
// h * q_head_stride + e] (the head dim is contiguous). The bias is read likewise, with stride 0 on
// a broadcast dimension ([1|B, 1|H, L, S]). It is float32 whatever the dtype of q: a finite bias
// stays finite (-1e9 in fp16 would be -inf, and a row masked by it would get zeros instead of
// float32 math's average).
struct FlashFwdParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;                   // [B, L, H, E], contiguous
  float* lse = nullptr;                  // [B, H, L], contiguous
  const float* bias = nullptr;           // optional, float32
  const int64_t* key_lengths = nullptr;  // optional, [B]

  int64_t batch = 0, heads = 0;
  int64_t q_len = 0, k_len = 0;  // L and S
  int64_t head_dim = 0;          // E, at most the kernel's padded head dim

  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t bias_batch_stride = 0, bias_head_stride = 0, bias_row_stride = 0;  // column stride 1

  float scale = 1.0f;  // usually 1 / sqrt(E)
  bool causal = false;
  bool causal_bottom_right = false;
};

// T is __half or __nv_bfloat16; kHeadDim is the padded head dim (32, 64, 96 or 128), E <= kHeadDim.
// The instantiations live in flash_fwd_<dtype>_hdim<kHeadDim>.cu. Launches on `stream` and returns
// without synchronising: cudaErrorInvalidConfiguration when the grid would exceed 2^31 - 1 blocks,
// the error of raising the kernel's dynamic shared memory limit, else cudaSuccess. The caller
// checks for launch errors.
template <typename T, int kHeadDim>
cudaError_t run_flash_fwd(const FlashFwdParams& params, cudaStream_t stream);

}  // namespace attnzoo::kernels
