#include <attnzoo/layers/activation.h>

#include <torch/torch.h>

namespace attnzoo {

const char* to_string(Activation activation) {
  switch (activation) {
    case Activation::kNone:
      return "none";
    case Activation::kGelu:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kSilu:
      return "silu";
    case Activation::kRelu:
      return "relu";
  }
  return "?";
}

torch::Tensor apply_activation(const torch::Tensor& y, Activation activation) {
  switch (activation) {
    case Activation::kGelu:
      return torch::gelu(y);
    case Activation::kGeluTanh:
      return torch::gelu(y, "tanh");
    case Activation::kSilu:
      return torch::silu(y);
    case Activation::kRelu:
      return torch::relu(y);
    case Activation::kNone:
      break;
  }
  return y;
}

}  // namespace attnzoo
