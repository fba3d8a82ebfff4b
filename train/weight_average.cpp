#include <attnzoo/train/weight_average.h>

#include <torch/torch.h>

#include <algorithm>

namespace attnzoo {

WeightAverage::WeightAverage(const torch::nn::Module& model, torch::nn::Module& average,
                             WeightAverageOptions options)
    : options_(options), average_(&average) {
  TORCH_CHECK_VALUE(options_.decay >= 0.0 && options_.decay < 1.0, "WeightAverage: decay ",
                    options_.decay, " is not in [0, 1)");
  TORCH_CHECK_VALUE(options_.warmup >= 0, "WeightAverage: warmup ", options_.warmup, " < 0");
  const auto model_sd = attnzoo::state_dict(model);
  const auto average_sd = attnzoo::state_dict(average);
  TORCH_CHECK_VALUE(model_sd.size() == average_sd.size(), "WeightAverage: the model has ",
                    model_sd.size(), " parameters and buffers, the average ", average_sd.size());
  for (const auto& item : model_sd) {
    const auto* e = average_sd.find(item.key());
    TORCH_CHECK_VALUE(e && e->sizes() == item.value().sizes(), "WeightAverage: '", item.key(),
                      "' of the model ", item.value().sizes(),
                      " has no counterpart in the average");
  }
  torch::NoGradGuard no_grad;
  for (const auto& item : model_sd) {
    auto e = average_sd[item.key()];
    e.copy_(item.value());
    if (e.is_floating_point()) {
      model_tensors_.push_back(item.value());
      average_tensors_.push_back(e);
    }
  }
}

double WeightAverage::next_decay() const {
  if (options_.warmup <= 0) return options_.decay;
  const double n = static_cast<double>(updates_);
  return std::min(options_.decay, (1.0 + n) / (static_cast<double>(options_.warmup) + n));
}

void WeightAverage::update() {
  const double decay = next_decay();
  torch::NoGradGuard no_grad;
  torch::_foreach_lerp_(average_tensors_, model_tensors_, 1.0 - decay);
  ++updates_;
}

io::TensorDict WeightAverage::state_dict() const { return attnzoo::state_dict(*average_); }

void WeightAverage::load_state_dict(const io::TensorDict& tensors, int64_t updates,
                                    const LoadOptions& options) {
  TORCH_CHECK_VALUE(updates >= 0, "WeightAverage: ", updates, " updates");
  attnzoo::load_state_dict(*average_, tensors, options);
  updates_ = updates;
}

}  // namespace attnzoo
