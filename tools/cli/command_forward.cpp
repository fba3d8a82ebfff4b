// `attnzoo forward`: one model of the zoo (or any YAML config) on a batch from a safetensors file,
// its output written back as safetensors. The debugging door into any model, and the way the
// parity tests compare a checkpoint's outputs with the reference library's.
//   vit        "pixels" [B, C, H, W] -> "logits" [B, classes] (or "features")
//   conformer  "features" [B, T, F] and "lengths" [B] (optional: all T) -> "encoded" [B, T', D],
//              "lengths" [B] and, with a CTC head, "logits" [B, T', vocab] (log-probabilities)
#include "tools/cli/commands.h"
#include "tools/cli/dtype_flag.h"

#include <attnzoo/configs/registry.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/models/conformer_frontend.h>

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
  std::vector<std::string> overrides;
  std::string input;
  std::string output;
  std::string device = "cpu";
  std::string dtype = "fp32";
  bool stream = false;
};

std::string shape_of(const torch::Tensor& tensor) {
  std::ostringstream out;
  out << tensor.sizes();
  return out.str();
}

const torch::Tensor& find_tensor(const io::Safetensors& file, const std::string& path,
                                 const std::string& name) {
  const auto* found = file.tensors.find(name);
  if (!found) {
    std::string names;
    for (const auto& item : file.tensors) names += (names.empty() ? "" : ", ") + item.key();
    throw std::runtime_error(path + ": no tensor '" + name +
                             "' (the file has: " + (names.empty() ? "no tensors" : names) + ")");
  }
  return *found;
}

