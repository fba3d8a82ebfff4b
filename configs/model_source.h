// Models as their sources ship them: a folder that Hugging Face's save_pretrained or timm's
// save_for_hf wrote (config.json, the weights, the preprocessor's settings), a WeNet or ESPnet
// experiment folder (train.yaml, final.pt, units.txt; config.yaml), or a NeMo .nemo file (a tar
// of model_config.yaml, model_weights.ckpt and the tokenizer), given where a model
// is asked for (`--model DIR`, ImageClassifier("DIR"), a serve config's `model:`), runs as it
// is: no Python, no hand-written YAML.
//
// Each source is an importer, one file each (hf_source.cpp, timm_source.cpp, wenet_source.cpp,
// espnet_source.cpp, nemo_source.cpp), listed once in model_source.cpp: it tells its folders (or
// files) by their contents and reads the source's own config into an
// attnzoo model document, the same YAML a user could write (so that overrides, validation and the
// families read it as they read any config, and `attnzoo models --describe DIR` prints exactly
// what runs). The weights come with it, as the document's checkpoint.file.
//
// A value of the source's config that attnzoo cannot honour (a model_type, an architecture, an
// activation, a resize filter it does not implement) is a ConfigError naming the file, the key
// and the value: a wrong number is never made silently.
//
//   auto config = attnzoo::resolve_model_config("./vit-base-patch16-224/");  // an HF folder
//   std::cout << attnzoo::describe_model_source("./vit-base-patch16-224/");  // as attnzoo YAML
#pragma once

#include <attnzoo/configs/model_config.h>

#include <string>
#include <vector>

namespace attnzoo {

class ModelSource {
 public:
  virtual ~ModelSource() = default;
  virtual const char* name() const = 0;  // "hf", "timm"
  // Whether `path` (a folder, or a file) is a model of this source, by its files.
  virtual bool detect(const std::string& path) const = 0;
  // The model at `path` as an attnzoo model document (YAML text), its files named by absolute
  // paths. Throws ConfigError naming the source's file, key and value for what it cannot honour.
  virtual std::string document(const std::string& path) const = 0;
  // The folder's own config file, which messages about the document name ("config.json").
  virtual const char* config_name() const { return "config.json"; }
};

// Whether `path` is a model of one of the sources (a folder they recognise).
bool is_model_source(const std::string& path);
// The source that recognises `path`; ConfigError listing what each source looks for when none
// does.
const ModelSource& model_source_of(const std::string& path);
// Every source's name, in the order they are asked.
std::vector<std::string> model_source_names();

// The model at `path` as attnzoo YAML (what `attnzoo models --describe` prints).
std::string describe_model_source(const std::string& path);
// Its config, with `overrides` applied as to any document.
ModelConfig load_model_source(const std::string& path,
                              const std::vector<std::string>& overrides = {});

}  // namespace attnzoo
