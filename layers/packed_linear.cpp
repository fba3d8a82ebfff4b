#include <attnzoo/kernels/ops.h>
#include <attnzoo/layers/cpu_features.h>
#include <attnzoo/layers/environment_switch.h>
#include <attnzoo/layers/packed_linear.h>

#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/InferenceMode.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>

namespace attnzoo {
namespace {

using detail::on_unless_environment;

// ATTNZOO_PACKED_LINEAR=0 turns the fast path off, e.g. to measure what it brings.
std::atomic<bool> g_enabled{on_unless_environment("ATTNZOO_PACKED_LINEAR", "0")};
// ATTNZOO_INT8_FALLBACK=0 runs every int8 call in int8, e.g. to measure int8's accuracy alone.
std::atomic<bool> g_int8_fallback{on_unless_environment("ATTNZOO_INT8_FALLBACK", "0")};
// ATTNZOO_LINEAR_CPU=onednn keeps every float32 call on oneDNN's product, e.g. to compare.
std::atomic<bool> g_own_kernel{on_unless_environment("ATTNZOO_LINEAR_CPU", "onednn")};

// oneDNN's linear ops, as LibTorch registers them for its own CPU graph compiler; absent from a
// LibTorch built without oneDNN.
struct OneDnnOps {
  std::optional<c10::OperatorHandle> linear, reorder;
};

const OneDnnOps& onednn_ops() {
  static const OneDnnOps ops = [] {
    OneDnnOps o;
    auto& dispatcher = c10::Dispatcher::singleton();
    o.linear = dispatcher.findSchema({"mkldnn::_linear_pointwise", ""});
    o.reorder = dispatcher.findSchema({"mkldnn::_reorder_linear_weight", ""});
    return o;
  }();
  return ops;
}

// Whether oneDNN reorders and multiplies bfloat16 weights on this CPU: it asks for AVX-512 (BW, VL
// and DQ) or AVX-NE-CONVERT, and refuses otherwise (mkldnn_reorder_linear_weight: "bf16 path needs
// the cpu support ..."). Elsewhere bfloat16 takes LibTorch's own linear.
bool onednn_bf16_supported() {
  static const bool supported = (detail::cpu_has("avx512_bw") && detail::cpu_has("avx512_vl") &&
                                 detail::cpu_has("avx512_dq")) ||
                                detail::cpu_has("avx_ne_convert");
  return supported;
}

// Whether autograd records a call with x and weight.
bool recording(const torch::Tensor& x, const torch::Tensor& weight) {
  return torch::GradMode::is_enabled() && !c10::InferenceMode::is_enabled() &&
         (x.requires_grad() || weight.requires_grad());
}

}  // namespace

void PackedLinear::set_enabled(bool enabled) { g_enabled = enabled; }

void PackedLinear::set_int8_fallback(bool enabled) { g_int8_fallback = enabled; }

bool PackedLinear::int8_pays(int64_t rows, int64_t in_features, int64_t out_features) {
  return !g_int8_fallback || std::min(in_features, out_features) >= kInt8MinWidth ||
         rows <= kInt8MaxNarrowRows;
}

void PackedLinear::set_own_kernel(bool enabled) { g_own_kernel = enabled; }

bool PackedLinear::own_kernel_pays(int64_t in_features, int64_t out_features) {
  return in_features <= kOwnKernelMaxIn && out_features <= kOwnKernelMaxOut &&
         out_features % 32 == 0;
}

bool PackedLinear::applies(const torch::Tensor& x, const torch::Tensor& weight) {
  if (!g_enabled || !at::hasMKLDNN() || !at::globalContext().userEnabledMkldnn()) return false;
  const auto& ops = onednn_ops();
  if (!ops.linear || !ops.reorder) return false;
  const auto dtype = x.scalar_type();
  return !recording(x, weight) && x.device().is_cpu() && weight.device().is_cpu() && x.dim() >= 2 &&
         (dtype == torch::kFloat || (dtype == torch::kBFloat16 && onednn_bf16_supported())) &&
         weight.scalar_type() == dtype && x.numel() > 0;
}

bool PackedLinear::cached(const torch::Tensor& weight) const {
  // Inference tensors (made under InferenceMode) have no version counter: only their storage
  // tells a new weight from the old one.
  const uint32_t version = weight.is_inference() ? 0 : weight._version();
  return data_ == weight.data_ptr() && version_ == version && dtype_ == weight.scalar_type();
}

void PackedLinear::remember(const torch::Tensor& weight) const {
  data_ = weight.data_ptr();
  version_ = weight.is_inference() ? 0 : weight._version();
  dtype_ = weight.scalar_type();
}

// The two caches (an int8 layer keeps both: int8_pays sends some calls to the float path) belong
// to one weight; another weight empties both.
void PackedLinear::forget_other_weight(const torch::Tensor& weight) const {
  if (cached(weight)) return;
  packed_ = torch::Tensor();
  panels_ = torch::Tensor();
  quantized_ = {};
  remember(weight);
}

torch::Tensor PackedLinear::packed(const torch::Tensor& weight) const {
  std::lock_guard<std::mutex> lock(mutex_);
  forget_other_weight(weight);
  if (!packed_.defined()) {
    torch::NoGradGuard no_grad;
    std::vector<c10::IValue> stack{weight.detach().contiguous(), c10::IValue()};
    onednn_ops().reorder->callBoxed(&stack);
    packed_ = stack.at(0).toTensor();
  }
  return packed_;
}

torch::Tensor PackedLinear::panels(const torch::Tensor& weight) const {
  std::lock_guard<std::mutex> lock(mutex_);
  forget_other_weight(weight);
  if (!panels_.defined()) panels_ = kernels::pack_linear_weight_cpu(weight.detach());
  return panels_;
}

Int8Weight PackedLinear::quantized(const torch::Tensor& weight) const {
  std::lock_guard<std::mutex> lock(mutex_);
  forget_other_weight(weight);
  if (!quantized_.weight_t.defined()) quantized_ = quantize_weight_int8(weight);
  return quantized_;
}

bool PackedLinear::runs_int8(const torch::Tensor& x, const torch::Tensor& weight,
                             int64_t rows) const {
  if (!int8_ || recording(x, weight)) return false;
  TORCH_CHECK_VALUE(x.device().is_cpu() && weight.device().is_cpu(),
                    "int8 inference (inference.quantize: int8) runs on the CPU; this layer's "
                    "input is on ",
                    x.device().str(), " and its weight on ", weight.device().str());
  TORCH_CHECK_VALUE((x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16) &&
                        weight.scalar_type() == x.scalar_type(),
                    "int8 inference (inference.quantize: int8) takes a float32 or bfloat16 "
                    "model, got input ",
                    x.scalar_type(), " and weight ", weight.scalar_type());
  return int8_pays(rows, weight.size(1), weight.size(0));
}

std::optional<torch::Tensor> PackedLinear::int8_pair(
    const PackedLinear& first, const torch::nn::Linear& first_linear, const PackedLinear& second,
    const torch::nn::Linear& second_linear, const torch::Tensor& x, Activation activation) {
  const auto& w1 = first_linear->weight;
  const auto& w2 = second_linear->weight;
  const int64_t rows = x.size(-1) == 0 ? 0 : x.numel() / x.size(-1);
  if (!first.runs_int8(x, w1, rows) || !second.runs_int8(x, w2, rows)) return std::nullopt;
  const auto hidden = int8_linear_to_rows(x, first.quantized(w1), first_linear->bias, activation);
  auto sizes = x.sizes().vec();
  sizes.back() = w2.size(0);
  return int8_linear(hidden, second.quantized(w2), second_linear->bias, Activation::kNone,
                     x.scalar_type())
      .view(sizes);
}

torch::Tensor PackedLinear::operator()(const torch::nn::Linear& linear, const torch::Tensor& x,
                                       Activation activation) const {
  const auto& weight = linear->weight;
  const int64_t rows = x.size(-1) == 0 ? 0 : x.numel() / x.size(-1);
  if (runs_int8(x, weight, rows)) {
    return int8_linear(x, quantized(weight), linear->bias, activation);
  }
  if (!applies(x, weight))
    return apply_activation(torch::linear(x, weight, linear->bias), activation);
  const auto& bias = linear->bias;
  if (x.scalar_type() == torch::kFloat && g_own_kernel && kernels::linear_packed_cpu_available() &&
      own_kernel_pays(weight.size(1), weight.size(0))) {
    return kernels::linear_packed_cpu(
        x, panels(weight), weight.size(0),
        bias.defined() ? std::optional<torch::Tensor>(bias.detach()) : std::nullopt,
        to_string(activation));
  }
  c10::List<std::optional<at::Scalar>> scalars;
  std::string attr = "none", algorithm;  // as LibTorch's CPU graph compiler calls it
  switch (activation) {
    case Activation::kGelu:
    case Activation::kGeluTanh:
      attr = "gelu";
      scalars.push_back(std::nullopt);
      algorithm = activation == Activation::kGelu ? "none" : "tanh";
      break;
    case Activation::kSilu:
      attr = "swish";
      break;
    case Activation::kRelu:
      attr = "relu";
      break;
    case Activation::kNone:
      break;
  }
  std::vector<c10::IValue> stack{x.contiguous(),
                                 packed(weight),
                                 bias.defined() ? c10::IValue(bias.detach()) : c10::IValue(),
                                 c10::IValue(attr),
                                 c10::IValue(scalars),
                                 c10::IValue(algorithm)};
  onednn_ops().linear->callBoxed(&stack);
  return stack.at(0).toTensor();
}

}  // namespace attnzoo
