// Tier 3 of flash attention, CUDA part: turns tensors into FlashFwdParams and calls the launcher
// of tier 2 for bf16 and fp16 with head dims up to 128 (padded up to 32, 64, 96 or 128: E = 36,
// the Conformer's, runs the 64 kernel); other dtypes and larger head dims take the LibTorch
// reference. Compiled only when the CUDA kernels are built (ATTNZOO_WITH_CUDA).
#include "kernels/flash_attn/flash_attn_op.h"
#include "kernels/flash_attn/flash_fwd_params.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

namespace attnzoo::kernels {
namespace {

// The head dim contiguous (stride 1), as the kernel reads it; else a copy.
at::Tensor head_dim_contiguous(const at::Tensor& x) {
  return x.size(-1) == 1 || x.stride(-1) == 1 ? x : x.contiguous();
}

template <typename T>
void launch(const FlashFwdParams& params, int64_t padded, cudaStream_t stream) {
  switch (padded) {
    case 32:
      run_flash_fwd<T, 32>(params, stream);
      break;
    case 64:
      run_flash_fwd<T, 64>(params, stream);
      break;
    case 96:
      run_flash_fwd<T, 96>(params, stream);
      break;
    default:
      run_flash_fwd<T, 128>(params, stream);
      break;
  }
}

std::tuple<at::Tensor, at::Tensor> flash_attention_cuda(
    const at::Tensor& q_arg, const at::Tensor& k_arg, const at::Tensor& v_arg,
    const std::optional<at::Tensor>& key_lengths, const std::optional<at::Tensor>& bias_arg,
    bool causal, bool bottom_right, std::optional<double> scale_arg) {
  check_flash_attention_inputs(q_arg, k_arg, v_arg, key_lengths, bias_arg);
  const int64_t head_dim = q_arg.size(3);
  const double scale = scale_arg.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  const bool supported =
      (q_arg.scalar_type() == at::kHalf || q_arg.scalar_type() == at::kBFloat16) && head_dim <= 128;
  if (!supported) {
    return flash_attention_reference(q_arg, k_arg, v_arg, key_lengths, bias_arg, causal,
                                     bottom_right, scale);
  }
  const c10::cuda::CUDAGuard device_guard(q_arg.device());
  const auto q = head_dim_contiguous(q_arg);
  const auto k = head_dim_contiguous(k_arg);
  const auto v = head_dim_contiguous(v_arg);
  const int64_t B = q.size(0), L = q.size(1), H = q.size(2), S = k.size(1);
  auto out = at::empty({B, L, H, head_dim}, q.options());
  auto lse = at::empty({B, H, L}, q.options().dtype(at::kFloat));
  if (out.numel() == 0) return {out, lse};

  FlashFwdParams p;
  p.q = q.const_data_ptr();
  p.k = k.const_data_ptr();
  p.v = v.const_data_ptr();
  p.out = out.mutable_data_ptr();
  p.lse = lse.mutable_data_ptr<float>();
  p.batch = B;
  p.heads = H;
  p.q_len = L;
  p.k_len = S;
  p.head_dim = head_dim;
  p.q_batch_stride = q.stride(0);
  p.q_row_stride = q.stride(1);
  p.q_head_stride = q.stride(2);
  p.k_batch_stride = k.stride(0);
  p.k_row_stride = k.stride(1);
  p.k_head_stride = k.stride(2);
  p.v_batch_stride = v.stride(0);
  p.v_row_stride = v.stride(1);
  p.v_head_stride = v.stride(2);
  at::Tensor lengths, bias;
  if (key_lengths) {
    lengths = key_lengths->to(at::kLong).contiguous();
    p.key_lengths = lengths.const_data_ptr<int64_t>();
  }
  if (bias_arg) {
    bias = bias_arg->stride(3) == 1 ? *bias_arg : bias_arg->contiguous();
    p.bias = bias.const_data_ptr();
    p.bias_batch_stride = bias.size(0) == 1 ? 0 : bias.stride(0);
    p.bias_head_stride = bias.size(1) == 1 ? 0 : bias.stride(1);
    p.bias_row_stride = bias.stride(2);
  }
  p.scale = static_cast<float>(scale);
  p.causal = causal;
  p.causal_bottom_right = bottom_right;

  const int64_t padded = head_dim <= 32 ? 32 : head_dim <= 64 ? 64 : head_dim <= 96 ? 96 : 128;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (q.scalar_type() == at::kHalf) {
    launch<__half>(p, padded, stream);
  } else {
    launch<__nv_bfloat16>(p, padded, stream);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out, lse};
}

}  // namespace
}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CUDA, m) {
  m.impl("flash_attention", TORCH_FN(attnzoo::kernels::flash_attention_cuda));
}
