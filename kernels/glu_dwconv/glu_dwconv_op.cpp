// Tier 3 of the Conformer convolution module's middle (GLU -> depthwise conv1d -> folded
// BatchNorm -> Swish), device-independent part: input checks, the LibTorch reference (registered
// for every backend without a fused kernel), the autograd formula, and the C++ entry point. The
// CUDA implementation is in glu_dwconv_cuda.cpp.
#include <attnzoo/kernels/glu_dwconv/glu_dwconv_op.h>

#include <attnzoo/kernels/ops.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <array>

namespace attnzoo::kernels {
namespace {

using GluDwConvSignature = at::Tensor(const at::Tensor&, const at::Tensor&,
                                      const std::optional<at::Tensor>&, const at::Tensor&,
                                      const at::Tensor&, int64_t, const std::optional<at::Tensor>&);

const c10::TypedOperatorHandle<GluDwConvSignature>& glu_dwconv_handle() {
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("attnzoo::glu_dwconv_swish", "")
                                 .typed<GluDwConvSignature>();
  return handle;
}

// [B, 1, T] bool: true at the frames t >= lengths[b] that are zeroed before the convolution.
at::Tensor padded_frames(const at::Tensor& lengths, int64_t time, const at::Device& device) {
  const auto frames = at::arange(time, at::TensorOptions().dtype(at::kLong).device(device));
  return (frames.view({1, 1, time}) >= lengths.to(device, at::kLong).view({-1, 1, 1}));
}

// The module's [B, C, T] pipeline up to the convolution: the GLU of x's channels-first view,
// masked, zero-padded to T + K - 1 frames.
at::Tensor padded_glu(const at::Tensor& x_channels_first, int64_t kernel_size, int64_t left_pad,
                      const std::optional<at::Tensor>& lengths) {
  at::Tensor a = at::glu(x_channels_first, 1);  // [B, C, T]
  if (lengths) {
    a = a.masked_fill(padded_frames(*lengths, a.size(2), a.device()), 0.0);
  }
  return at::constant_pad_nd(a, {left_pad, kernel_size - 1 - left_pad}, 0.0);
}

// at::conv1d with groups = C: the depthwise convolution without padding of its own. Named
// arguments, because a literal padding 0 would also match conv1d's string-padding overload.
at::Tensor depthwise_conv1d(const at::Tensor& a, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias) {
  const int64_t one = 1;
  const int64_t zero = 0;
  return at::conv1d(a, weight.unsqueeze(1), bias, /*stride=*/at::IntArrayRef(one),
                    /*padding=*/at::IntArrayRef(zero), /*dilation=*/at::IntArrayRef(one),
                    /*groups=*/weight.size(0));
}

// Registered for all backends (CompositeExplicitAutograd): CPU and Meta (shape inference) always,
// and CUDA when the CUDA kernels are not built, so a CPU-only build still runs on GPU tensors.
at::Tensor glu_dwconv_checked_reference(const at::Tensor& x, const at::Tensor& weight,
                                        const std::optional<at::Tensor>& bias,
                                        const at::Tensor& scale, const at::Tensor& shift,
                                        int64_t left_pad,
                                        const std::optional<at::Tensor>& lengths) {
  check_glu_dwconv_swish_inputs(x, weight, bias, scale, shift, left_pad, lengths);
  return glu_dwconv_swish_reference(x, weight, bias, scale, shift, left_pad, lengths);
}

// The backward is LibTorch ops on the reference's formula, recomputing its intermediates from the
// saved inputs (the forward keeps none: inference is the target). Every op in it has a
// derivative, so the op also has a second derivative.
class GluDwConvFunction : public torch::autograd::Function<GluDwConvFunction> {
 public:
  // x: [B, T, 2C], weight: [C, K], bias, scale, shift: [C], lengths: [B] -> [B, T, C]
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            const at::Tensor& scale, const at::Tensor& shift, int64_t left_pad,
                            const std::optional<at::Tensor>& lengths) {
    ctx->save_for_backward(
        {x, weight, bias.value_or(at::Tensor()), scale, shift, lengths.value_or(at::Tensor())});
    ctx->saved_data["left_pad"] = left_pad;
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return glu_dwconv_handle().call(x, weight, bias, scale, shift, left_pad, lengths);
  }

