// `attnzoo forward`: one model of the zoo (a YAML config, a model folder) on a batch from a
// safetensors file,
// its output written back as safetensors. The debugging door into any model, and the way the
// parity tests compare a checkpoint's outputs with the reference library's. The input is what
// the family takes, its outputs what its forward names (configs/model_family.h):
//   images     "pixels" [B, C, H, W]                          vit: "logits" [B, classes] (or
//                                                             "features")
//   audio      "features" [B, T, F], "lengths" [B] (optional)  conformer: "encoded" [B, T', D],
//                                                             "lengths" [B], with a CTC head
//                                                             "logits" [B, T', vocab]
//                                                             (log-probabilities), with a
//                                                             classifier "class_logits"
#include "tools/cli/commands.h"

#include <attnzoo/configs/registry.h>
#include <attnzoo/core/dtype_device.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/layers/attention_mask.h>

#include <torch/torch.h>

#include <iostream>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace attnzoo::cli {
namespace {

struct ForwardOptions {
  std::string model;
  std::string weights;
  std::string format;
  std::string key;
  std::vector<std::string> overrides;
  std::string input;
  std::string output;
  std::string device = "cpu";
  std::string dtype = "fp32";
  bool stream = false;
};

const torch::Tensor& find_tensor(const io::Safetensors& file, const std::string& path,
                                 const std::string& name) {
  const auto* found = file.tensors.find(name);
  if (!found) {
    std::string names;
    for (const auto& item : file.tensors) names += (names.empty() ? "" : ", ") + item.key();
    throw Error(path + ": no tensor '" + name +
                "' (the file has: " + (names.empty() ? "no tensors" : names) + ")");
  }
  return *found;
}

// The tensor of the input file that holds the batch: "pixels" for images, "features" for audio.
const char* input_tensor(InputKind kind) {
  return kind == InputKind::kImages ? "pixels" : "features";
}

// The batch of the input file: "pixels" for a model of images, "features" and optionally
// "lengths" for one of audio features; checked by the family against what the model takes.
ModelInput read_input(const std::string& path, const ModelConfig& config) {
  const auto& family = model_family(config.family);
  const auto file = io::load_safetensors(path);
  ModelInput input;
  input.values = find_tensor(file, path, input_tensor(family.input_kind()));
  if (family.input_kind() == InputKind::kAudioFeatures) {
    if (const auto* lengths = file.tensors.find("lengths")) input.lengths = *lengths;
  }
  family.check_input(config, input, path + ": ");
  return input;
}

int run_forward(const ForwardOptions& options) {
  const auto device = parse_device("--device", options.device);
  const auto config = resolve_model_config(options.model, options.overrides);
  const auto& family = model_family(config.family);
  // The input is checked before the model is built: building ViT-H takes seconds.
  const auto input = read_input(options.input, config);
  if (options.stream) {
    try {
      family.check_stream(config, input);
    } catch (const InputError& e) {
      throw InputError(std::string("--stream: ") + e.what());
    }
  }

  // A fixed seed: without --weights, two runs give the same numbers.
  torch::manual_seed(0);
  auto model = build_model(config);
  std::string weights = "random weights (seed 0)";
  // --weights, else the config's own (a model folder's).
  const std::string& file = options.weights.empty() ? config.checkpoint_file : options.weights;
  if (!file.empty()) {
    const auto loaded = load_weights(model, file, options.format, options.key);
    const char* chosen = !options.format.empty()             ? "--format"
                         : !config.checkpoint_format.empty() ? "the config"
                                                             : "detected";
    weights = file + " (" + loaded.layout + " layout, " + chosen;
    for (const auto& note : loaded.notes) weights += "; " + note;
    weights += ")";
  }

  const auto dtype = parse_dtype("--dtype", options.dtype, /*accept_fp64=*/true);
  model.module->eval();
  model.module->to(device, dtype);
  // Written as float32 whatever the compute dtype (bf16 and fp16 convert exactly), so that a
  // comparison script need not care.
  io::TensorDict tensors;
  const auto save = [&](const std::string& name, const torch::Tensor& t) {
    tensors.insert(name, t.is_floating_point() ? t.to(torch::kCPU, torch::kFloat).contiguous()
                                               : t.to(torch::kCPU, torch::kLong).contiguous());
  };
  std::string summary;
  {
    torch::InferenceMode inference;
    ModelInput on_device{input.values.to(device, dtype), {}};
    if (input.lengths.defined()) on_device.lengths = input.lengths.to(device);
    for (const auto& [name, output] : model.forward(on_device, options.stream)) {
      save(name, output);
      if (name != "lengths")
        summary += (summary.empty() ? "" : ", ") + name + " " + shape_string(output.sizes());
    }
  }
  const auto& streaming = config.streaming;
  if (streaming.chunk_size > 0) {
    summary += options.stream ? " (streamed" : " (chunk mask";
    summary += ", chunk " + std::to_string(streaming.chunk_size) + ", left chunks " +
               std::to_string(streaming.num_left_chunks) + ")";
  }
  io::save_safetensors(options.output, tensors,
                       {{"model", config.name},
                        {"config", config.source},
                        {"weights", weights},
                        {"device", options.device},
                        {"dtype", options.dtype}});
  std::cout << config.name << " (" << config.source << "), " << weights << "\n"
            << input_tensor(family.input_kind()) << " " << shape_string(input.values.sizes())
            << " on " << options.device << " in " << options.dtype << " -> " << summary << " -> "
            << options.output << "\n";
  return 0;
}

}  // namespace

Command add_forward_command(CLI::App& app) {
  auto options = std::make_shared<ForwardOptions>();
  auto* sub = app.add_subcommand(
      "forward",
      "Run a model on a safetensors file ('pixels' for models of images, 'features' and "
      "'lengths' for models of audio); write its outputs");
  add_model_options(sub, options->model, options->weights, options->format, options->key,
                    options->overrides, all_checkpoint_formats());
  sub->add_option("--input", options->input,
                  "safetensors file with 'pixels' [B, C, H, W] (images) or 'features' [B, T, F] "
                  "and optionally 'lengths' [B] (audio)")
      ->required();
  sub->add_option("--output", options->output,
                  "safetensors file to write, the model's outputs by name (vit: 'logits' or "
                  "'features'; conformer: 'encoded', 'lengths', with a CTC head 'logits', with a "
                  "classifier 'class_logits')")
      ->required();
  sub->add_flag("--stream", options->stream,
                "Encode chunk by chunk through the streaming caches (the Conformer) "
                "(streaming.chunk_size of the config) instead of the chunk-masked forward");
  sub->add_option("--device", options->device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  sub->add_option("--dtype", options->dtype, "fp32, bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  return {sub, [options] { return run_forward(*options); }};
}

}  // namespace attnzoo::cli
