#include <attnzoo/configs/registry.h>
#include <attnzoo/layers/int8_inference.h>

#include <attnzoo/configs/yaml_reader.h>
#include <attnzoo/configs/zoo_path.h>
#include <attnzoo/io/weights_file.h>
#include <attnzoo/models/checkpoint.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace attnzoo {
namespace {

namespace fs = std::filesystem;

bool has_yaml_extension(const fs::path& path) {
  const auto ext = path.extension().string();
  return ext == ".yaml" || ext == ".yml";
}

// Only `name:` is read here: listing the zoo should not depend on every file being valid, and
// each file is validated in full when its model is asked for.
std::string read_name(const fs::path& file) {
  const auto text = detail::read_document_file(file.string(), "model config");
  detail::Document document(text, file.string());
  detail::MapReader root(document, document.root(), "");
  return root.string("name", std::nullopt);
}

}  // namespace

ModelRegistry::ModelRegistry(const std::vector<std::string>& folders) : folders_(folders) {
  for (const auto& folder : folders) {
    std::error_code error;
    if (!fs::is_directory(folder, error)) {
      throw ConfigError(folder + ": not a zoo folder (a directory of model YAML files)", folder,
                        "");
    }
    // Sorted, so that which of two clashing files is named first does not depend on the file
    // system's order. The training runs of <folder>/train/ and the serve configs of
    // <folder>/serve/ are not models: not searched. Links to
    // folders are followed (a build tree's zoo is made of them), each real folder once.
    std::vector<fs::path> files;
    std::set<fs::path> seen{fs::canonical(folder, error)};
    for (auto it = fs::recursive_directory_iterator(
             folder, fs::directory_options::follow_directory_symlink);
         it != fs::end(it); ++it) {
      if (it->is_directory()) {
        const auto real = fs::canonical(it->path(), error);
        const auto name = it->path().filename();
        if ((it.depth() == 0 && (name == kTrainRunsFolder || name == kServeConfigsFolder)) ||
            error || !seen.insert(real).second) {
          it.disable_recursion_pending();
        }
        continue;
      }
      if (it->is_regular_file() && has_yaml_extension(it->path())) files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    std::map<std::string, std::string> here;
    for (const auto& file : files) {
      const std::string name = read_name(file);
      const auto [it, inserted] = here.emplace(name, file.string());
      if (!inserted) {
        throw ConfigError("model '" + name + "' is registered twice: by " + it->second +
                              " and by " + file.string(),
                          file.string(), "name");
      }
    }
    for (const auto& [name, file] : here) {
      if (!files_.emplace(name, file).second) shadowed_.emplace_back(name, file);
    }
  }
  std::sort(shadowed_.begin(), shadowed_.end());
}

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> names;
  for (const auto& item : files_) names.push_back(item.first);
  return names;
}

bool ModelRegistry::contains(const std::string& name) const { return files_.count(name) > 0; }

const std::string& ModelRegistry::file(const std::string& name) const {
  const auto it = files_.find(name);
  if (it == files_.end()) {
    std::string known;
    for (const auto& item : files_) known += (known.empty() ? "" : ", ") + item.first;
    std::string searched;
    for (const auto& folder : folders_) searched += (searched.empty() ? "" : ", ") + folder;
    throw ConfigError(
        "unknown model '" + name + "'; the zoo (" +
            (searched.empty() ? "no folder found: set " + std::string(kZooPathVariable)
                              : searched) +
            ") has: " + (known.empty() ? "none" : known),
        "", "");
  }
  return it->second;
}

ModelConfig ModelRegistry::config(const std::string& name,
                                  const std::vector<std::string>& overrides) const {
  return load_model_config(file(name), overrides);
}

ModelRegistry default_registry() { return ModelRegistry(zoo_folders()); }

std::vector<std::string> model_names() { return default_registry().names(); }

ModelConfig model_config(const std::string& name, const std::vector<std::string>& overrides) {
  return default_registry().config(name, overrides);
}

ModelConfig model_config_from_yaml(const std::string& path,
                                   const std::vector<std::string>& overrides) {
  return load_model_config(path, overrides);
}

ModelConfig resolve_model_config(const std::string& name_or_path,
                                 const std::vector<std::string>& overrides) {
  const fs::path path(name_or_path);
  std::error_code error;
  if (has_yaml_extension(path) || name_or_path.find('/') != std::string::npos ||
      path.extension() == ".zip" || path.extension() == ".nemo" || fs::is_directory(path, error)) {
    return load_model_config(name_or_path, overrides);
  }
  return model_config(name_or_path, overrides);
}

ZooModel build_model(const ModelConfig& config) {
  ZooModel model;
  model.config = config;
  model.module = model_family(config.family).build(config);
  if (config.inference.quantize == Quantization::kInt8) set_int8_inference(*model.module);
  return model;
}

ZooModel create_model(const std::string& name, const std::vector<std::string>& overrides) {
  return build_model(model_config(name, overrides));
}

ZooModel create_model_from_yaml(const std::string& path,
                                const std::vector<std::string>& overrides) {
  return build_model(load_model_config(path, overrides));
}

LoadedWeights load_weights(ZooModel& model, const std::string& path, const std::string& format,
                           const std::string& key, const std::vector<std::string>& new_prefixes) {
  io::WeightsFileOptions options;
  // The config's key belongs to the config's own weights file.
  options.key =
      !key.empty() || path != model.config.checkpoint_file ? key : model.config.checkpoint_key;
  auto file = io::load_weights_file(path, options);
  const std::string requested = format.empty() ? model.config.checkpoint_format : format;
  int64_t kept = 0;
  if (!new_prefixes.empty()) {
    const auto own = state_dict(*model.module);
    for (const auto& prefix : new_prefixes) {
      bool names_one = false;
      for (const auto& item : own) {
        if (item.key().rfind(prefix, 0) != 0) continue;
        names_one = true;
        if (!file.tensors.contains(item.key())) {
          file.tensors.insert(item.key(), item.value());
          ++kept;
        }
      }
      if (!names_one) {
        throw Error(path + ": the new prefix '" + prefix +
                    "' begins no parameter or buffer name of " + model.config.name);
      }
    }
  }
  auto loaded =
      model.family().load_weights(*model.module, model.config, file.tensors, requested, path);
  loaded.notes.insert(loaded.notes.begin(), file.notes.begin(), file.notes.end());
  if (!new_prefixes.empty()) {
    loaded.notes.push_back(std::to_string(kept) + " tensors under the new prefixes kept the " +
                           "model's initialization");
  }
  return loaded;
}

}  // namespace attnzoo
