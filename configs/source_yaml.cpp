#include <attnzoo/configs/source_yaml.h>

#include <attnzoo/configs/yaml_reader.h>

#include <cmath>

namespace attnzoo::detail {

SourceYaml::SourceYaml(std::string file, const std::string& what) : file_(std::move(file)) {
  try {
    root_ = YAML::Load(read_document_file(file_, what));
  } catch (const YAML::Exception& e) {
    throw ConfigError(file_ + ": not YAML: " + e.what(), file_, "");
  }
  if (!root_.IsMap()) throw ConfigError(file_ + ": expected a map of keys", file_, "");
}

SourceYaml::SourceYaml(std::string file, YAML::Node root)
    : file_(std::move(file)), root_(std::move(root)) {
  if (!root_.IsMap()) throw ConfigError(file_ + ": expected a map of keys", file_, "");
}

void SourceYaml::fail(const std::string& key, const std::string& what) const {
  throw ConfigError(file_ + ": " + key + ": " + what, file_, key);
}

YAML::Node SourceYaml::at(const std::string& path) const {
  YAML::Node node = YAML::Clone(root_);
  size_t start = 0;
  while (start <= path.size()) {
    const auto dot = path.find('.', start);
    const auto key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node.IsMap() || !node[key]) return YAML::Node(YAML::NodeType::Null);
    node = node[key];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return node;
}

bool SourceYaml::has(const std::string& path) const {
  const auto node = at(path);
  return node.IsDefined() && !node.IsNull();
}

std::string SourceYaml::text(const std::string& path, const std::string& fallback) const {
  const auto node = at(path);
  if (!node.IsDefined() || node.IsNull()) return fallback;
  if (!node.IsScalar()) fail(path, "expected a scalar");
  return node.Scalar();
}

template <typename T>
T SourceYaml::scalar(const std::string& path, T fallback, const char* expected) const {
  const auto node = at(path);
  if (!node.IsDefined() || node.IsNull()) return fallback;
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    fail(path, std::string("expected ") + expected + ", got '" + text(path, "") + "'");
  }
}

int64_t SourceYaml::integer(const std::string& path, int64_t fallback, int64_t min,
                            int64_t max) const {
  const auto value = scalar<int64_t>(path, fallback, "an integer");
  if (value < min || value > max) {
    fail(path, std::to_string(value) + " is outside [" + std::to_string(min) + ", " +
                   std::to_string(max) + "]");
  }
  return value;
}

double SourceYaml::number(const std::string& path, double fallback) const {
  const auto value = scalar<double>(path, fallback, "a number");
  if (!std::isfinite(value)) fail(path, "expected a finite number");
  return value;
}

bool SourceYaml::boolean(const std::string& path, bool fallback) const {
  return scalar<bool>(path, fallback, "true or false");
}

std::vector<std::string> SourceYaml::text_list(const std::string& path) const {
  const auto node = at(path);
  if (!node.IsDefined() || node.IsNull()) return {};
  if (!node.IsSequence()) fail(path, "expected a list");
  std::vector<std::string> out;
  for (const auto& item : node) {
    if (!item.IsScalar()) fail(path + "[" + std::to_string(out.size()) + "]", "expected a scalar");
    out.push_back(item.Scalar());
  }
  return out;
}

void SourceYaml::require(const std::string& path, const std::string& expected,
                         const std::string& why) const {
  const auto value = text(path, expected);
  if (value != expected) fail(path, "'" + value + "' is not supported: " + why);
}

void SourceYaml::require_flag(const std::string& path, bool expected,
                              const std::string& why) const {
  if (boolean(path, expected) != expected) {
    fail(path, std::string("'") + (expected ? "false" : "true") + "' is not supported: " + why);
  }
}

void SourceYaml::require_number(const std::string& path, double expected,
                                const std::string& why) const {
  const double value = number(path, expected);
  if (std::abs(value - expected) > 1e-9 * std::abs(expected)) {
    fail(path, "'" + text(path, "") + "' is not supported: " + why);
  }
}

void SourceYaml::only_keys(const std::string& path, const std::set<std::string>& known) const {
  const auto node = at(path);
  if (!node.IsDefined() || node.IsNull()) return;
  if (!node.IsMap()) fail(path, "expected a map");
  for (const auto& item : node) {
    const auto key = item.first.Scalar();
    if (!known.count(key)) {
      fail(path + "." + key, "is an option attnzoo does not implement (value '" +
                                 (item.second.IsScalar() ? item.second.Scalar() : "...") + "')");
    }
  }
}

}  // namespace attnzoo::detail