// The tensor "pixels" of the input file, checked against what the model takes: [B, C, H, W] with
// C = in_chans and H, W multiples of the patch size (other sizes than the config's are fine: the
// position embedding is resampled).
torch::Tensor read_pixels(const std::string& path, const ModelConfig& config) {
  const auto file = io::load_safetensors(path);
  const auto& pixels = find_tensor(file, path, "pixels");
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

// "features" [B, T, F] and "lengths" [B] (optional), checked against the Conformer's input.
std::pair<torch::Tensor, torch::Tensor> read_features(const std::string& path,
                                                      const ModelConfig& config) {
  const auto file = io::load_safetensors(path);
  const auto& features = find_tensor(file, path, "features");
  const std::string what = path + ": tensor 'features' ";
  if (!features.is_floating_point()) {
    throw std::runtime_error(what + "must be floating point, got " +
                             std::string(c10::toString(features.scalar_type())));
  }
  const int64_t dim = config.conformer.input_dim();
  if (features.dim() != 3 || features.size(0) < 1 || features.size(2) != dim) {
    throw std::runtime_error(what + "must be [B, T, " + std::to_string(dim) +
                             "] with B >= 1, got " + shape_of(features));
  }
  const int64_t needed = conformer_subsampling_min_frames(config.conformer.subsampling());
  if (features.size(1) < needed) {
    throw std::runtime_error(what + shape_of(features) + ": too short, " +
                             std::to_string(features.size(1)) + " frames; subsampling " +
                             config.conformer.subsampling() + " needs at least " +
                             std::to_string(needed));
  }
  torch::Tensor lengths;
  if (file.tensors.contains("lengths")) {
    lengths = file.tensors["lengths"];
    const std::string lwhat = path + ": tensor 'lengths' ";
    if (lengths.is_floating_point() || lengths.is_complex() ||
        lengths.scalar_type() == torch::kBool) {
      throw std::runtime_error(lwhat + "must be integral, got " +
                               std::string(c10::toString(lengths.scalar_type())));
    }
    if (lengths.dim() != 1 || lengths.size(0) != features.size(0)) {
      throw std::runtime_error(lwhat + "must be [B = " + std::to_string(features.size(0)) +
                               "], got " + shape_of(lengths));
    }
    const int64_t lo = lengths.min().item<int64_t>(), hi = lengths.max().item<int64_t>();
    if (lo < 0 || hi > features.size(1)) {
      throw std::runtime_error(lwhat +
                               "values must lie in [0, T = " + std::to_string(features.size(1)) +
                               "], got " + std::to_string(lo) + " ... " + std::to_string(hi));
    }
  }
  return {features, lengths};
}

int run_forward(const ForwardOptions& options) {
  if (options.device == "cuda" && !torch::cuda::is_available()) {
    throw std::runtime_error("--device cuda: no CUDA device is available to this process");
  }
  const auto config = resolve_model_config(options.model, options.overrides);
  const bool vit = config.family == ModelFamily::kViT;
  if (options.stream && vit) throw std::runtime_error("--stream: only a Conformer streams");
  // The input is checked before the model is built: building ViT-H takes seconds.
  torch::Tensor pixels, features, lengths;
  if (vit) {
    pixels = read_pixels(options.input, config);
  } else {
    std::tie(features, lengths) = read_features(options.input, config);
    if (options.stream && config.streaming.chunk_size <= 0) {
      throw std::runtime_error(
          "--stream: the config has no streaming.chunk_size (set one with "
          "--set streaming.chunk_size=16)");
    }
    if (options.stream && lengths.defined() && lengths.min().item<int64_t>() != features.size(1)) {
      throw std::runtime_error(
          "--stream: the streams of a batch advance together; every length "
          "must be T = " +
          std::to_string(features.size(1)));
    }
  }

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
  const auto dtype = dtype_flag(options.dtype);
  model.module->eval();
  model.module->to(device, dtype);
  // Written as float32 whatever the compute dtype (bf16 and fp16 convert exactly), so that a
  // comparison script need not care.
  io::TensorDict tensors;
  const auto save = [&](const std::string& name, const torch::Tensor& t) {
    tensors.insert(name, t.is_floating_point() ? t.to(torch::kCPU, torch::kFloat).contiguous()
                                               : t.to(torch::kCPU, torch::kLong).contiguous());
  };
  std::string input, summary;
  {
    torch::InferenceMode inference;
    if (vit) {
      const auto output = model.vit(pixels.to(device, dtype));
      const std::string name = config.vit.num_classes() > 0 ? "logits" : "features";
      save(name, output);
      input = "pixels " + shape_of(pixels);
      summary = name + " " + shape_of(output);
    } else {
      const auto& streaming = config.streaming;
      torch::Tensor encoded, out_lengths;
      if (options.stream) {
        std::tie(encoded, out_lengths) = model.conformer->forward_chunk_by_chunk(
            features.to(device, dtype), streaming.chunk_size, streaming.num_left_chunks);
      } else {
        std::tie(encoded, out_lengths) = model.conformer(
            features.to(device, dtype), lengths.defined() ? lengths.to(device) : lengths,
            streaming.chunk_size, streaming.num_left_chunks);
      }
      save("encoded", encoded);
      save("lengths", out_lengths);
      input = "features " + shape_of(features);
      summary = "encoded " + shape_of(encoded);
      if (config.conformer.vocab_size() > 0) {
        const auto logits = model.conformer->ctc_log_probs(encoded);
        save("logits", logits);
        summary += ", logits " + shape_of(logits);
      }
      if (streaming.chunk_size > 0) {
        summary += options.stream ? " (streamed" : " (chunk mask";
        summary += ", chunk " + std::to_string(streaming.chunk_size) + ", left chunks " +
                   std::to_string(streaming.num_left_chunks) + ")";
      }
    }
  }
  io::save_safetensors(options.output, tensors,
                       {{"model", config.name},
                        {"config", config.source},
                        {"weights", weights},
                        {"device", options.device},
                        {"dtype", options.dtype}});
  std::cout << config.name << " (" << config.source << "), " << weights << "\n"
            << input << " on " << options.device << " in " << options.dtype << " -> " << summary
            << " -> " << options.output << "\n";
  return 0;
}

}  // namespace

Command add_forward_command(CLI::App& app) {
  auto options = std::make_shared<ForwardOptions>();
  auto* sub = app.add_subcommand(
      "forward",
      "Run a model on a safetensors file ('pixels' for ViT, 'features' and 'lengths' for the "
      "Conformer); write its outputs");
  add_model_options(sub, options->model, options->weights, options->format, options->overrides,
                    all_checkpoint_formats());
  sub->add_option("--input", options->input,
                  "safetensors file with 'pixels' [B, C, H, W] (ViT) or 'features' [B, T, F] and "
                  "optionally 'lengths' [B] (Conformer)")
      ->required();
  sub->add_option("--output", options->output,
                  "safetensors file to write: 'logits' or 'features' (ViT); 'encoded', 'lengths' "
                  "and with a CTC head 'logits' (Conformer)")
      ->required();
  sub->add_flag("--stream", options->stream,
                "Conformer: encode chunk by chunk through the streaming caches "
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
