#include <attnzoo/configs/model_config.h>

#include <attnzoo/configs/model_family.h>
#include <attnzoo/configs/model_source.h>
#include <attnzoo/configs/yaml_reader.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace attnzoo {
namespace {

using detail::Document;
using detail::MapReader;

LabelsConfig read_labels(MapReader& root, const std::string& source) {
  LabelsConfig labels;
  if (!root.has("labels")) return labels;
  if (root.is_sequence("labels")) {
    labels.source = LabelsConfig::Source::kInline;
    labels.names = *root.string_list("labels");
    return labels;
  }
  const std::string value = root.string("labels", std::nullopt);
  if (value == "imagenet") {
    labels.source = LabelsConfig::Source::kImageNet;
    return labels;
  }
  namespace fs = std::filesystem;
  fs::path file(value);
  if (file.is_relative()) file = fs::path(source).parent_path() / file;
  std::error_code error;
  if (!fs::is_regular_file(file, error)) {
    root.fail("labels",
              "expected 'imagenet', a list of names or a labels file relative to the "
              "config; '" +
                  file.string() + "' is not a file");
  }
  labels.source = LabelsConfig::Source::kFile;
  labels.file = file.lexically_normal().string();
  return labels;
}

bool valid_name(const std::string& name) {
  for (const char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return !name.empty();
}

ModelConfig read_document(const Document& document, const std::vector<std::string>& overrides) {
  MapReader root(document, document.root(), "");
  ModelConfig config;
  config.source = document.source();
  config.overrides = overrides;
  config.name = root.string("name", std::nullopt);
  // Names are registry keys and CLI arguments.
  if (!valid_name(config.name)) {
    root.fail("name", "'" + config.name + "' is not a model name (letters, digits, _ - .)");
  }
  const auto& family = model_family(root.choice("family", std::nullopt, model_family_names()));
  config.family = family.name();
  family.read(root, config);
  config.labels = read_labels(root, document.source());
  if (family.input_kind() != InputKind::kImages &&
      config.labels.source == LabelsConfig::Source::kImageNet) {
    root.fail("labels", "imagenet labels are for image classifiers; the labels of a " +
                            config.family +
                            " model (its classes or CTC units) are a file, one per line, "
                            "relative to this YAML");
  }
  if (root.has("inference")) {
    auto inference = root.map("inference", true);
    config.inference.quantize = inference.enumeration("quantize", Quantization::kNone,
                                                      {Quantization::kNone, Quantization::kInt8});
    config.inference.dtype = inference.enumeration("dtype", InferenceDtype::kFp32,
                                                   {InferenceDtype::kFp32, InferenceDtype::kBf16,
                                                    InferenceDtype::kFp16, InferenceDtype::kAuto});
    inference.finish();
  }
  root.finish();
  config.stated = document.read_keys();
  return config;
}

}  // namespace

ConfigError ModelConfig::wrong_architecture() const {
  return ConfigError(source + ": model '" + name + "' is family " + family +
                         ", whose architecture is of another type than the one asked for",
                     source, "architecture");
}

bool ModelConfig::overridden(const std::string& key_path) const {
  for (const auto& item : overrides) {
    const auto key = item.substr(0, item.find('='));
    if (key == key_path || key_path.rfind(key + ".", 0) == 0) return true;
  }
  return false;
}

ModelConfig parse_model_config(const std::string& yaml, const std::string& source,
                               const std::vector<std::string>& overrides) {
  Document document(yaml, source);
  for (const auto& item : overrides) document.apply_override(item);
  return read_document(document, overrides);
}

ModelConfig load_model_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error) || is_model_source(path)) {
    return load_model_source(path, overrides);
  }
  return parse_model_config(detail::read_document_file(path, "config file"), path, overrides);
}

}  // namespace attnzoo
