#include <attnzoo/configs/model_source.h>

#include <attnzoo/configs/sources.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <sstream>

namespace attnzoo {
namespace {

namespace fs = std::filesystem;

// Every source, in the order they are asked. A new source adds its factory here.
const std::vector<std::unique_ptr<ModelSource>>& sources() {
  static const auto list = [] {
    std::vector<std::unique_ptr<ModelSource>> all;
    all.push_back(make_hf_source());
    all.push_back(make_timm_source());
    all.push_back(make_wenet_source());
    all.push_back(make_espnet_source());
    all.push_back(make_nemo_source());
    return all;
  }();
  return list;
}

}  // namespace

bool is_model_source(const std::string& path) {
  for (const auto& source : sources()) {
    if (source->detect(path)) return true;
  }
  return false;
}

const ModelSource& model_source_of(const std::string& path) {
  for (const auto& source : sources()) {
    if (source->detect(path)) return *source;
  }
  std::error_code error;
  if (!fs::exists(path, error)) throw ConfigError(path + ": no such file or folder", path, "");
  throw ConfigError(path +
                        ": not a model folder attnzoo reads: it looks for a Hugging Face folder "
                        "(config.json with model_type vit, deit or audio-spectrogram-transformer), "
                        "a timm folder (config.json with architecture and pretrained_cfg), a "
                        "WeNet experiment folder (train.yaml), an ESPnet experiment folder or "
                        "zip (config.yaml, meta.yaml) or a NeMo .nemo file (a tar with "
                        "model_config.yaml)",
                    path, "");
}

std::vector<std::string> model_source_names() {
  std::vector<std::string> names;
  for (const auto& source : sources()) names.emplace_back(source->name());
  return names;
}

std::string describe_model_source(const std::string& path) {
  return model_source_of(path).document(path);
}

ModelConfig load_model_source(const std::string& path, const std::vector<std::string>& overrides) {
  const auto& source = model_source_of(path);
  // Messages name the source's folder; relative paths of the document (none: its importers
  // write absolute ones) would resolve against it. A source that is a file (a .nemo archive)
  // holds its config as an entry.
  std::error_code error;
  const std::string where =
      fs::is_regular_file(path, error)
          ? path + "#" + source.config_name()
          : (fs::path(path) / source.config_name()).lexically_normal().string();
  return parse_model_config(source.document(path), where, overrides);
}

namespace detail {

std::string source_model_name(const std::string& path) {
  auto folder = fs::path(path).lexically_normal();
  if (folder.filename().empty()) folder = folder.parent_path();
  std::string name = fs::absolute(folder).lexically_normal().filename().string();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
  }
  return name.empty() || name == "." || name == ".." ? "model" : name;
}

std::optional<SourceJson> folder_config(const std::string& path) {
  const auto config = fs::path(path) / "config.json";
  std::error_code error;
  if (!fs::is_directory(path, error) || !fs::is_regular_file(config, error)) return std::nullopt;
  try {
    return SourceJson::read(config.string());
  } catch (const ConfigError&) {
    return std::nullopt;
  }
}

std::string training_checkpoint(const std::string& dir, const std::vector<std::string>& preferred,
                                const std::string& extension,
                                const std::vector<std::string>& except) {
  const fs::path folder(dir);
  std::error_code error;
  for (const auto& name : preferred) {
    if (fs::is_regular_file(folder / name, error)) {
      return fs::absolute(folder / name).lexically_normal().string();
    }
  }
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    const auto name = entry.path().filename().string();
    if (entry.is_regular_file(error) && entry.path().extension() == extension &&
        std::find(except.begin(), except.end(), name) == except.end()) {
      found.push_back(name);
    }
  }
  std::sort(found.begin(), found.end());
  if (found.size() == 1) return fs::absolute(folder / found.front()).lexically_normal().string();
  std::string list;
  for (const auto& name : found) list += (list.empty() ? "" : ", ") + name;
  const auto first = preferred.empty() ? std::string("checkpoint") : preferred.front();
  throw ConfigError(
      dir + ": no " + first +
          (found.empty() ? " and no other " + extension + " file"
                         : ", and " + std::to_string(found.size()) + " other " + extension +
                               " files (" + list + "): name one with --weights"),
      dir, "");
}

std::string folder_weights(const std::string& dir) {
  return source_file(dir,
                     {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                      "pytorch_model.bin.index.json"},
                     "weights");
}

std::string source_file(const std::string& dir, const std::vector<std::string>& names,
                        const std::string& what) {
  std::error_code error;
  for (const auto& name : names) {
    const auto file = fs::path(dir) / name;
    if (fs::is_regular_file(file, error)) return fs::absolute(file).lexically_normal().string();
  }
  std::string list;
  for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
  throw ConfigError(dir + ": no " + what + " (looked for " + list + ")", dir, "");
}

namespace {

// Every number written with all the digits a double needs to read back as itself.
void emit(YAML::Emitter& out, const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      out << YAML::BeginMap;
      for (const auto& item : node) {
        out << YAML::Key << item.first.Scalar() << YAML::Value;
        emit(out, item.second);
      }
      out << YAML::EndMap;
      return;
    case YAML::NodeType::Sequence:
      if (node.Style() == YAML::EmitterStyle::Flow) out << YAML::Flow;
      out << YAML::BeginSeq;
      for (const auto& item : node) emit(out, item);
      out << YAML::EndSeq;
      return;
    case YAML::NodeType::Null:
      out << YAML::Null;
      return;
    default:
      out << node.Scalar();
  }
}

}  // namespace

std::string number_text(double value) {
  for (int precision = 15; precision <= 17; ++precision) {
    std::ostringstream text;
    text << std::setprecision(precision) << value;
    if (std::stod(text.str()) == value || precision == 17) {
      std::string s = text.str();
      // A decimal point in the mantissa, as YAML 1.1 readers (PyYAML) need to read a float:
      // 1.0e-12, 2.0.
      const auto exponent = s.find_first_of("eE");
      const auto mantissa = s.substr(0, exponent);
      if (mantissa.find('.') == std::string::npos &&
          mantissa.find_first_of("ni") == std::string::npos) {
        s.insert(exponent == std::string::npos ? s.size() : exponent, ".0");
      }
      return s;
    }
  }
  return "0.0";
}

YAML::Node flow_list(const std::vector<int64_t>& values) {
  YAML::Node list(YAML::NodeType::Sequence);
  for (const auto v : values) list.push_back(v);
  list.SetStyle(YAML::EmitterStyle::Flow);
  return list;
}

YAML::Node flow_list(const std::vector<double>& values) {
  YAML::Node list(YAML::NodeType::Sequence);
  for (const auto v : values) list.push_back(number_text(v));
  list.SetStyle(YAML::EmitterStyle::Flow);
  return list;
}

std::string emit_document(const YAML::Node& document, const std::vector<std::string>& header) {
  YAML::Emitter out;
  out.SetDoublePrecision(std::numeric_limits<double>::max_digits10);
  emit(out, document);
  std::string text;
  for (const auto& line : header) text += "# " + line + "\n";
  return text + out.c_str() + "\n";
}

}  // namespace detail
}  // namespace attnzoo
