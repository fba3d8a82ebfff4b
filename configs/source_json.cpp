#include <attnzoo/configs/source_json.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace attnzoo::detail {

std::string json_value_text(const nlohmann::json& value) {
  std::string text = value.is_string() ? "'" + value.get<std::string>() + "'" : value.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

SourceJson SourceJson::read(const std::string& file, size_t max_bytes) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(file, error)) {
    throw ConfigError(file + ": no such file", file, "");
  }
  const auto size = std::filesystem::file_size(file, error);
  if (error || size > max_bytes) {
    throw ConfigError(file + ": larger than the limit of " + std::to_string(max_bytes) + " bytes",
                      file, "");
  }
  std::ifstream in(file, std::ios::binary);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(file + ": not JSON (" + e.what() + ")", file, "");
  }
  if (!json.is_object()) throw ConfigError(file + ": expected a JSON object", file, "");
  return SourceJson(std::move(json), file);
}

const nlohmann::json* SourceJson::find(const std::string& key) const {
  const nlohmann::json* at = &json_;
  size_t begin = 0;
  while (true) {
    const size_t dot = key.find('.', begin);
    const std::string part = key.substr(begin, dot == std::string::npos ? dot : dot - begin);
    if (!at->is_object()) return nullptr;
    const auto it = at->find(part);
    if (it == at->end() || it->is_null()) return nullptr;
    at = &*it;
    if (dot == std::string::npos) return at;
    begin = dot + 1;
  }
}

void SourceJson::fail(const std::string& key, const std::string& what) const {
  const auto* value = find(key);
  throw ConfigError(
      file_ + ": " + key + ": " + what + (value ? " (got " + json_value_text(*value) + ")" : ""),
      file_, key);
}

const nlohmann::json& SourceJson::required(const std::string& key) const {
  const auto* value = find(key);
  if (!value) {
    throw ConfigError(file_ + ": " + key + ": required key is missing", file_, key);
  }
  return *value;
}

int64_t SourceJson::integer(const std::string& key, std::optional<int64_t> fallback, int64_t min,
                            int64_t max) const {
  if (!has(key) && fallback) return *fallback;
  const auto& value = required(key);
  if (!value.is_number_integer()) fail(key, "expected an integer");
  const auto v = value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX)
                     ? max + 1
                     : value.get<int64_t>();
  if (v < min || v > max) {
    fail(key, "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

double SourceJson::number(const std::string& key, std::optional<double> fallback, double min,
                          double max) const {
  if (!has(key) && fallback) return *fallback;
  const auto& value = required(key);
  if (!value.is_number()) fail(key, "expected a number");
  const double v = value.get<double>();
  if (!std::isfinite(v) || v < min || v > max) {
    fail(key, "expected a number in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

bool SourceJson::boolean(const std::string& key, std::optional<bool> fallback) const {
  if (!has(key) && fallback) return *fallback;
  const auto& value = required(key);
  if (!value.is_boolean()) fail(key, "expected true or false");
  return value.get<bool>();
}

std::string SourceJson::string(const std::string& key, std::optional<std::string> fallback) const {
  if (!has(key) && fallback) return *fallback;
  const auto& value = required(key);
  if (!value.is_string()) fail(key, "expected a string");
  return value.get<std::string>();
}

std::vector<int64_t> SourceJson::integers(const std::string& key, std::vector<int64_t> fallback,
                                          int64_t min, int64_t max) const {
  const auto* value = find(key);
  if (!value) return fallback;
  std::vector<int64_t> out;
  const auto take = [&](const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > max) {
      fail(key, "expected integers in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    out.push_back(v.get<int64_t>());
  };
  if (value->is_array()) {
    for (const auto& v : *value) take(v);
  } else {
    take(*value);
  }
  if (out.empty()) fail(key, "expected an integer or a list of them");
  return out;
}

std::vector<double> SourceJson::numbers(const std::string& key, size_t size) const {
  const auto& value = required(key);
  if (!value.is_array() || value.size() != size) {
    fail(key, "expected a list of " + std::to_string(size) + " numbers");
  }
  std::vector<double> out;
  for (const auto& v : value) {
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      fail(key, "expected a list of " + std::to_string(size) + " numbers");
    }
    out.push_back(v.get<double>());
  }
  return out;
}

}  // namespace attnzoo::detail
