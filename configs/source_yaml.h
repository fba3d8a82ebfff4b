// A model source's own YAML config (WeNet's train.yaml, ESPnet's config.yaml), read by dotted key
// path with messages that name the file and the key: what a value must be for attnzoo to
// honour it, and which keys a section may hold. Internal to configs/ (the sources).
#pragma once

#include <attnzoo/configs/model_config.h>

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace attnzoo::detail {

class SourceYaml {
 public:
  // Reads `file`; `what` names the kind of file in messages ("WeNet config").
  SourceYaml(std::string file, const std::string& what);
  // A document already parsed (a file inside an archive): `file` names it in messages.
  SourceYaml(std::string file, YAML::Node root);

  const std::string& file() const { return file_; }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

  // The node at a dotted path ("encoder_conf.output_size"), or a null node.
  YAML::Node at(const std::string& path) const;
  bool has(const std::string& path) const;  // present and not null

  std::string text(const std::string& path, const std::string& fallback) const;
  int64_t integer(const std::string& path, int64_t fallback, int64_t min, int64_t max) const;
  double number(const std::string& path, double fallback) const;  // finite
  bool boolean(const std::string& path, bool fallback) const;
  // A list of scalars (ESPnet's inline token_list); empty when absent.
  std::vector<std::string> text_list(const std::string& path) const;
  // A value attnzoo implements only as `expected` (the source's default when absent).
  void require(const std::string& path, const std::string& expected, const std::string& why) const;
  void require_flag(const std::string& path, bool expected, const std::string& why) const;
  void require_number(const std::string& path, double expected, const std::string& why) const;
  // Every key of the map at `path` is one of `known`.
  void only_keys(const std::string& path, const std::set<std::string>& known) const;

 private:
  template <typename T>
  T scalar(const std::string& path, T fallback, const char* expected) const;

  std::string file_;
  YAML::Node root_;
};

}  // namespace attnzoo::detail