  // grad_outputs: {[B, T, C]} -> {[B, T, 2C], [C, K], [C], [C], [C], none, none}
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const std::optional<at::Tensor> bias =
        saved[2].defined() ? std::optional<at::Tensor>(saved[2]) : std::nullopt;
    const at::Tensor& scale = saved[3];
    const at::Tensor& shift = saved[4];
    const std::optional<at::Tensor> lengths =
        saved[5].defined() ? std::optional<at::Tensor>(saved[5]) : std::nullopt;
    const int64_t left_pad = ctx->saved_data["left_pad"].toInt();
    // needs_input_grad counts only the tensors that were passed (an absent optional has no edge).
    const bool need_x = ctx->needs_input_grad(0);
    const bool need_weight = ctx->needs_input_grad(1);
    const bool need_bias = bias && ctx->needs_input_grad(2);
    const bool need_scale = ctx->needs_input_grad(bias ? 3 : 2);
    const bool need_shift = ctx->needs_input_grad(bias ? 4 : 3);

    const int64_t channels = weight.size(0);
    const int64_t kernel_size = weight.size(1);
    const int64_t time = x.size(1);
    const auto per_channel = [](const at::Tensor& t) { return t.view({1, -1, 1}); };
    const at::Tensor x_cf = x.transpose(1, 2);  // [B, 2C, T]
    const at::Tensor a = padded_glu(x_cf, kernel_size, left_pad, lengths);
    const at::Tensor conv = depthwise_conv1d(a, weight, bias);
    const at::Tensor v = conv * per_channel(scale) + per_channel(shift);
    // d silu(v) / dv = s (1 + v (1 - s)), s = sigmoid(v)
    const at::Tensor s = at::sigmoid(v);
    const at::Tensor grad_v = grad_outputs[0].transpose(1, 2) * (s * (1 + v * (1 - s)));

    at::Tensor grad_x, grad_weight, grad_bias, grad_scale, grad_shift;
    if (need_scale) {
      grad_scale = (grad_v * conv).sum(at::IntArrayRef{0, 2});
    }
    if (need_shift) {
      grad_shift = grad_v.sum(at::IntArrayRef{0, 2});
    }
    if (need_x || need_weight || need_bias) {
      const at::Tensor grad_conv = grad_v * per_channel(scale);
      const std::array<int64_t, 1> bias_size{channels};
      const at::OptionalIntArrayRef bias_sizes =
          bias ? at::OptionalIntArrayRef(at::IntArrayRef(bias_size)) : at::OptionalIntArrayRef();
      const std::array<int64_t, 1> one{1};
      const std::array<int64_t, 1> zero{0};
      auto [grad_a, grad_w, grad_b] = at::convolution_backward(
          grad_conv, a, weight.unsqueeze(1), bias_sizes, /*stride=*/one, /*padding=*/zero,
          /*dilation=*/one, /*transposed=*/false, /*output_padding=*/zero, /*groups=*/channels,
          std::array<bool, 3>{need_x, need_weight, need_bias});
      if (need_x) {
        grad_a = grad_a.narrow(2, left_pad, time);  // the padding frames have no input
        if (lengths) {
          grad_a = grad_a.masked_fill(padded_frames(*lengths, time, grad_a.device()), 0.0);
        }
        grad_x = at::glu_backward(grad_a, x_cf, 1).transpose(1, 2);
      }
      if (need_weight) {
        grad_weight = grad_w.reshape({channels, kernel_size});
      }
      if (need_bias) {
        grad_bias = grad_b;
      }
    }
    return {grad_x, grad_weight, grad_bias, grad_scale, grad_shift, at::Tensor(), at::Tensor()};
  }
};

at::Tensor glu_dwconv_autograd(const at::Tensor& x, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, const at::Tensor& scale,
                               const at::Tensor& shift, int64_t left_pad,
                               const std::optional<at::Tensor>& lengths) {
  return GluDwConvFunction::apply(x, weight, bias, scale, shift, left_pad, lengths);
}

void check_parameter(const at::Tensor& x, const at::Tensor& p, const char* name) {
  const int64_t channels = x.size(-1) / 2;
  TORCH_CHECK(p.dim() == 1 && p.size(0) == channels, "attnzoo::glu_dwconv_swish: ", name,
              " must be 1-D of shape [C] = [", channels, "] (C = half the last dim of x, shape ",
              x.sizes(), "), got shape ", p.sizes());
  TORCH_CHECK(p.scalar_type() == x.scalar_type(), "attnzoo::glu_dwconv_swish: ", name,
              " must have x's dtype ", x.scalar_type(), ", got ", p.scalar_type());
  TORCH_CHECK(p.device() == x.device(), "attnzoo::glu_dwconv_swish: ", name,
              " must be on x's device ", x.device(), ", got ", p.device());
}

}  // namespace

