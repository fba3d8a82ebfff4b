// Reading a YAML document with positions: typed values, ranges and unknown keys, each error a
// ConfigError naming the file, the key path, the line and the column. Internal to configs/ (it
// exposes yaml-cpp, a private dependency of the library).
#pragma once

#include <attnzoo/configs/model_config.h>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace attnzoo::detail {

// Documents larger than this are refused before parsing: a model file is a few hundred bytes.
constexpr size_t kMaxDocumentBytes = 1 << 20;
// Flow collections ([...], {...}) nested deeper than this are refused before parsing: a config
// nests two or three levels, and yaml-cpp holds every token of a deep document in memory before
// its own depth check fails (+120 MB for 500,000 levels).
constexpr int kMaxFlowNesting = 64;

// The text of the config file `path` (`what` names its kind in messages: "config",
// "training config"); ConfigError naming the file when it is missing, not a regular file, larger
// than kMaxDocumentBytes (never read past that, even if it grows meanwhile) or unreadable.
std::string read_document_file(const std::string& path, const std::string& what);

// A path as written in the document `source`: absolute, or relative to the document's folder.
std::string resolve(const std::string& source, const std::string& value);
// Whether a document's model reference names a YAML file (a '/' in it, or a .yaml / .yml
// ending) rather than a registered name.
bool names_a_file(const std::string& model);

// One document: its tree, the file it came from and the overrides applied to it, so that an error
// can say where the offending value was written.
class Document {
 public:
  // Parses `text`; malformed YAML throws ConfigError at yaml-cpp's mark. The top level must be a
  // mapping.
  Document(const std::string& text, std::string source);

  // Applies one `key.path=value` override (value parsed as YAML) to the tree, creating the
  // mappings on the path that do not exist.
  void apply_override(const std::string& override_text);

  const YAML::Node& root() const { return root_; }
  // The override that set `key_path` or a mapping above it (the latest one); nullptr if none.
  const std::string* override_of(const std::string& key_path) const;
  const std::string& source() const { return source_; }
  // The key paths whose values the readers have read so far (present in the document or set by
  // an override), e.g. "architecture.norm_eps".
  const std::set<std::string>& read_keys() const { return read_keys_; }
  void note_read(const std::string& key_path) const { read_keys_.insert(key_path); }

  // Throws ConfigError "SOURCE:LINE:COL: KEY_PATH: WHAT", or "SOURCE: override 'k=v': KEY_PATH:
  // WHAT" when `key_path` (or a mapping above it) was set by an override.
  [[noreturn]] void fail(const std::string& key_path, const YAML::Mark& mark,
                         const std::string& what) const;

 private:
  std::string source_;
  YAML::Node root_;
  std::vector<std::pair<std::string, std::string>> overrides_;  // key path, override as given
  mutable std::set<std::string> read_keys_;
};

// One mapping of a document. Every read declares its key as known; finish() rejects the keys no
// read asked for, so the accepted keys are exactly the ones the parser reads (no second list to
// keep in step with it). Absent keys take the fallback given; std::nullopt makes a key required.
class MapReader {
 public:
  // `node`: a mapping, or undefined / null for an absent optional section (read as empty).
  MapReader(const Document& document, const YAML::Node& node, std::string path);

  const std::string& path() const { return path_; }
  std::string path(const std::string& key) const;  // "path.key"
  bool has(const std::string& key);                // declares `key`
  bool is_sequence(const std::string& key);        // declares `key`; false when absent
  bool overridden(const std::string& key) const;   // set by an override
  // Where to report a relation between two keys that fails: at an overridden one if only the
  // second is overridden (the override is what changed), else at the first the file sets, else
  // at the second.
  std::string relation_key(const std::string& first, const std::string& second);

  int64_t integer(const std::string& key, std::optional<int64_t> fallback, int64_t min,
                  int64_t max);
  // A finite number in [min, max] (or (min, max] with min_exclusive).
  double number(const std::string& key, std::optional<double> fallback, double min, double max,
                bool min_exclusive = false);
  bool boolean(const std::string& key, std::optional<bool> fallback);
  std::string string(const std::string& key, std::optional<std::string> fallback);
  // "cpu", "cuda" or "cuda:N" (whether this process sees the device is checked where the model
  // loads, not here: a config is readable on any machine).
  c10::Device device(const std::string& key, const std::string& fallback);
  // "fp32", "bf16" or "fp16" (and "fp64" where `accept_fp64`).
  c10::ScalarType dtype(const std::string& key, const std::string& fallback,
                        bool accept_fp64 = false);
  // One of `allowed`.
  std::string choice(const std::string& key, std::optional<std::string> fallback,
                     const std::vector<std::string>& allowed);
  // A closed choice read into its enum: one of `allowed`, spelled as to_string(value) spells it
  // (the error lists those names).
  // A fallback of std::nullopt makes the key required. (Enum is deduced from `allowed` alone:
  // std::common_type_t keeps `fallback` out of the deduction.)
  template <typename Enum>
  Enum enumeration(const std::string& key, std::optional<std::common_type_t<Enum>> fallback,
                   std::initializer_list<Enum> allowed) {
    std::vector<std::string> names;
    for (const Enum value : allowed) names.emplace_back(to_string(value));
    const auto name = choice(
        key, fallback ? std::optional<std::string>(to_string(*fallback)) : std::nullopt, names);
    for (const Enum value : allowed) {
      if (name == to_string(value)) return value;
    }
    return *allowed.begin();  // choice() accepted only the names of `allowed`
  }
  // As number() and boolean(), but an explicit `null` is a value of its own (std::nullopt).
  std::optional<double> nullable_number(const std::string& key, std::optional<double> fallback,
                                        double min, double max, bool min_exclusive = false);
  std::optional<bool> nullable_boolean(const std::string& key, std::optional<bool> fallback);
  // A sequence of exactly `size` values (size 0: any number of them, but not none);
  // std::nullopt when the key is absent.
  std::optional<std::vector<int64_t>> integer_list(const std::string& key, size_t size, int64_t min,
                                                   int64_t max);
  std::optional<std::vector<double>> number_list(const std::string& key, size_t size, double min,
                                                 double max, bool min_exclusive = false);
  // A sequence of strings (any length, each non-empty); std::nullopt when the key is absent.
  std::optional<std::vector<std::string>> string_list(const std::string& key);
  // A sequence of mappings ("key[i]" in messages); empty when the key is absent.
  std::vector<MapReader> map_list(const std::string& key);
  // A nested mapping; an absent key reads as an empty mapping unless `required`.
  MapReader map(const std::string& key, bool required);

  // Throws for the first key (in document order) that no read declared, listing those accepted.
  void finish() const;

  // Throws a ConfigError about `key`: at its value when present, else at this mapping.
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  // Throws a ConfigError about this mapping as a whole.
  [[noreturn]] void fail_here(const std::string& what) const;

 private:
  struct Entry {
    std::string key;
    YAML::Mark key_mark;
    YAML::Node value;
  };
  const Entry* find(const std::string& key) const;
  // The value of `key` when present (declaring it); a required key that is absent throws.
  const Entry* lookup(const std::string& key, bool required);
  [[noreturn]] void fail_type(const Entry& entry, const std::string& expected) const;

  const Document* document_;
  std::string path_;
  YAML::Mark mark_;
  std::vector<Entry> entries_;
  std::vector<std::string> declared_;  // in the order read, for the "expected one of" list
};

}  // namespace attnzoo::detail
