#include <attnzoo/train/optimizer.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <cmath>
#include <regex>
#include <sstream>

namespace attnzoo {
namespace {

bool is_token_like(const std::string& name) {
  static const std::regex tokens(
      R"((^|.*\.)(cls_token|reg_token|pos_embed|pos_bias_u|pos_bias_v|mask_token))");
  return std::regex_match(name, tokens);
}

// A per-row value along dim 0 of `param`, as [rows, 1, ...] (float32 or float64 as the param).
torch::Tensor per_slice(const torch::Tensor& param, const std::vector<double>& values) {
  const int64_t rows = param.size(0);
  const auto parts = static_cast<int64_t>(values.size());
  std::vector<int64_t> shape(static_cast<size_t>(param.dim()), 1);
  shape[0] = rows;
  auto column = torch::empty({rows}, torch::TensorOptions().dtype(torch::kDouble));
  for (int64_t i = 0; i < parts; ++i) {
    column.narrow(0, i * (rows / parts), rows / parts).fill_(values[static_cast<size_t>(i)]);
  }
  return column.view(shape).to(param.device(), param.scalar_type());
}

std::string format_number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

AdamW::AdamW(const torch::OrderedDict<std::string, torch::Tensor>& parameters, AdamWOptions options)
    : options_(std::move(options)) {
  const auto& o = options_;
  TORCH_CHECK_VALUE(o.lr >= 0.0 && o.eps > 0.0 && o.beta1 >= 0.0 && o.beta1 < 1.0 &&
                        o.beta2 >= 0.0 && o.beta2 < 1.0 && o.weight_decay >= 0.0,
                    "AdamW: need lr >= 0, eps > 0, betas in [0, 1), weight_decay >= 0; got lr ",
                    o.lr, ", eps ", o.eps, ", betas ", o.beta1, ", ", o.beta2, ", weight_decay ",
                    o.weight_decay);
  std::vector<std::regex> patterns;
  for (const auto& rule : o.rules) {
    try {
      patterns.emplace_back(rule.pattern);
    } catch (const std::regex_error& e) {
      TORCH_CHECK_VALUE(false, "AdamW: invalid parameter pattern '", rule.pattern, "': ", e.what());
    }
    TORCH_CHECK_VALUE(rule.slices.empty() || rule.slices.size() >= 2, "AdamW: rule '", rule.pattern,
                      "': slices needs at least 2 parts, got ", rule.slices.size());
  }
  std::vector<bool> used(o.rules.size(), false);
  for (const auto& item : parameters) {
    const auto& name = item.key();
    const auto& param = item.value();
    if (!param.requires_grad()) continue;
    Slot slot;
    slot.name = name;
    slot.param = param;
    const bool no_decay =
        o.no_decay_on_norms_biases_tokens && (param.dim() <= 1 || is_token_like(name));
    double lr = o.lr, wd = no_decay ? 0.0 : o.weight_decay;
    const ParameterGroupRule* rule = nullptr;
    for (size_t r = 0; r < o.rules.size() && !rule; ++r) {
      if (std::regex_match(name, patterns[r])) {
        rule = &o.rules[r];
        used[r] = true;
      }
    }
    if (rule) {
      lr = rule->lr.value_or(lr);
      wd = rule->weight_decay.value_or(wd);
    }
    if (rule && !rule->slices.empty()) {
      const auto parts = static_cast<int64_t>(rule->slices.size());
      TORCH_CHECK_VALUE(param.dim() >= 1 && param.size(0) % parts == 0, "AdamW: rule '",
                        rule->pattern, "' splits ", name, " into ", parts,
                        " slices, but its first dimension is ",
                        param.dim() >= 1 ? param.size(0) : 0);
      std::vector<double> lrs, wds;
      std::ostringstream settings;
      for (const auto& s : rule->slices) {
        lrs.push_back(s.lr.value_or(lr));
        wds.push_back(s.weight_decay.value_or(wd));
        settings << (lrs.size() > 1 ? " | " : "") << "lr " << lrs.back() << " wd " << wds.back();
      }
      slot.lr = per_slice(param, lrs);
      slot.weight_decay = per_slice(param, wds);
      slot.settings = settings.str();
    } else {
      slot.lr = torch::tensor(lr, torch::kDouble);
      slot.weight_decay = torch::tensor(wd, torch::kDouble);
      slot.settings = "lr " + format_number(lr) + " wd " + format_number(wd);
    }
    slot.exp_avg = torch::zeros_like(param, torch::MemoryFormat::Preserve).detach();
    slot.exp_avg_sq = torch::zeros_like(param, torch::MemoryFormat::Preserve).detach();
    slots_.push_back(std::move(slot));
  }
  for (size_t r = 0; r < o.rules.size(); ++r) {
    TORCH_CHECK_VALUE(used[r], "AdamW: rule '", o.rules[r].pattern,
                      "' matches no trainable parameter");
  }
}

void AdamW::step(double lr_scale) {
  TORCH_CHECK_VALUE(lr_scale >= 0.0 && std::isfinite(lr_scale),
                    "AdamW: lr_scale must be finite and >= 0, got ", lr_scale);
  torch::NoGradGuard no_grad;
  ++step_;
  const auto& o = options_;
  const double bias1 = 1.0 - std::pow(o.beta1, static_cast<double>(step_));
  const double bias2 = 1.0 - std::pow(o.beta2, static_cast<double>(step_));
  for (auto& s : slots_) {
    const auto& grad = s.param.grad();
    if (!grad.defined()) continue;
    // Decoupled weight decay, then the moments, then the step, as torch.optim.AdamW.
    if (s.lr.dim() == 0) {
      const double lr = s.lr.item<double>() * lr_scale;
      const double wd = s.weight_decay.item<double>();
      if (wd != 0.0) s.param.mul_(1.0 - lr * wd);
      s.exp_avg.lerp_(grad, 1.0 - o.beta1);
      s.exp_avg_sq.mul_(o.beta2).addcmul_(grad, grad, 1.0 - o.beta2);
      const auto denom = (s.exp_avg_sq.sqrt() / std::sqrt(bias2)).add_(o.eps);
      s.param.addcdiv_(s.exp_avg, denom, -lr / bias1);
    } else {
      const auto lr = s.lr * lr_scale;
      s.param.mul_(1.0 - lr * s.weight_decay);
      s.exp_avg.lerp_(grad, 1.0 - o.beta1);
      s.exp_avg_sq.mul_(o.beta2).addcmul_(grad, grad, 1.0 - o.beta2);
      const auto denom = (s.exp_avg_sq.sqrt() / std::sqrt(bias2)).add_(o.eps);
      s.param.sub_(lr / bias1 * s.exp_avg / denom);
    }
  }
}

void AdamW::zero_grad() {
  for (auto& s : slots_) {
    if (s.param.grad().defined()) s.param.mutable_grad() = torch::Tensor();
  }
}

torch::Tensor AdamW::learning_rate(const std::string& name) const {
  for (const auto& s : slots_) {
    if (s.name == name) return s.lr;
  }
  TORCH_CHECK_VALUE(false, "AdamW: no trainable parameter '", name, "'");
}

torch::Tensor AdamW::weight_decay(const std::string& name) const {
  for (const auto& s : slots_) {
    if (s.name == name) return s.weight_decay;
  }
  TORCH_CHECK_VALUE(false, "AdamW: no trainable parameter '", name, "'");
}

std::string AdamW::describe() const {
  std::ostringstream out;
  for (const auto& s : slots_) {
    out << s.name << " " << s.param.sizes() << ": " << s.settings << "\n";
  }
  return out.str();
}

io::TensorDict AdamW::state_dict() const {
  io::TensorDict state;
  state.insert("step", torch::tensor(step_, torch::kLong));
  for (const auto& s : slots_) {
    state.insert("exp_avg." + s.name, s.exp_avg.to(torch::kCPU).contiguous());
    state.insert("exp_avg_sq." + s.name, s.exp_avg_sq.to(torch::kCPU).contiguous());
  }
  return state;
}

void AdamW::load_state_dict(const io::TensorDict& state) {
  const auto* step = state.find("step");
  TORCH_CHECK_VALUE(step && step->numel() == 1, "AdamW: optimiser state without a 'step'");
  TORCH_CHECK_VALUE(static_cast<size_t>(state.size()) == 1 + 2 * slots_.size(),
                    "AdamW: the optimiser state has ", state.size() - 1,
                    " moment tensors, the model's trainable parameters need ", 2 * slots_.size());
  for (auto& s : slots_) {
    for (auto* moment : {&s.exp_avg, &s.exp_avg_sq}) {
      const std::string key = (moment == &s.exp_avg ? "exp_avg." : "exp_avg_sq.") + s.name;
      const auto* saved = state.find(key);
      TORCH_CHECK_VALUE(saved, "AdamW: the optimiser state lacks '", key, "'");
      TORCH_CHECK_VALUE(saved->sizes() == s.param.sizes(), "AdamW: '", key, "' is ", saved->sizes(),
                        ", the parameter ", s.param.sizes());
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& s : slots_) {
    s.exp_avg.copy_(state["exp_avg." + s.name]);
    s.exp_avg_sq.copy_(state["exp_avg_sq." + s.name]);
  }
  step_ = step->item<int64_t>();
}

double WarmupCosineSchedule::factor(int64_t step) const {
  TORCH_CHECK_VALUE(warmup_steps >= 0 && total_steps >= 1 && min_ratio >= 0.0 && min_ratio <= 1.0,
                    "WarmupCosineSchedule: need warmup_steps >= 0, total_steps >= 1, min_ratio "
                    "in [0, 1]");
  if (step < warmup_steps) return static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (step >= total_steps) return min_ratio;
  const double span = static_cast<double>(std::max<int64_t>(total_steps - warmup_steps, 1));
  const double progress = static_cast<double>(step - warmup_steps) / span;
  return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace attnzoo
