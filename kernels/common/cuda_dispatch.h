#pragma once
// What the CUDA parts of the ops layer (<op>/<op>_cuda.cpp) share: the row-stride rule of the
// elementwise kernels and the dtype switch from at::ScalarType to the kernels' storage types.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <optional>

namespace attnzoo::kernels::detail {

// The elementwise kernels read a tensor as [rows, N] rows of contiguous elements, one row stride
// apart. That covers contiguous tensors and slices of wider rows (x[..., a:b]) without a copy;
// nullopt when the leading dims do not collapse into one stride (transposes, permutes), which
// the caller copies. Rows broadcast along a dim (stride 0) collapse to row stride 0.
inline std::optional<int64_t> collapsed_row_stride(const at::Tensor& x) {
  const int64_t cols = x.size(-1);
  if (cols > 1 && x.stride(-1) != 1) return std::nullopt;
  std::optional<int64_t> row_stride;
  int64_t next_stride = 0;  // the stride the next outer dim must have to continue the rows
  for (int64_t d = x.dim() - 2; d >= 0; --d) {
    if (x.size(d) == 1) continue;  // a size-1 dim's stride is never used
    if (!row_stride) {
      row_stride = x.stride(d);
    } else if (x.stride(d) != next_stride) {
      return std::nullopt;
    }
    next_stride = x.stride(d) * x.size(d);
  }
  return row_stride.value_or(cols);  // a single row: its stride is never used
}

// fn(T{}) for the storage type T of `dtype` (float, __half, __nv_bfloat16); any other dtype is an
// error naming `op`.
template <typename Fn>
void dispatch_float_types(at::ScalarType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case at::kFloat:
      fn(float{});
      break;
    case at::kHalf:
      fn(__half{});
      break;
    case at::kBFloat16:
      fn(__nv_bfloat16{});
      break;
    default:
      TORCH_CHECK(false, op, " (CUDA): expected float32, float16 or bfloat16, got ", dtype);
  }
}

}  // namespace attnzoo::kernels::detail
