#include <attnzoo/api/model_setup.h>

#include <attnzoo/api/inference_dtype.h>

#include <attnzoo/core/dtype_device.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

namespace attnzoo::detail {

std::vector<std::string> with_quantize(std::vector<std::string> overrides,
                                       std::optional<Quantization> quantize) {
  if (quantize) overrides.push_back(std::string("inference.quantize=") + to_string(*quantize));
  return overrides;
}

ModelSetup model_setup(const std::string& who, const std::string& model,
                       const ModelOptions& options, InputKind input,
                       const std::string& task_needs) {
  TORCH_CHECK_VALUE(options.threads >= 0, who, ": threads must be >= 0, got ", options.threads);
  ModelSetup setup;
  check_device(who + ": device", options.device);
  if (options.dtype) check_dtype(who + ": dtype", *options.dtype);
  setup.device = options.device;
  setup.config = resolve_model_config(model, with_quantize(options.overrides, options.quantize));
  setup.dtype = options.dtype ? *options.dtype
                              : resolve_inference_dtype(setup.config.inference.dtype, setup.device);
  setup.family = &model_family(setup.config.family);
  const InputKind takes = setup.family->input_kind();
  TORCH_CHECK_VALUE(takes == input, who, ": ", setup.config.source, " is a ", setup.config.family,
                    " model, which takes ", input_kind_name(takes), "; ", task_needs);
  return setup;
}

ZooModel setup_model(const ModelSetup& setup, const ModelOptions& options,
                     std::string& description) {
  if (options.threads > 0) torch::set_num_threads(options.threads);
  return inference_model(setup.config, options.weights, options.format, options.key, setup.device,
                         setup.dtype, description);
}

}  // namespace attnzoo::detail
