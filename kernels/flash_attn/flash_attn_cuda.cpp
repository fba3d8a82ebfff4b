// Tier 3 of flash attention, CUDA part: turns tensors into FlashFwdParams / FlashBwdParams and
// calls the launchers of tier 2 for bf16 and fp16 with head dims up to 128 (padded up to 32, 64, 96
// or 128: E = 36, the Conformer's, runs the 64 kernels); other dtypes and larger head dims take the
// LibTorch references. Compiled only when the CUDA kernels are built (ATTNZOO_WITH_CUDA).
#include <attnzoo/kernels/flash_attn/flash_attn_op.h>
#include <attnzoo/kernels/flash_attn/flash_bwd_params.h>
#include <attnzoo/kernels/flash_attn/flash_fwd_params.h>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

namespace attnzoo::kernels {
namespace {

// The head dim contiguous (stride 1), as the kernel reads it; else a copy.
at::Tensor head_dim_contiguous(const at::Tensor& x) {
  return x.size(-1) == 1 || x.stride(-1) == 1 ? x : x.contiguous();
}

int64_t padded_head_dim(int64_t head_dim) {
  return head_dim <= 32 ? 32 : head_dim <= 64 ? 64 : head_dim <= 96 ? 96 : 128;
}

// fn(std::integral_constant<int, D>{}) for the padded head dim D (32, 64, 96 or 128) of the
// instantiated kernels.
template <typename Fn>
void dispatch_head_dim(int64_t padded, Fn&& fn) {
  switch (padded) {
    case 32:
      fn(std::integral_constant<int, 32>{});
      break;
    case 64:
      fn(std::integral_constant<int, 64>{});
      break;
    case 96:
      fn(std::integral_constant<int, 96>{});
      break;
    default:
      fn(std::integral_constant<int, 128>{});
      break;
  }
}

// The bias in float32 with its column stride 1, as the kernels read it. A dim of stride 0 (a bias
// expanded along L, or along S) stays a zero stride: only the distinct values are converted.
at::Tensor float_bias(const at::Tensor& bias) {
  if (bias.scalar_type() == at::kFloat && bias.stride(3) == 1) return bias;
  at::Tensor distinct = bias;
  for (int64_t d = 0; d < bias.dim(); ++d) {
    if (bias.stride(d) == 0 && bias.size(d) > 1) distinct = distinct.narrow(d, 0, 1);
  }
  auto converted = distinct.to(at::kFloat).contiguous().expand(bias.sizes());
  // Expanded along the columns: the kernels need stride 1 there, so those are materialised.
  return converted.stride(3) == 1 ? converted : converted.contiguous();
}

// What FlashFwdParams and FlashBwdParams share: sizes, q/k/v strides (the head dim contiguous),
// key lengths (as int64 in `lengths`), the bias in float32 with zero strides on its broadcast
// dims (in `bias`, its column stride 1), the scale and the causal mode.
template <typename Params>
void fill_shared_params(Params& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const std::optional<at::Tensor>& key_lengths,
                        const std::optional<at::Tensor>& bias_arg, bool causal, bool bottom_right,
                        double scale, at::Tensor& lengths, at::Tensor& bias) {
  p.batch = q.size(0);
  p.q_len = q.size(1);
  p.heads = q.size(2);
  p.k_len = k.size(1);
  p.head_dim = q.size(3);
  p.q_batch_stride = q.stride(0);
  p.q_row_stride = q.stride(1);
  p.q_head_stride = q.stride(2);
  p.k_batch_stride = k.stride(0);
  p.k_row_stride = k.stride(1);
  p.k_head_stride = k.stride(2);
  p.v_batch_stride = v.stride(0);
  p.v_row_stride = v.stride(1);
  p.v_head_stride = v.stride(2);
  if (key_lengths) {
    lengths = key_lengths->to(at::kLong).contiguous();
    p.key_lengths = lengths.const_data_ptr<int64_t>();
  }
  if (bias_arg) {
    bias = float_bias(*bias_arg);
    p.bias = bias.const_data_ptr<float>();
    p.bias_batch_stride = bias.size(0) == 1 ? 0 : bias.stride(0);
    p.bias_head_stride = bias.size(1) == 1 ? 0 : bias.stride(1);
    p.bias_row_stride = bias.stride(2);
  }
  p.scale = static_cast<float>(scale);
  p.causal = causal;
  p.causal_bottom_right = bottom_right;
}

// A launcher's refusal as an error that names the op and the shapes.
void check_launch(cudaError_t status, const char* op, const at::Tensor& q, const at::Tensor& k) {
  TORCH_CHECK(status != cudaErrorInvalidConfiguration, op, ": q ", q.sizes(), " and k ", k.sizes(),
              " need more than 2^31 - 1 blocks of 64 rows (B·H·ceil(L/64) or B·H·ceil(S/64))");
  TORCH_CHECK(status == cudaSuccess, op,
              ": cudaFuncSetAttribute (dynamic shared memory above 48 KB) failed: ",
              cudaGetErrorString(status));
}

template <typename T>
cudaError_t launch(const FlashFwdParams& params, int64_t padded, cudaStream_t stream) {
  cudaError_t status = cudaSuccess;
  dispatch_head_dim(padded,
                    [&](auto d) { status = run_flash_fwd<T, decltype(d)::value>(params, stream); });
  return status;
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
  const int64_t B = q.size(0), L = q.size(1), H = q.size(2);
  auto out = at::empty({B, L, H, head_dim}, q.options());
  auto lse = at::empty({B, H, L}, q.options().dtype(at::kFloat));
  if (out.numel() == 0) return {out, lse};

  FlashFwdParams p;
  p.q = q.const_data_ptr();
  p.k = k.const_data_ptr();
  p.v = v.const_data_ptr();
  p.out = out.mutable_data_ptr();
  p.lse = lse.mutable_data_ptr<float>();
  at::Tensor lengths, bias;  // kept alive until the launch
  fill_shared_params(p, q, k, v, key_lengths, bias_arg, causal, bottom_right, scale, lengths, bias);

  const int64_t padded = padded_head_dim(head_dim);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  check_launch(q.scalar_type() == at::kHalf ? launch<__half>(p, padded, stream)
                                            : launch<__nv_bfloat16>(p, padded, stream),
               "attnzoo::flash_attention", q, k);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out, lse};
}

template <typename T>
cudaError_t launch_backward(const FlashBwdParams& params, int64_t padded, cudaStream_t stream) {
  cudaError_t status = cudaSuccess;
  dispatch_head_dim(padded,
                    [&](auto d) { status = run_flash_bwd<T, decltype(d)::value>(params, stream); });
  return status;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, std::optional<at::Tensor>>
flash_attention_backward_cuda(const at::Tensor& q_arg, const at::Tensor& k_arg,
                              const at::Tensor& v_arg, const at::Tensor& out_arg,
                              const at::Tensor& d_out_arg, const at::Tensor& lse_arg,
                              const std::optional<at::Tensor>& key_lengths,
                              const std::optional<at::Tensor>& bias_arg, bool causal,
                              bool bottom_right, std::optional<double> scale_arg,
                              bool bias_requires_grad) {
  check_flash_attention_backward_inputs(q_arg, k_arg, v_arg, out_arg, d_out_arg, lse_arg,
                                        key_lengths, bias_arg);
  const int64_t head_dim = q_arg.size(3);
  const double scale = scale_arg.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  const bool supported =
      (q_arg.scalar_type() == at::kHalf || q_arg.scalar_type() == at::kBFloat16) && head_dim <= 128;
  if (!supported) {
    return flash_attention_backward_reference(q_arg, k_arg, v_arg, out_arg, d_out_arg, key_lengths,
                                              bias_arg, causal, bottom_right, scale,
                                              bias_requires_grad);
  }
  const c10::cuda::CUDAGuard device_guard(q_arg.device());
  const auto q = head_dim_contiguous(q_arg);
  const auto k = head_dim_contiguous(k_arg);
  const auto v = head_dim_contiguous(v_arg);
  const auto out = head_dim_contiguous(out_arg);
  const auto d_out = head_dim_contiguous(d_out_arg);
  const auto lse = lse_arg.contiguous();
  const int64_t B = q.size(0), L = q.size(1), H = q.size(2), S = k.size(1);
  auto dq = at::empty({B, L, H, head_dim}, q.options());
  auto dk = at::empty({B, S, H, head_dim}, q.options());
  auto dv = at::empty({B, S, H, head_dim}, q.options());
  std::optional<at::Tensor> d_bias;
  // Zeros, float32: the kernel writes d_bias only where a key is visible, and adds to it where
  // the bias is broadcast. Returned in the bias's dtype.
  if (bias_arg && bias_requires_grad) {
    d_bias = at::zeros(bias_arg->sizes(), q.options().dtype(at::kFloat));
  }
  const auto bias_dtype = [&](std::optional<at::Tensor> grad) {
    if (grad && bias_arg) *grad = grad->to(bias_arg->scalar_type());
    return grad;
  };
  if (q.numel() == 0 || k.numel() == 0) {
    dq.zero_();
    dk.zero_();
    dv.zero_();
    return {dq, dk, dv, bias_dtype(d_bias)};
  }
  auto dq_accum = at::zeros({B, L, H, head_dim}, q.options().dtype(at::kFloat));
  auto d_rowsum = at::empty({B, H, L}, q.options().dtype(at::kFloat));

  FlashBwdParams p;
  p.q = q.const_data_ptr();
  p.k = k.const_data_ptr();
  p.v = v.const_data_ptr();
  p.out = out.const_data_ptr();
  p.d_out = d_out.const_data_ptr();
  p.lse = lse.const_data_ptr<float>();
  p.dq = dq.mutable_data_ptr();
  p.dk = dk.mutable_data_ptr();
  p.dv = dv.mutable_data_ptr();
  p.dq_accum = dq_accum.mutable_data_ptr<float>();
  p.d_rowsum = d_rowsum.mutable_data_ptr<float>();
  p.out_batch_stride = out.stride(0);
  p.out_row_stride = out.stride(1);
  p.out_head_stride = out.stride(2);
  p.do_batch_stride = d_out.stride(0);
  p.do_row_stride = d_out.stride(1);
  p.do_head_stride = d_out.stride(2);
  at::Tensor lengths, bias;  // kept alive until the launch
  fill_shared_params(p, q, k, v, key_lengths, bias_arg, causal, bottom_right, scale, lengths, bias);
  if (d_bias) {
    const int64_t bias_b = d_bias->size(0), bias_h = d_bias->size(1);
    p.d_bias = d_bias->mutable_data_ptr<float>();
    p.d_bias_batch_stride = bias_b == 1 ? 0 : d_bias->stride(0);
    p.d_bias_head_stride = bias_h == 1 ? 0 : d_bias->stride(1);
    p.d_bias_row_stride = d_bias->stride(2);
    p.d_bias_broadcast = (bias_b == 1 && B > 1) || (bias_h == 1 && H > 1);
  }

  const int64_t padded = padded_head_dim(head_dim);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  check_launch(q.scalar_type() == at::kHalf ? launch_backward<__half>(p, padded, stream)
                                            : launch_backward<__nv_bfloat16>(p, padded, stream),
               "attnzoo::flash_attention_backward", q, k);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {dq, dk, dv, bias_dtype(d_bias)};
}

}  // namespace
}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CUDA, m) {
  m.impl("flash_attention", TORCH_FN(attnzoo::kernels::flash_attention_cuda));
  m.impl("flash_attention_backward", TORCH_FN(attnzoo::kernels::flash_attention_backward_cuda));
}
