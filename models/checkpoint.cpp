#include <attnzoo/models/checkpoint.h>

#include <attnzoo/layers/attention_mask.h>

#include <torch/torch.h>

#include <algorithm>
#include <sstream>

namespace attnzoo {

io::TensorDict state_dict(const torch::nn::Module& module) {
  io::TensorDict out;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    out.insert(item.key(), item.value().detach());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    out.insert(item.key(), item.value().detach());
  }
  return out;
}

void load_state_dict(torch::nn::Module& module, const io::TensorDict& tensors,
                     const LoadOptions& options) {
  auto targets = state_dict(module);
  std::vector<std::string> missing, mismatched, unexpected;
  for (const auto& item : targets) {
    const auto* source = tensors.find(item.key());
    if (!source) {
      if (!options.optional.count(item.key())) missing.push_back(item.key());
      continue;
    }
    if (source->sizes() != item.value().sizes()) {
      mismatched.push_back(item.key() + " (checkpoint " + shape_string(source->sizes()) +
                           ", model " + shape_string(item.value().sizes()) + ")");
    }
  }
  for (const auto& item : tensors) {
    if (!targets.contains(item.key()) && !options.ignore.count(item.key())) {
      unexpected.push_back(item.key());
    }
  }
  if (!missing.empty() || !mismatched.empty() || !unexpected.empty()) {
    std::ostringstream message;
    message << options.source << ": the weights do not fit the model";
    // The first names of each kind show the pattern of a wrong layout; a hostile file's 10^5
    // names would bury it.
    constexpr size_t kListed = 30;
    const auto list = [&](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      message << "\n  " << what << " (" << names.size() << "):";
      for (size_t i = 0; i < std::min(names.size(), kListed); ++i) message << "\n    " << names[i];
      if (names.size() > kListed) message << "\n    ... and " << names.size() - kListed << " more";
    };
    list("missing", missing);
    list("wrong shape", mismatched);
    list("unexpected", unexpected);
    throw CheckpointError(message.str());
  }
  torch::NoGradGuard no_grad;
  for (auto& item : targets) {
    if (const auto* source = tensors.find(item.key())) item.value().copy_(*source);
  }
}

std::string rename_with(const std::vector<RenameRule>& rules, const std::string& name) {
  for (const auto& rule : rules) {
    if (std::regex_match(name, rule.pattern)) {
      return std::regex_replace(name, rule.pattern, rule.replacement);
    }
  }
  return name;
}

void insert_mapped(io::TensorDict& out, const std::string& name, const std::string& from,
                   const torch::Tensor& tensor) {
  if (out.contains(name)) {
    throw CheckpointError("two tensors map to '" + name + "' (the second: '" + from + "')");
  }
  out.insert(name, tensor);
}

QkvParts::QkvParts(std::string order) : order_(std::move(order)) {
  TORCH_CHECK(order_ == "qkv" || order_ == "kv", "QkvParts: unknown order '", order_, "'");
}

void QkvParts::add(const std::string& target, char part, const torch::Tensor& tensor) {
  TORCH_CHECK(order_.find(part) != std::string::npos, "QkvParts: unknown part '", part, "' (order ",
              order_, ")");
  parts_[target][part] = tensor;
}

void QkvParts::insert_into(io::TensorDict& out) const {
  for (const auto& [target, parts] : parts_) {
    if (parts.size() == order_.size()) {
      std::vector<torch::Tensor> rows;
      std::string from;  // e.g. "<target>.q/k/v", for messages
      for (const char part : order_) {
        rows.push_back(parts.at(part));
        from += (from.empty() ? target + "." : "/") + std::string(1, part);
      }
      insert_mapped(out, target, from, torch::cat(rows, 0));
    } else {
      for (const auto& [which, tensor] : parts) {
        insert_mapped(out, target + "." + which, target + "." + which, tensor);
      }
    }
  }
}

}  // namespace attnzoo
