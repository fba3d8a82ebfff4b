// `attnzoo models`: the names of the model zoo with their size and cost, from the configs alone
// (configs/model_stats.h: analytic, so listing does not build ViT-H).
#include "tools/cli/commands.h"

#include <attnzoo/configs/model_source.h>
#include <attnzoo/configs/model_stats.h>
#include <attnzoo/configs/registry.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

namespace attnzoo::cli {

// `attnzoo models --describe DIR`: a model folder as the attnzoo YAML it is read as
// (configs/model_source.h), with its size and cost as comments: save it in a zoo folder and the
// model is a name of the zoo.
int describe(const std::string& path) {
  const auto yaml = describe_model_source(path);
  const auto config = load_model_source(path);
  const auto stats = model_stats(config);
  std::cout << yaml << "# " << stats.parameters << " parameters, " << stats.gflops()
            << " GFLOPs per " << stats.basis << "\n";
  return 0;
}

Command add_models_command(CLI::App& app) {
  auto* sub =
      app.add_subcommand("models", "List the models of the zoo, with parameters and GFLOPs");
  auto path = std::make_shared<std::string>();
  sub->add_option("--describe", *path,
                  "Print a model folder (Hugging Face, timm) as the attnzoo YAML it is read as");
  return {sub, [path] {
            if (!path->empty()) return describe(*path);
            const auto registry = default_registry();
            const auto names = registry.names();
            std::string folders;
            for (const auto& folder : registry.folders()) {
              folders += (folders.empty() ? "" : ", ") + folder;
            }
            if (names.empty()) {
              std::cout << "no models registered in "
                        << (folders.empty() ? "any zoo folder (see attnzoo version)" : folders)
                        << "\n";
              return 0;
            }
            std::cout << "# " << names.size() << " models from " << folders << "\n";
            for (const auto& [name, file] : registry.shadowed()) {
              std::cout << "# " << name << " of " << file << " is shadowed by "
                        << registry.file(name) << "\n";
            }
            std::cout << "# params: exact count of the built model's parameters\n"
                      << "# GFLOPs: 2 x multiply-accumulates of matrix products and convolutions "
                         "(norms, softmax, activations and additions not counted), per "
                         "\"GFLOPs per\": one image at the input size (vit), one second of audio "
                         "averaged over a 10 s utterance (conformer)\n";
            std::printf("%-34s %-9s %13s %10s %9s  %s\n", "name", "family", "params", "params(M)",
                        "GFLOPs", "GFLOPs per");
            for (const auto& name : names) {
              const auto config = registry.config(name);
              const auto stats = model_stats(config);
              std::printf("%-34s %-9s %13lld %10.2f %9.2f  %s\n", name.c_str(),
                          config.family.c_str(), static_cast<long long>(stats.parameters),
                          static_cast<double>(stats.parameters) / 1e6, stats.gflops(),
                          stats.basis.c_str());
            }
            return 0;
          }};
}

}  // namespace attnzoo::cli