void check_glu_dwconv_swish_inputs(const at::Tensor& x, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, const at::Tensor& scale,
                                   const at::Tensor& shift, int64_t left_pad,
                                   const std::optional<at::Tensor>& lengths) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) > 0 && x.size(2) % 2 == 0,
              "attnzoo::glu_dwconv_swish: x must be [B, T, 2C] with an even last dim 2C > 0, got "
              "shape ",
              x.sizes());
  TORCH_CHECK(x.is_floating_point(),
              "attnzoo::glu_dwconv_swish: x must be a floating-point tensor, got ",
              x.scalar_type());
  const int64_t channels = x.size(2) / 2;
  TORCH_CHECK(weight.dim() == 2 && weight.size(0) == channels && weight.size(1) > 0,
              "attnzoo::glu_dwconv_swish: weight must be [C, K] = [", channels,
              ", K >= 1] (C = half the last dim of x, shape ", x.sizes(), "), got shape ",
              weight.sizes());
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(),
              "attnzoo::glu_dwconv_swish: weight must have x's dtype ", x.scalar_type(), ", got ",
              weight.scalar_type());
  TORCH_CHECK(weight.device() == x.device(),
              "attnzoo::glu_dwconv_swish: weight must be on x's device ", x.device(), ", got ",
              weight.device());
  if (bias) {
    check_parameter(x, *bias, "bias");
  }
  check_parameter(x, scale, "scale");
  check_parameter(x, shift, "shift");
  const int64_t kernel_size = weight.size(1);
  TORCH_CHECK(left_pad >= 0 && left_pad < kernel_size,
              "attnzoo::glu_dwconv_swish: left_pad must be in [0, K - 1] = [0, ", kernel_size - 1,
              "] (K = weight.size(1)), got ", left_pad);
  if (lengths) {
    TORCH_CHECK(lengths->dim() == 1 && lengths->size(0) == x.size(0) &&
                    !lengths->is_floating_point() && !lengths->is_complex() &&
                    lengths->scalar_type() != at::kBool,
                "attnzoo::glu_dwconv_swish: lengths must be integer [B] = [", x.size(0), "], got ",
                lengths->scalar_type(), " ", lengths->sizes());
    TORCH_CHECK(lengths->device() == x.device(),
                "attnzoo::glu_dwconv_swish: lengths must be on x's device ", x.device(), ", got ",
                lengths->device());
  }
}

at::Tensor glu_dwconv_swish_reference(const at::Tensor& x, const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias,
                                      const at::Tensor& scale, const at::Tensor& shift,
                                      int64_t left_pad, const std::optional<at::Tensor>& lengths) {
  if (x.is_meta()) {
    // LibTorch's C++ convolution has no meta kernel (Python's comes from a decomposition).
    return at::empty({x.size(0), x.size(1), weight.size(0)}, x.options());
  }
  const at::Tensor a = padded_glu(x.transpose(1, 2), weight.size(1), left_pad, lengths);
  const at::Tensor conv = depthwise_conv1d(a, weight, bias);
  const at::Tensor v = conv * scale.view({1, -1, 1}) + shift.view({1, -1, 1});
  return at::silu(v).transpose(1, 2).contiguous();  // [B, T, C]
}

torch::Tensor glu_dwconv_swish(const torch::Tensor& x, const torch::Tensor& weight,
                               const std::optional<torch::Tensor>& bias, const torch::Tensor& scale,
                               const torch::Tensor& shift, int64_t left_pad,
                               const std::optional<torch::Tensor>& lengths) {
  return glu_dwconv_handle().call(x, weight, bias, scale, shift, left_pad, lengths);
}

}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CompositeExplicitAutograd, m) {
  m.impl("glu_dwconv_swish", TORCH_FN(attnzoo::kernels::glu_dwconv_checked_reference));
}

TORCH_LIBRARY_IMPL(attnzoo, Autograd, m) {
  m.impl("glu_dwconv_swish", TORCH_FN(attnzoo::kernels::glu_dwconv_autograd));
}
