#include <attnzoo/preprocess/audio/spec_augment.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace attnzoo {
namespace {

namespace F = torch::nn::functional;

// An integer uniform in [low, high] (inclusive), computed here rather than by <random>'s
// distributions, whose algorithms differ between standard libraries (as image/augment.h does).
int64_t draw(std::mt19937_64& rng, int64_t low, int64_t high) {
  const double unit = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
  return std::min(high, low + static_cast<int64_t>(unit * static_cast<double>(high - low + 1)));
}

// features [T, F] resized to [frames, F] along time (bicubic, align_corners false).
torch::Tensor resize_time(const torch::Tensor& features, int64_t frames) {
  const auto image = features.unsqueeze(0).unsqueeze(0);
  return F::interpolate(image, F::InterpolateFuncOptions()
                                   .size(std::vector<int64_t>{frames, features.size(1)})
                                   .mode(torch::kBicubic)
                                   .align_corners(false))
      .squeeze(0)
      .squeeze(0);
}

}  // namespace

SpecAugment::SpecAugment(SpecAugmentOptions options) : options_(options) {
  const auto& o = options_;
  TORCH_CHECK_VALUE(o.num_freq_masks >= 0 && o.max_freq_width >= 0 && o.num_time_masks >= 0 &&
                        o.max_time_width >= 0 && o.time_warp_window >= 0,
                    "SpecAugmentOptions: mask counts, widths and the warp window must be >= 0");
  TORCH_CHECK_VALUE(o.max_time_ratio >= 0.0 && o.max_time_ratio <= 1.0,
                    "SpecAugmentOptions.max_time_ratio: 0 to 1, got ", o.max_time_ratio);
}

torch::Tensor SpecAugment::operator()(const torch::Tensor& features, std::mt19937_64& rng,
                                      SpecAugmentRecord* record) const {
  TORCH_CHECK_VALUE(features.dim() == 2 && features.is_floating_point(),
                    "SpecAugment: features must be floating point [T, F], got ",
                    features.scalar_type(), " ", features.sizes());
  const auto& o = options_;
  const int64_t frames = features.size(0), bins = features.size(1);
  SpecAugmentRecord applied;
  auto x = features.clone();
  const int64_t w = o.time_warp_window;
  if (w > 0 && frames > 2 * w) {
    const int64_t centre = draw(rng, w, frames - w - 1);
    const int64_t to = draw(rng, centre - w, centre + w - 1) + 1;
    const auto left = resize_time(x.narrow(0, 0, centre), to);
    const auto right = resize_time(x.narrow(0, centre, frames - centre), frames - to);
    x = torch::cat({left, right});
    applied.warp_centre = centre;
    applied.warp_to = to;
  }
  for (int64_t i = 0; i < o.num_freq_masks && bins > 0; ++i) {
    const int64_t width = draw(rng, 0, std::min(o.max_freq_width, bins));
    const int64_t start = draw(rng, 0, bins - width);
    x.narrow(1, start, width).fill_(o.mask_value);
    applied.freq_masks.emplace_back(start, width);
  }
  const int64_t longest = std::min<int64_t>(
      o.max_time_width, static_cast<int64_t>(std::floor(o.max_time_ratio * double(frames))));
  for (int64_t i = 0; i < o.num_time_masks && frames > 0; ++i) {
    const int64_t width = draw(rng, 0, longest);
    const int64_t start = draw(rng, 0, frames - width);
    x.narrow(0, start, width).fill_(o.mask_value);
    applied.time_masks.emplace_back(start, width);
  }
  if (record != nullptr) *record = std::move(applied);
  return x;
}

torch::Tensor SpecAugment::operator()(const torch::Tensor& features, const torch::Tensor& lengths,
                                      std::mt19937_64& rng) const {
  TORCH_CHECK_VALUE(
      features.dim() == 3 && lengths.dim() == 1 && lengths.size(0) == features.size(0),
      "SpecAugment: features [B, T, F] and lengths [B], got ", features.sizes(), " and ",
      lengths.sizes());
  auto out = features.clone();
  const auto valid = lengths.to(torch::kCPU, torch::kLong);
  for (int64_t b = 0; b < features.size(0); ++b) {
    const int64_t n = valid[b].item<int64_t>();
    TORCH_CHECK_VALUE(n >= 0 && n <= features.size(1), "SpecAugment: lengths[", b, "] = ", n,
                      " outside [0, ", features.size(1), "]");
    if (n == 0) continue;
    out[b].narrow(0, 0, n).copy_((*this)(features[b].narrow(0, 0, n), rng));
  }
  return out;
}

}  // namespace attnzoo
