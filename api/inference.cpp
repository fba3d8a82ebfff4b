#include <attnzoo/api/inference.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

namespace attnzoo {

ZooModel inference_model(const ModelConfig& config, const std::string& weights_given,
                         const std::string& format, const std::string& key, torch::Device device,
                         torch::Dtype dtype, std::string& description) {
  const std::string& weights = weights_given.empty() ? config.checkpoint_file : weights_given;
  TORCH_CHECK_VALUE(config.inference.quantize != Quantization::kInt8 ||
                        (device.is_cpu() && (dtype == torch::kFloat || dtype == torch::kBFloat16)),
                    config.source,
                    ": inference.quantize int8 runs on the CPU in fp32 or bf16, got device ",
                    device.str(), " and dtype ", dtype);
  torch::manual_seed(0);
  auto model = build_model(config);
  description = "random weights (seed 0)";
  if (!weights.empty()) {
    const auto loaded = load_weights(model, weights, format, key);
    description = weights + " (" + loaded.layout + " layout";
    for (const auto& note : loaded.notes) description += "; " + note;
    description += ")";
  }
  model.module->eval();
  model.module->to(device, dtype);
  return model;
}

}  // namespace attnzoo
