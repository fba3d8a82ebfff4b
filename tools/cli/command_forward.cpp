// `attnzoo forward`: one model of the zoo (or any YAML config) on a batch of images from a
// safetensors file, its output written back as safetensors. The debugging door into any model,
// and the way the parity tests compare a checkpoint's outputs with the reference library's.
#include "tools/cli/commands.h"

#include "configs/registry.h"
#include "io/safetensors.h"

#include <torch/torch.h>

#include <iostream>
#include <sstream>
#include <stdexcept>

namespace attnzoo::cli {
namespace {

struct ForwardOptions {
  std::string model;
  std::string weights;
  std::string format;
  std::vector<std::string> overrides;
  std::string input;
  std::string output;
  std::string device = "cpu";
  std::string dtype = "fp32";
};

torch::Dtype parse_dtype(const std::string& name) {
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kHalf;
  return torch::kFloat;
}

std::string shape_of(const torch::Tensor& tensor) {
  std::ostringstream out;
  out << tensor.sizes();
  return out.str();
}

// The tensor "pixels" of the input file, checked against what the model takes: [B, C, H, W] with
// C = in_chans and H, W multiples of the patch size (other sizes than the config's are fine: the
// position embedding is resampled).
torch::Tensor read_pixels(const std::string& path, const ModelConfig& config) {
  const auto file = io::load_safetensors(path);
  const auto* found = file.tensors.find("pixels");
  if (!found) {
    std::string names;
    for (const auto& item : file.tensors) names += (names.empty() ? "" : ", ") + item.key();
    throw std::runtime_error(path + ": no tensor 'pixels' (the file has: " +
                             (names.empty() ? "no tensors" : names) + ")");
  }
  const auto& pixels = *found;
  const std::string what = path + ": tensor 'pixels' ";
  if (!pixels.is_floating_point()) {
    throw std::runtime_error(what + "must be floating point, got " +
                             std::string(c10::toString(pixels.scalar_type())));
  }
  const int64_t channels = config.vit.in_chans(), patch = config.vit.patch_size();
  if (pixels.dim() != 4 || pixels.size(0) < 1 || pixels.size(1) != channels) {
    throw std::runtime_error(what + "must be [B, " + std::to_string(channels) +
                             ", H, W] with B >= 1, got " + shape_of(pixels));
  }
  if (pixels.size(2) < patch || pixels.size(3) < patch || pixels.size(2) % patch != 0 ||
      pixels.size(3) % patch != 0) {
    throw std::runtime_error(what + shape_of(pixels) + ": H and W must be positive multiples of " +
                             "the patch size " + std::to_string(patch));
  }
  return pixels;
}

int run_forward(const ForwardOptions& options) {
  if (options.device == "cuda" && !torch::cuda::is_available()) {
    throw std::runtime_error("--device cuda: no CUDA device is available to this process");
  }
  const auto config = resolve_model_config(options.model, options.overrides);
  // The input is checked before the model is built: building ViT-H takes seconds.
  auto pixels = read_pixels(options.input, config);

  // A fixed seed: without --weights, two runs give the same numbers.
  torch::manual_seed(0);
  auto model = build_model(config);
  std::string weights = "random weights (seed 0)";
  if (!options.weights.empty()) {
    const std::string layout = load_weights(model, options.weights, options.format);
    const char* chosen = !options.format.empty()             ? "--format"
                         : !config.checkpoint_format.empty() ? "the config"
                                                             : "detected";
    weights = options.weights + " (" + layout + " layout, " + chosen + ")";
  }

  const torch::Device device(options.device == "cuda" ? torch::kCUDA : torch::kCPU);
  const auto dtype = parse_dtype(options.dtype);
  model.module->eval();
  model.module->to(device, dtype);
  torch::Tensor output;
  {
    torch::InferenceMode inference;
    output = model.vit(pixels.to(device, dtype));
  }
  // Written as float32 whatever the compute dtype (bf16 and fp16 convert exactly), so that a
  // comparison script need not care.
  const std::string name = config.vit.num_classes() > 0 ? "logits" : "features";
  io::TensorDict tensors;
  tensors.insert(name, output.to(torch::kCPU, torch::kFloat).contiguous());
  io::save_safetensors(options.output, tensors,
                       {{"model", config.name},
                        {"config", config.source},
                        {"weights", weights},
                        {"device", options.device},
                        {"dtype", options.dtype}});
  std::cout << config.name << " (" << config.source << "), " << weights << "\n"
            << "pixels " << shape_of(pixels) << " on " << options.device << " in " << options.dtype
            << " -> " << name << " " << shape_of(output) << " -> " << options.output << "\n";
  return 0;
}

}  // namespace

Command add_forward_command(CLI::App& app) {
  auto options = std::make_shared<ForwardOptions>();
  auto* sub = app.add_subcommand(
      "forward", "Run a model on the tensor 'pixels' of a safetensors file; write its output");
  sub->add_option("--model", options->model,
                  "A registered name (see attnzoo models) or a YAML file")
      ->required();
  sub->add_option("--weights", options->weights,
                  "safetensors checkpoint (default: random weights)");
  sub->add_option("--format", options->format,
                  "Checkpoint layout (default: the config's checkpoint.format, else detected)")
      ->check(CLI::IsMember({"timm", "torchvision", "hf"}));
  sub->add_option("--set", options->overrides,
                  "Override a config value, key.path=value (YAML value); repeatable");
  sub->add_option("--input", options->input, "safetensors file with 'pixels' [B, C, H, W]")
      ->required();
  sub->add_option("--output", options->output, "safetensors file to write 'logits' or 'features'")
      ->required();
  sub->add_option("--device", options->device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  sub->add_option("--dtype", options->dtype, "fp32, bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  return {sub, [options] { return run_forward(*options); }};
}

}  // namespace attnzoo::cli
