// The model sources compiled into attnzoo, one factory each (model_source.cpp lists them), and
// what their importers share: the document they build, the name of a folder's model, the
// weights file a folder holds. Internal to configs/.
#pragma once

#include <attnzoo/configs/model_source.h>
#include <attnzoo/configs/source_json.h>

#include <yaml-cpp/yaml.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnzoo {

std::unique_ptr<ModelSource> make_hf_source();
std::unique_ptr<ModelSource> make_timm_source();
std::unique_ptr<ModelSource> make_wenet_source();
std::unique_ptr<ModelSource> make_espnet_source();
std::unique_ptr<ModelSource> make_nemo_source();

namespace detail {

// A model name (letters, digits, _ - .) from a folder's name: "vit-base-patch16-224/".
std::string source_model_name(const std::string& path);

// The config.json of the folder `path`, when it is a folder holding one that reads as a JSON
// object; std::nullopt otherwise (the sources' detect()).
std::optional<SourceJson> folder_config(const std::string& path);

// The first of `names` that is a file in `dir`, as an absolute path; ConfigError naming the
// folder and the names looked for when there is none.
std::string source_file(const std::string& dir, const std::vector<std::string>& names,
                        const std::string& what);
// A checkpoint of a training folder: the first of `preferred` that is a file in `dir`, else the
// only file ending in `extension` (other than the names in `except`), as an absolute path;
// ConfigError naming the folder, the first preferred name and the files found when there are
// none or several ("name one with --weights").
std::string training_checkpoint(const std::string& dir, const std::vector<std::string>& preferred,
                                const std::string& extension,
                                const std::vector<std::string>& except = {});
// The weights of a Hugging Face style folder: model.safetensors, else its sharded index, else
// pytorch_model.bin, else its index (source_file's error when none is there).
std::string folder_weights(const std::string& dir);

// `document` as YAML text, after a comment block of `header` lines; sequences marked flow stay
// flow ([3, 224, 224]).
std::string emit_document(const YAML::Node& document, const std::vector<std::string>& header);

// The shortest text of `value` that reads back as exactly `value`, as a YAML float (1.0e-12,
// 0.9256198347107438, 2.0).
std::string number_text(double value);

// A YAML sequence of `values` in flow style; doubles as number_text writes them.
YAML::Node flow_list(const std::vector<int64_t>& values);
YAML::Node flow_list(const std::vector<double>& values);

}  // namespace detail
}  // namespace attnzoo
