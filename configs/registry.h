// The model zoo: variant names (vit_base_patch16_224, ...) mapped to the YAML files that describe
// them, and the two doors in, create_model(name) and create_model_from_yaml(path), as timm's
// registry and create_model.
//
// A registry is the set of *.yaml files under an ordered list of zoo folders (each searched
// recursively, except its train/ folder of training runs), keyed by each file's `name:`. The
// first folder that defines a name wins: later ones are shadowed, so a user's folder can replace
// a model of the zoo or add new ones. The same name twice in one folder is an error naming both
// files. default_registry() searches the folders of configs/zoo_path.h: those added with
// add_zoo_folder(), $ATTNZOO_ZOO_PATH, the installed zoo, the build tree's.
//
//   auto model = attnzoo::create_model("vit_base_patch16_224", {"attention.backend=sdpa"});
//   model.module->eval();
//   auto logits = model.classify({images});  // images: [B, 3, 224, 224] -> [B, 1000]
//   auto vit = model.as<attnzoo::VisionTransformer>();  // the module as its own type
//   // model.config.image holds the preprocessing (input size, crop_pct, mean, std, ...)
#pragma once

#include <attnzoo/configs/model_config.h>
#include <attnzoo/configs/model_family.h>
#include <attnzoo/models/conformer.h>
#include <attnzoo/models/vit.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace attnzoo {

// A model built from its config: `module` is the family's module (VisionTransformerImpl,
// ConformerEncoderImpl, ...; module->as<T>() gives it typed) for eval(), to(), parameters() and
// weight loading; the family (configs/model_family.h) runs it on a batch.
struct ZooModel {
  ModelConfig config;
  std::shared_ptr<torch::nn::Module> module;

  const ModelFamily& family() const { return model_family(config.family); }
  // Classification logits [B, classes] of a batch on the module's device and dtype.
  torch::Tensor classify(const ModelInput& input) {
    return family().classify(*module, config, input);
  }
  // Every output of the model by name (ModelFamily::forward).
  NamedTensors forward(const ModelInput& input, bool stream = false) {
    return family().forward(*module, config, input, stream);
  }
  // The module as its own type, e.g. as<VisionTransformer>() or as<ConformerEncoder>(); an empty
  // holder (is_empty()) when it is of another type.
  template <class Holder>
  Holder as() const {
    return Holder(std::dynamic_pointer_cast<typename Holder::ContainedType>(module));
  }
};

// The folder of a zoo folder that holds training runs (attnzoo train), not models.
inline constexpr const char* kTrainRunsFolder = "train";
// The folder of a zoo folder that holds serve configs (attnzoo serve), not models.
inline constexpr const char* kServeConfigsFolder = "serve";

class ModelRegistry {
 public:
  // Scans each folder recursively (but not its kTrainRunsFolder or kServeConfigsFolder) for *.yaml
  // and *.yml files and reads each one's `name:` (the rest of a file is validated when that model
  // is asked for). A name of an earlier folder shadows the same name in later ones. Throws
  // ConfigError for a folder that is not a directory, a file without a valid name, or a name
  // defined twice in one folder.
  explicit ModelRegistry(const std::vector<std::string>& folders);
  explicit ModelRegistry(const std::string& folder)
      : ModelRegistry(std::vector<std::string>{folder}) {}

  const std::vector<std::string>& folders() const { return folders_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  // The YAML file of `name`; throws ConfigError naming the folders and the known models for an
  // unknown name.
  const std::string& file(const std::string& name) const;
  // The files whose names an earlier folder defines too, as (name, file), sorted.
  const std::vector<std::pair<std::string, std::string>>& shadowed() const { return shadowed_; }

  ModelConfig config(const std::string& name, const std::vector<std::string>& overrides = {}) const;

 private:
  std::vector<std::string> folders_;
  std::map<std::string, std::string> files_;  // name -> YAML file
  std::vector<std::pair<std::string, std::string>> shadowed_;
};

// The registry of the zoo's folders (configs/zoo_path.h zoo_folders()), scanned at each call (a
// few small files), so that a changed folder or environment variable is seen.
ModelRegistry default_registry();
std::vector<std::string> model_names();

// Parsed and validated configs, without building the model.
ModelConfig model_config(const std::string& name, const std::vector<std::string>& overrides = {});
ModelConfig model_config_from_yaml(const std::string& path,
                                   const std::vector<std::string>& overrides = {});
// `name_or_path` is read as a model of a source (configs/model_source.h: a Hugging Face, timm,
// WeNet or ESPnet folder, an ESPnet zip, a NeMo .nemo file) when it is a directory or ends in
// .zip or .nemo, as a YAML file when it ends in .yaml or .yml (or contains a '/': a source or a
// YAML file, by its contents), otherwise as a registered name: the CLI's --model.
ModelConfig resolve_model_config(const std::string& name_or_path,
                                 const std::vector<std::string>& overrides = {});

// Builds the model of a config, with freshly initialised weights (LibTorch's generator: seed it
// with torch::manual_seed for reproducible weights).
ZooModel build_model(const ModelConfig& config);
ZooModel create_model(const std::string& name, const std::vector<std::string>& overrides = {});
ZooModel create_model_from_yaml(const std::string& path,
                                const std::vector<std::string>& overrides = {});

// Loads weights into `model`, strictly (models/checkpoint.h: every missing, unexpected or
// mis-shaped tensor reported at once): a safetensors file, a PyTorch checkpoint (.pt .pth .bin
// .ckpt, read in C++ by io/torch_checkpoint.h; `key` names its state dict when it holds several,
// else the config's checkpoint.key for the config's own file) or a sharded index
// (io/weights_file.h). The layout is `format` when non-empty, else the config's
// checkpoint.format, else detected from the tensor names; the layout used is returned with what
// else the reading and the layout brought (LoadedWeights::notes: the state dict's key, DDP's
// prefix removed, Hugging Face's LayerNorm eps 1e-12 for a config that states timm's 1e-6 for
// timm's layout; model.config follows). `new_prefixes`: prefixes of the model's parameter and
// buffer names the file may lack (they keep their current values; the file's names must then be
// ours, the attnzoo layout), e.g. {"decoder."} to add an attention decoder to trained CTC weights;
// a prefix that begins no name is an Error.
LoadedWeights load_weights(ZooModel& model, const std::string& path, const std::string& format = "",
                           const std::string& key = "",
                           const std::vector<std::string>& new_prefixes = {});

}  // namespace attnzoo
