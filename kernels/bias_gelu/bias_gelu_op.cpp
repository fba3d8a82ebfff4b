// Tier 3 of the bias + GELU epilogue, device-independent part: input checks, the LibTorch
// reference (registered for every backend without a fused kernel), the autograd formula, and the
// C++ entry point. The CUDA implementation is in bias_gelu_cuda.cpp.
#include <attnzoo/kernels/bias_gelu/bias_gelu_op.h>

#include <attnzoo/kernels/ops.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace attnzoo::kernels {
namespace {

using BiasGeluSignature = at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view);

const c10::TypedOperatorHandle<BiasGeluSignature>& bias_gelu_handle() {
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("attnzoo::bias_gelu", "")
                                 .typed<BiasGeluSignature>();
  return handle;
}

// Registered for all backends (CompositeExplicitAutograd): CPU and Meta (shape inference) always,
// and CUDA when the CUDA kernels are not built, so a CPU-only build still runs on GPU tensors.
// x: [..., N], bias: [N] -> [..., N]
at::Tensor bias_gelu_checked_reference(const at::Tensor& x, const at::Tensor& bias,
                                       c10::string_view approximate) {
  check_bias_gelu_inputs(x, bias, approximate);
  return bias_gelu_reference(x, bias, approximate);
}

// The backward is written with LibTorch ops rather than a kernel: it is as fast as the unfused
// reference's backward, and it is itself differentiable (double backward, gradcheck).
class BiasGeluFunction : public torch::autograd::Function<BiasGeluFunction> {
 public:
  // x: [..., N], bias: [N] -> [..., N]
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& bias, c10::string_view approximate) {
    // x and bias are kept alive anyway by their owners; saving z = x + bias instead would cost a
    // tensor of x's size per call.
    ctx->save_for_backward({x, bias});
    ctx->saved_data["approximate"] = std::string(approximate);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return bias_gelu_handle().call(x, bias, approximate);
  }

  // grad_outputs: {[..., N]} -> {[..., N], [N], none}
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& bias = saved[1];
    const std::string approximate = ctx->saved_data["approximate"].toStringRef();
    // d gelu(z) / dz * grad at z = x + bias; dz/dx = 1 and bias is broadcast over the rows.
    const at::Tensor grad_z = at::gelu_backward(grad_outputs[0], x + bias, approximate);
    at::Tensor grad_x;
    at::Tensor grad_bias;
    if (ctx->needs_input_grad(0)) {
      grad_x = grad_z;
    }
    if (ctx->needs_input_grad(1)) {
      grad_bias = grad_z.reshape({-1, grad_z.size(-1)}).sum(0);
    }
    return {grad_x, grad_bias, at::Tensor()};
  }
};

at::Tensor bias_gelu_autograd(const at::Tensor& x, const at::Tensor& bias,
                              c10::string_view approximate) {
  return BiasGeluFunction::apply(x, bias, approximate);
}

}  // namespace

void check_bias_gelu_inputs(const at::Tensor& x, const at::Tensor& bias,
                            c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh",
              "attnzoo::bias_gelu: approximate must be 'none' or 'tanh', got '", approximate, "'");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0,
              "attnzoo::bias_gelu: x must have shape [..., N] with N > 0, got shape ", x.sizes());
  TORCH_CHECK(x.is_floating_point(), "attnzoo::bias_gelu: x must be a floating-point tensor, got ",
              x.scalar_type());
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == x.size(-1),
              "attnzoo::bias_gelu: bias must be 1-D of shape [N] = [", x.size(-1),
              "] (N = last dim of x, shape ", x.sizes(), "), got shape ", bias.sizes());
  TORCH_CHECK(bias.scalar_type() == x.scalar_type(),
              "attnzoo::bias_gelu: bias must have x's dtype ", x.scalar_type(), ", got ",
              bias.scalar_type());
  TORCH_CHECK(bias.device() == x.device(), "attnzoo::bias_gelu: bias must be on x's device ",
              x.device(), ", got ", bias.device());
}

at::Tensor bias_gelu_reference(const at::Tensor& x, const at::Tensor& bias,
                               c10::string_view approximate) {
  return at::gelu(x + bias, approximate);
}

torch::Tensor bias_gelu(const torch::Tensor& x, const torch::Tensor& bias,
                        const std::string& approximate) {
  return bias_gelu_handle().call(x, bias, approximate);
}

}  // namespace attnzoo::kernels

TORCH_LIBRARY_IMPL(attnzoo, CompositeExplicitAutograd, m) {
  m.impl("bias_gelu", TORCH_FN(attnzoo::kernels::bias_gelu_checked_reference));
}

TORCH_LIBRARY_IMPL(attnzoo, Autograd, m) {
  m.impl("bias_gelu", TORCH_FN(attnzoo::kernels::bias_gelu_autograd));
}
