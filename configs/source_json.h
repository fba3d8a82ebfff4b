// A JSON file of a model source (config.json, preprocessor_config.json) read with the checks of a
// config: bounded in size, each value typed and ranged, and every refusal a ConfigError naming the
// file, the key and the value ("vit/config.json: hidden_act: 'quick_gelu' is not an activation
// attnzoo implements (gelu, gelu_new, gelu_pytorch_tanh)"). Keys are paths through nested
// objects: "pretrained_cfg.crop_pct". Internal to configs/ (the importers of model_source.h).
#pragma once

#include <attnzoo/configs/model_config.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnzoo::detail {

class SourceJson {
 public:
  // Reads `file` (a JSON object of at most `max_bytes`); ConfigError naming it otherwise.
  static SourceJson read(const std::string& file, size_t max_bytes = size_t{16} << 20);
  SourceJson(nlohmann::json json, std::string file)
      : json_(std::move(json)), file_(std::move(file)) {}

  const std::string& file() const { return file_; }
  const nlohmann::json& json() const { return json_; }
  // The value at `key`, or nullptr when absent (or null).
  const nlohmann::json* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }

  // Absent keys take `fallback`; std::nullopt makes them required.
  int64_t integer(const std::string& key, std::optional<int64_t> fallback, int64_t min,
                  int64_t max) const;
  double number(const std::string& key, std::optional<double> fallback, double min,
                double max) const;
  bool boolean(const std::string& key, std::optional<bool> fallback) const;
  std::string string(const std::string& key, std::optional<std::string> fallback) const;
  // An integer, or a list of them (HF's image_size and patch_size may be either).
  std::vector<int64_t> integers(const std::string& key, std::vector<int64_t> fallback, int64_t min,
                                int64_t max) const;
  std::vector<double> numbers(const std::string& key, size_t size) const;

  // "FILE: KEY: WHAT (got VALUE)".
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

 private:
  const nlohmann::json& required(const std::string& key) const;
  nlohmann::json json_;
  std::string file_;
};

// A value as short text for messages: 'text', 12, [3, 224, 224], {...}.
std::string json_value_text(const nlohmann::json& value);

}  // namespace attnzoo::detail
