#include <attnzoo/io/safetensors.h>
#include <attnzoo/train/training_checkpoint.h>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

namespace attnzoo {
namespace {

constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimizerPrefix = "optimizer.";
constexpr const char* kAveragePrefix = "ema.";
constexpr const char* kGeneratorName = "rng.cpu";

// The tensors of `file` whose name starts with `prefix`, without it.
io::TensorDict tensors_under(const io::TensorDict& file, const std::string& prefix) {
  io::TensorDict out;
  for (const auto& item : file) {
    if (item.key().rfind(prefix, 0) == 0)
      out.insert(item.key().substr(prefix.size()), item.value());
  }
  return out;
}

int64_t checkpoint_integer(const std::string& path, const std::string& key,
                           const std::string& text) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw CheckpointError(path + ": its metadata's " + key + " '" + text + "' is not an integer");
  }
  return value;
}

}  // namespace

void save_training_checkpoint(const std::string& path, const TrainingParts& parts,
                              const TrainingCheckpointInfo& info) {
  TORCH_CHECK_VALUE(parts.model && parts.optimizer,
                    "save_training_checkpoint: the model and the optimizer are required");
  io::TensorDict tensors;
  for (const auto& item : state_dict(*parts.model)) {
    tensors.insert(kModelPrefix + item.key(), item.value().to(torch::kCPU));
  }
  for (const auto& item : parts.optimizer->state_dict()) {
    tensors.insert(kOptimizerPrefix + item.key(), item.value().to(torch::kCPU));
  }
  if (parts.average) {
    for (const auto& item : parts.average->state_dict()) {
      tensors.insert(kAveragePrefix + item.key(), item.value().to(torch::kCPU));
    }
  }
  {
    auto cpu_generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(cpu_generator.mutex());
    tensors.insert(kGeneratorName, cpu_generator.get_state());
  }
  const nlohmann::json classes = info.classes;
  io::save_safetensors(
      path, tensors,
      {{"model", info.model},
       {"step", std::to_string(info.step)},
       {"total_steps", std::to_string(info.total_steps)},
       {"config", info.config},
       {"ema_updates", std::to_string(parts.average ? parts.average->updates() : 0)},
       {"classes", classes.dump()}});
}

int64_t restore_training_checkpoint(const std::string& path, const TrainingParts& parts,
                                    const std::string& model_name, int64_t total_steps) {
  TORCH_CHECK_VALUE(parts.model && parts.optimizer,
                    "restore_training_checkpoint: the model and the optimizer are required");
  io::Safetensors file;
  try {
    file = io::load_safetensors(path);
  } catch (const io::SafetensorsError& e) {
    throw CheckpointError(e.what());  // which starts with the path
  }
  const auto meta = [&](const std::string& key) {
    const auto it = file.metadata.find(key);
    if (it == file.metadata.end()) {
      throw CheckpointError(path + ": not a training checkpoint (no '" + key +
                            "' in its metadata)");
    }
    return it->second;
  };
  if (meta("model") != model_name) {
    throw CheckpointError(path + ": a checkpoint of model '" + meta("model") +
                          "', the config trains '" + model_name + "'");
  }
  LoadOptions load;
  load.source = path;
  load_state_dict(*parts.model, tensors_under(file.tensors, kModelPrefix), load);
  try {
    parts.optimizer->load_state_dict(tensors_under(file.tensors, kOptimizerPrefix));
  } catch (const c10::Error& e) {
    throw CheckpointError(path + " (optimizer.*): " + e.what_without_backtrace());
  }
  if (parts.average) {
    const auto average = tensors_under(file.tensors, kAveragePrefix);
    if (average.is_empty()) {
      throw CheckpointError(path +
                            ": no ema.* tensors, but the config sets train.ema_decay (a "
                            "checkpoint of a run without the average)");
    }
    load.source = path + " (ema.*)";
    const auto it = file.metadata.find("ema_updates");
    const int64_t updates =
        it == file.metadata.end() ? 0 : checkpoint_integer(path, "ema_updates", it->second);
    parts.average->load_state_dict(average, updates, load);
  }
  const int64_t step = checkpoint_integer(path, "step", meta("step"));
  if (step > total_steps) {
    throw CheckpointError(path + ": at step " + std::to_string(step) + ", past this run's " +
                          std::to_string(total_steps) + " steps");
  }
  const auto* generator = file.tensors.find(kGeneratorName);
  if (!generator) throw CheckpointError(path + ": no rng.cpu state");
  auto cpu_generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
  std::lock_guard<std::mutex> lock(cpu_generator.mutex());
  try {
    cpu_generator.set_state(*generator);
  } catch (const c10::Error& e) {
    throw CheckpointError(path + ": rng.cpu: " + e.what_without_backtrace());
  }
  return step;
}

}  // namespace attnzoo
