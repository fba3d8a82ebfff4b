// attnzoo: one binary, git-style subcommands.
#include "tools/cli/commands.h"

#include <attnzoo/configs/zoo_path.h>
#include <attnzoo/core/heap_retention.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace {

constexpr int kUsageError = 2;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnzoo: Vision Transformers and Conformers on LibTorch", "attnzoo"};
  app.require_subcommand(1, 1);
  app.fallthrough(false);
  // Before the subcommand, as git's -C: attnzoo --zoo ~/models classify --model mine ...
  std::vector<std::string> zoo_folders;
  app.add_option("--zoo", zoo_folders,
                 "A folder of model YAMLs searched before the zoo (configs/zoo_path.h); "
                 "repeatable, first given first")
      ->check(CLI::ExistingDirectory);
  const std::vector<attnzoo::cli::Command> commands = {
      attnzoo::cli::add_version_command(app),       attnzoo::cli::add_models_command(app),
      attnzoo::cli::add_demo_command(app),          attnzoo::cli::add_bench_command(app),
      attnzoo::cli::add_forward_command(app),       attnzoo::cli::add_preprocess_command(app),
      attnzoo::cli::add_classify_command(app),      attnzoo::cli::add_features_command(app),
      attnzoo::cli::add_encode_command(app),        attnzoo::cli::add_transcribe_command(app),
      attnzoo::cli::add_attention_map_command(app), attnzoo::cli::add_train_command(app),
      attnzoo::cli::add_eval_command(app),          attnzoo::cli::add_serve_command(app),
      attnzoo::cli::add_convert_command(app),
  };

  // An unknown subcommand gets its own message rather than CLI11's "arguments were not expected".
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const auto& command : commands) known = known || command.app->get_name() == argv[1];
    if (!known) {
      std::cerr << "attnzoo: unknown command '" << argv[1] << "' (see attnzoo --help)\n";
      return kUsageError;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::ParseError& e) {
    // Help for a subcommand is reported as a CallForHelp thrown from within that subcommand.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::cerr << "attnzoo: " << message << " (see attnzoo --help)\n";
    return kUsageError;
  }
  for (const auto& folder : zoo_folders) attnzoo::add_zoo_folder(folder);
  for (const auto& command : commands) {
    if (!command.app->parsed()) continue;
    // Every command but the server keeps freed memory for the next tensors (core/heap_retention.h);
    // the server keeps glibc's defaults, so that a model it unloads is memory handed back.
    const char* keep = std::getenv("ATTNZOO_KEEP_FREED_MEMORY");
    if (command.app->get_name() != "serve" && (keep == nullptr || std::strcmp(keep, "0") != 0)) {
      attnzoo::retain_freed_heap_memory();
    }
    try {
      return command.run();
    } catch (const c10::Error& e) {
      std::cerr << "attnzoo " << command.app->get_name() << ": " << e.what_without_backtrace()
                << "\n";
    } catch (const std::exception& e) {
      std::cerr << "attnzoo " << command.app->get_name() << ": " << e.what() << "\n";
    }
    return 1;
  }
  return kUsageError;  // unreachable: require_subcommand(1, 1)
}
