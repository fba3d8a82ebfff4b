#include <attnzoo/preprocess/image/augment.h>
#include <attnzoo/train/mixup.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace attnzoo {
namespace {

// Beta(a, a) from two Gammas of <random> (whose algorithm the standard leaves to each library:
// the mixing of a run repeats within one build, which is what resuming needs).
double symmetric_beta(std::mt19937_64& rng, double a) {
  std::gamma_distribution<double> gamma(a, 1.0);
  const double x = gamma(rng), y = gamma(rng);
  return x + y > 0.0 ? x / (x + y) : 0.5;
}

}  // namespace

Mixup::Mixup(MixupOptions options) : options_(options) {
  const auto& o = options_;
  TORCH_CHECK_VALUE(o.mixup_alpha >= 0.0 && o.cutmix_alpha >= 0.0,
                    "Mixup: mixup_alpha and cutmix_alpha must be >= 0, not ", o.mixup_alpha,
                    " and ", o.cutmix_alpha);
  TORCH_CHECK_VALUE(o.prob >= 0.0 && o.prob <= 1.0, "Mixup: prob ", o.prob, " is not in [0, 1]");
  TORCH_CHECK_VALUE(o.label_smoothing >= 0.0 && o.label_smoothing < 1.0, "Mixup: label_smoothing ",
                    o.label_smoothing, " is not in [0, 1)");
  TORCH_CHECK_VALUE(o.num_classes >= 1, "Mixup: num_classes ", o.num_classes, " < 1");
}

bool Mixup::mixes() const { return options_.mixup_alpha > 0.0 || options_.cutmix_alpha > 0.0; }

MixedBatch Mixup::operator()(const torch::Tensor& inputs, const torch::Tensor& labels,
                             std::mt19937_64& rng) const {
  const auto& o = options_;
  TORCH_CHECK_VALUE(labels.dim() == 1 && inputs.dim() >= 1 && labels.size(0) == inputs.size(0),
                    "Mixup: labels ", labels.sizes(), " do not fit inputs ", inputs.sizes());
  TORCH_CHECK_VALUE(labels.numel() == 0 || (labels.min().item<int64_t>() >= 0 &&
                                            labels.max().item<int64_t>() < o.num_classes),
                    "Mixup: labels outside [0, ", o.num_classes, ")");
  TORCH_CHECK_VALUE(o.cutmix_alpha <= 0.0 || inputs.dim() == 4,
                    "Mixup: cutmix needs inputs [B, C, H, W], not ", inputs.sizes());
  MixedBatch r;
  r.inputs = inputs;
  r.targets = torch::one_hot(labels, o.num_classes).to(torch::kFloat);
  r.mixed = mixes() && uniform(rng, 0.0, 1.0) < o.prob;
  if (r.mixed) {
    r.cutmix = o.cutmix_alpha > 0.0 && (o.mixup_alpha <= 0.0 || uniform(rng, 0.0, 1.0) < 0.5);
    double lam = symmetric_beta(rng, r.cutmix ? o.cutmix_alpha : o.mixup_alpha);
    const auto flipped = inputs.flip(0);
    if (r.cutmix) {
      const int64_t h = inputs.size(2), w = inputs.size(3);
      const double cut = std::sqrt(1.0 - lam);
      const auto ch = static_cast<int64_t>(h * cut), cw = static_cast<int64_t>(w * cut);
      const int64_t cy = random_int(rng, 0, h), cx = random_int(rng, 0, w);
      const int64_t y0 = std::clamp<int64_t>(cy - ch / 2, 0, h),
                    y1 = std::clamp<int64_t>(cy + ch / 2, 0, h);
      const int64_t x0 = std::clamp<int64_t>(cx - cw / 2, 0, w),
                    x1 = std::clamp<int64_t>(cx + cw / 2, 0, w);
      r.inputs = inputs.clone();
      r.inputs.narrow(2, y0, y1 - y0)
          .narrow(3, x0, x1 - x0)
          .copy_(flipped.narrow(2, y0, y1 - y0).narrow(3, x0, x1 - x0));
      lam = 1.0 - static_cast<double>((y1 - y0) * (x1 - x0)) / static_cast<double>(h * w);
      r.box_top = y0;
      r.box_bottom = y1;
      r.box_left = x0;
      r.box_right = x1;
    } else {
      r.inputs = lam * inputs + (1.0 - lam) * flipped;
    }
    r.lambda = lam;
    r.targets = lam * r.targets + (1.0 - lam) * r.targets.flip(0);
  }
  if (o.label_smoothing > 0.0) {
    r.targets = r.targets * (1.0 - o.label_smoothing) +
                o.label_smoothing / static_cast<double>(o.num_classes);
  }
  return r;
}

}  // namespace attnzoo
