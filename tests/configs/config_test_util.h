// Helpers shared by the configs tests: a small valid document to break in known places, and
// temporary folders of YAML files.
#pragma once

#include <attnzoo/configs/model_config.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace attnzoo::testing {

// Line and column of every value are relied on by the error tests: edit with care.
inline const char* const kTinyConfig = R"(name: tiny_test
family: vit
architecture:
  img_size: 32
  patch_size: 8
  embed_dim: 48
  depth: 2
  num_heads: 3
  num_classes: 5
attention:
  backend: math
preprocess:
  input_size: [3, 32, 32]
  crop_pct: 0.9
  interpolation: bicubic
  mean: [0.5, 0.5, 0.5]
  std: [0.5, 0.5, 0.5]
labels: imagenet
checkpoint:
  format: timm
)";

// `text` with the first `from` replaced by `to` (which must be there).
inline std::string with(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' not in the document";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// A fresh folder under the system's temporary directory, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::random_device seed;
    path_ = std::filesystem::temp_directory_path() /
            ("attnzoo_configs_test_" + std::to_string(seed()) + std::to_string(seed()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `text` to path()/relative (creating folders); returns the full path.
  std::string write(const std::string& relative, const std::string& text) const {
    const auto file = path_ / relative;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text;
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

// Sets an environment variable for the scope of a test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    if (old) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The ConfigError that parsing `yaml` (named "bad.yaml") throws; a test failure if none.
inline ConfigError parse_error(const std::string& yaml,
                               const std::vector<std::string>& overrides = {}) {
  try {
    parse_model_config(yaml, "bad.yaml", overrides);
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "no ConfigError for:\n" << yaml;
  return ConfigError("", "", "");
}

// The error is at bad.yaml:line:column, about `key`, and says `expected`.
inline void expect_error(const ConfigError& e, const std::string& key, int line, int column,
                         const std::string& expected) {
  EXPECT_EQ(e.file(), "bad.yaml");
  EXPECT_EQ(e.key_path(), key);
  EXPECT_EQ(e.line(), line);
  EXPECT_EQ(e.column(), column);
  EXPECT_THAT(e.what(), ::testing::StartsWith("bad.yaml:" + std::to_string(line) + ":" +
                                              std::to_string(column) + ": " + key + ": "));
  EXPECT_THAT(e.what(), ::testing::HasSubstr(expected));
}

// An error about a value set by an override names the override instead of a line.
inline void expect_override_error(const ConfigError& e, const std::string& key,
                                  const std::string& override_text, const std::string& expected) {
  EXPECT_EQ(e.key_path(), key);
  EXPECT_EQ(e.line(), 0);
  EXPECT_THAT(e.what(),
              ::testing::StartsWith("bad.yaml: override '" + override_text + "': " + key + ": "));
  EXPECT_THAT(e.what(), ::testing::HasSubstr(expected));
}

}  // namespace attnzoo::testing
