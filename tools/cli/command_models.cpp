// `attnzoo models`: the names of the model zoo.
#include "tools/cli/commands.h"

#include <iostream>

namespace attnzoo::cli {

Command add_models_command(CLI::App& app) {
  auto* sub = app.add_subcommand("models", "List the models of the zoo");
  return {sub, [] {
            // The zoo is filled by the model families (ViT, Conformer) as they are registered;
            // until then the list is empty, and says so.
            std::cout << "no models registered\n";
            return 0;
          }};
}

}  // namespace attnzoo::cli
