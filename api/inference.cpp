#include <attnzoo/api/inference.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

namespace attnzoo::api_detail {

torch::Dtype parse_dtype(const std::string& who, const std::string& name, bool accept_fp64) {
  if (name == "fp32") return torch::kFloat;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kHalf;
  if (name == "fp64" && accept_fp64) return torch::kDouble;
  TORCH_CHECK_VALUE(false, who, " must be fp32, bf16", accept_fp64 ? ", fp16 or fp64" : " or fp16",
                    ", got '", name, "'");
}

torch::Device parse_device(const std::string& who, const std::string& name) {
  TORCH_CHECK_VALUE(name == "cpu" || name.rfind("cuda", 0) == 0, who,
                    " must be cpu, cuda or cuda:N, got '", name, "'");
  const torch::Device device(name);
  TORCH_CHECK_VALUE(!device.is_cuda() || torch::cuda::is_available(), who, " ", name,
                    ": no CUDA device is available to this process");
  TORCH_CHECK_VALUE(!device.is_cuda() || !device.has_index() ||
                        device.index() < static_cast<int>(torch::cuda::device_count()),
                    who, " ", name, ": only ", torch::cuda::device_count(), " CUDA devices");
  return device;
}

std::vector<std::string> with_quantize(const std::string& who, std::vector<std::string> overrides,
                                       const std::string& quantize) {
  if (quantize.empty()) return overrides;
  TORCH_CHECK_VALUE(quantize == "none" || quantize == "int8", who,
                    ": quantize must be none or int8 (or empty: the config's), got '", quantize,
                    "'");
  overrides.push_back("inference.quantize=" + quantize);
  return overrides;
}

ZooModel inference_model(const ModelConfig& config, const std::string& weights_given,
                         const std::string& format, const std::string& key, torch::Device device,
                         torch::Dtype dtype, std::string& description) {
  const std::string& weights = weights_given.empty() ? config.checkpoint_file : weights_given;
  TORCH_CHECK_VALUE(config.inference.quantize != "int8" ||
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

ModelSetup model_setup(const std::string& who, const std::string& model,
                       const ModelOptions& options) {
  TORCH_CHECK_VALUE(options.threads >= 0, who, ": threads must be >= 0, got ", options.threads);
  ModelSetup setup;
  setup.device = parse_device(who + ": device", options.device);
  setup.dtype = parse_dtype(who + ": dtype", options.dtype);
  setup.config =
      resolve_model_config(model, with_quantize(who, options.overrides, options.quantize));
  return setup;
}

ZooModel setup_model(const ModelSetup& setup, const ModelOptions& options,
                     std::string& description) {
  if (options.threads > 0) torch::set_num_threads(options.threads);
  return inference_model(setup.config, options.weights, options.format, options.key, setup.device,
                         setup.dtype, description);
}

}  // namespace attnzoo::api_detail
