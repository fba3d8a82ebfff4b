// The subcommands of the `attnzoo` CLI. Each add_*_command registers its CLI11 subcommand and
// returns what to run once the command line has been parsed; main() runs it and turns exceptions
// into one-line errors.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace attnzoo::cli {

// Runs the parsed command; returns the process exit status.
using Runner = std::function<int()>;

struct Command {
  CLI::App* app;
  Runner run;
};

Command add_version_command(CLI::App& app);
Command add_models_command(CLI::App& app);
Command add_demo_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_forward_command(CLI::App& app);
Command add_preprocess_command(CLI::App& app);
Command add_classify_command(CLI::App& app);
Command add_features_command(CLI::App& app);
Command add_encode_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
Command add_attention_map_command(CLI::App& app);

}  // namespace attnzoo::cli
