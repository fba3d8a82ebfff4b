#include <attnzoo/layers/init.h>

#include <cmath>

namespace attnzoo {

torch::Tensor trunc_normal_(torch::Tensor tensor, double mean, double std, double a, double b) {
  TORCH_CHECK_VALUE(std > 0.0 && a < b, "trunc_normal_: need std > 0 and a < b, got std = ", std,
                    ", [a, b] = [", a, ", ", b, "]");
  torch::NoGradGuard no_grad;
  const auto normal_cdf = [](double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); };
  const double lo = normal_cdf((a - mean) / std);
  const double hi = normal_cdf((b - mean) / std);
  // u ~ U(2·lo − 1, 2·hi − 1), then erfinv maps it to a standard normal truncated to the bounds.
  tensor.uniform_(2.0 * lo - 1.0, 2.0 * hi - 1.0);
  tensor.erfinv_();
  tensor.mul_(std * std::sqrt(2.0)).add_(mean);
  tensor.clamp_(a, b);
  return tensor;
}

}  // namespace attnzoo
