// The subcommands of the `attnzoo` CLI. Each add_*_command registers its CLI11 subcommand and
// returns what to run once the command line has been parsed; main() runs it and turns exceptions
// into one-line errors.
#pragma once

#include <attnzoo/api/inference_dtype.h>
#include <attnzoo/configs/model_family.h>
#include <attnzoo/configs/model_options.h>
#include <attnzoo/core/dtype_device.h>

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace attnzoo::cli {

// Runs the parsed command; returns the process exit status.
using Runner = std::function<int()>;

struct Command {
  CLI::App* app;
  Runner run;
};

// The options of every command that builds a model of the zoo: --model (required), --weights,
// --format (one of `formats`: all_checkpoint_formats() of configs/model_family.h), --key and
// --set.
inline void add_model_options(CLI::App* sub, std::string& model, std::string& weights,
                              std::string& format, std::string& key,
                              std::vector<std::string>& overrides,
                              const std::vector<std::string>& formats) {
  sub->add_option("--model", model,
                  "A registered name (see attnzoo models), a YAML file, or a model folder as its "
                  "source ships it (Hugging Face, timm)")
      ->required();
  sub->add_option("--weights", weights,
                  "Weights: safetensors, a PyTorch checkpoint (.pt .pth .bin .ckpt) or a sharded "
                  "index (*.index.json) (default: the model folder's own, else random weights)");
  sub->add_option("--format", format,
                  "Checkpoint layout (default: the config's checkpoint.format, else detected)")
      ->check(CLI::IsMember(formats));
  sub->add_option("--key", key,
                  "The state dict of a PyTorch training checkpoint (state_dict, state_dict_ema, "
                  "...; a/b for a nested one; default: found)");
  sub->add_option("--set", overrides,
                  "Override a config value, key.path=value (YAML value); repeatable")
      ->allow_extra_args(false);
}

// The same into a task API's options.
inline void add_model_options(CLI::App* sub, std::string& model, ModelOptions& options,
                              const std::vector<std::string>& formats) {
  add_model_options(sub, model, options.weights, options.format, options.key, options.overrides,
                    formats);
}

// --device (cpu or cuda) and --dtype (fp32, bf16, fp16 or auto) into a task API's options; no
// --dtype leaves the choice to the config's inference.dtype (fp32 unless it says otherwise).
inline void add_device_options(CLI::App* sub, ModelOptions& options) {
  sub->add_option_function<std::string>(
         "--device", [&options](const std::string& name) { options.device = c10::Device(name); },
         "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->default_str("cpu");
  sub->add_option_function<std::string>(
         "--dtype",
         [&options](const std::string& name) {
           // CLI11 runs the callbacks in the order the options are declared: --device is known.
           options.dtype = parse_inference_dtype("--dtype", name, options.device);
         },
         "fp32, bf16, fp16, or auto: bf16 on a CPU with AVX512-BF16 or AMX, else fp32 "
         "(default: the config's inference.dtype, fp32 unless it says otherwise)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "auto"}));
}

Command add_version_command(CLI::App& app);
Command add_models_command(CLI::App& app);
Command add_demo_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_forward_command(CLI::App& app);
Command add_preprocess_command(CLI::App& app);
Command add_classify_command(CLI::App& app);
Command add_convert_command(CLI::App& app);
Command add_features_command(CLI::App& app);
Command add_encode_command(CLI::App& app);
Command add_transcribe_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
Command add_attention_map_command(CLI::App& app);
Command add_serve_command(CLI::App& app);

}  // namespace attnzoo::cli
