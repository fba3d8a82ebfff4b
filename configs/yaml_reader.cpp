#include <attnzoo/configs/yaml_reader.h>

#include <attnzoo/core/dtype_device.h>

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <locale>
#include <optional>
#include <sstream>
#include <vector>

namespace attnzoo::detail {

std::string resolve(const std::string& source, const std::string& value) {
  std::filesystem::path path(value);
  if (path.is_relative()) path = std::filesystem::path(source).parent_path() / path;
  return path.lexically_normal().string();
}

bool names_a_file(const std::string& model) {
  const auto ends_with = [&](const std::string& end) {
    return model.size() > end.size() &&
           model.compare(model.size() - end.size(), end.size(), end) == 0;
  };
  return model.find('/') != std::string::npos || ends_with(".yaml") || ends_with(".yml");
}

namespace {

// Records where each document starts; ignores everything else.
class DocumentStarts final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;
  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Where the second document of `text` starts, if it has one. The parser is asked for two
// documents at most: yaml-cpp's LoadAll asks until it reports no more, which on some malformed
// input it never does (it reports an empty document each time without reading on, and LoadAll
// keeps every one of them until memory runs out; found by fuzz_config).
std::optional<YAML::Mark> second_document(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  for (int documents = 0; documents < 2 && parser.HandleNextDocument(starts); ++documents) {
  }
  if (starts.marks.size() < 2) return std::nullopt;
  return starts.marks[1];
}

// Refuses flow collections nested deeper than kMaxFlowNesting, counting brackets outside quoted
// scalars and comments. (A bracket inside a plain scalar counts too; a config has none.)
void check_flow_nesting(const std::string& text, const std::string& source) {
  int depth = 0, line = 1;
  char quote = 0;
  bool comment = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      comment = false;
      continue;
    }
    if (comment) continue;
    if (quote) {
      if (quote == '"' && c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(text[i - 1])))) {
      comment = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxFlowNesting) {
        throw ConfigError(source + ":" + std::to_string(line) +
                              ": collections nested deeper than " +
                              std::to_string(kMaxFlowNesting) + " levels (the limit of a config)",
                          source, "", line);
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

// yaml-cpp tags quoted scalars "!" and plain ones "?": a quoted "12" is a string, not a number.
bool is_quoted(const YAML::Node& node) { return node.Tag() == "!"; }

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar: {
      std::string text = node.Scalar();
      if (text.size() > 40) text = text.substr(0, 40) + "...";
      return is_quoted(node) ? "the string \"" + text + "\"" : "'" + text + "'";
    }
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::string format_number(double value) {
  std::ostringstream out;
  out.imbue(std::locale::classic());
  out << std::setprecision(10) << value;
  return out.str();
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

bool decode_integer(const YAML::Node& node, int64_t& out) {
  if (!node.IsScalar() || is_quoted(node)) return false;
  const std::string& text = node.Scalar();
  const auto* end = text.data() + text.size();
  const auto result = std::from_chars(text.data(), end, out);
  return result.ec == std::errc() && result.ptr == end;
}

// YAML 1.2 core-schema numbers as written in configs (1, 0.5, 1e-6); neither locale-dependent
// nor accepting nan/inf.
bool decode_number(const YAML::Node& node, double& out) {
  if (!node.IsScalar() || is_quoted(node)) return false;
  std::istringstream in(node.Scalar());
  in.imbue(std::locale::classic());
  in >> out;
  return !in.fail() && (in >> std::ws).eof() && std::isfinite(out);
}

// YAML 1.2's booleans only: yaml-cpp would also take yes/no/on/off (YAML 1.1), which PyYAML and
// most editors read differently.
bool decode_boolean(const YAML::Node& node, bool& out) {
  if (!node.IsScalar() || is_quoted(node)) return false;
  const std::string& text = node.Scalar();
  if (text == "true" || text == "True" || text == "TRUE") {
    out = true;
    return true;
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    out = false;
    return true;
  }
  return false;
}

std::string integer_range(int64_t min, int64_t max) {
  return "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

std::string interval(double min, double max, bool min_exclusive) {
  return (min_exclusive ? "(" : "[") + format_number(min) + ", " + format_number(max) + "]";
}

std::string number_range(double min, double max, bool min_exclusive) {
  return "a number in " + interval(min, max, min_exclusive);
}

bool in_range(double value, double min, double max, bool min_exclusive) {
  return (min_exclusive ? value > min : value >= min) && value <= max;
}

// Sets keys[i...] below `node` to `value`, creating missing mappings. `node` is taken by value:
// yaml-cpp's Node copies share the tree, whereas assigning one Node to another would overwrite
// the first one's contents.
void set_path(YAML::Node node, const std::vector<std::string>& keys, size_t i,
              const YAML::Node& value, const std::function<void(const std::string&)>& fail) {
  if (i + 1 == keys.size()) {
    node[keys[i]] = value;
    return;
  }
  YAML::Node child = node[keys[i]];
  if (!child.IsDefined() || child.IsNull()) {
    child = YAML::Node(YAML::NodeType::Map);
  } else if (!child.IsMap()) {
    std::vector<std::string> prefix(keys.begin(), keys.begin() + static_cast<long>(i) + 1);
    fail("'" + join(prefix, ".") + "' is " + describe(child) + ", not a mapping");
  }
  set_path(child, keys, i + 1, value, fail);
}

}  // namespace

std::string read_document_file(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_regular_file(path, error)) throw ConfigError(path + ": no such " + what, path, "");
  const auto limit = " (a " + what + " is at most " + std::to_string(kMaxDocumentBytes) + " bytes)";
  const auto size = fs::file_size(path, error);
  if (error) throw ConfigError(path + ": cannot read the file size", path, "");
  if (size > kMaxDocumentBytes) throw ConfigError(path + ": file too large" + limit, path, "");
  std::ifstream in(path, std::ios::binary);
  std::string text(kMaxDocumentBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad() || !in.eof()) {
    throw ConfigError(path + ": " + (in.bad() ? "cannot read the file" : "file too large" + limit),
                      path, "");
  }
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

Document::Document(const std::string& text, std::string source) : source_(std::move(source)) {
  if (text.size() > kMaxDocumentBytes) {
    throw ConfigError(source_ + ": " + std::to_string(text.size()) +
                          " bytes; a model config is at most " + std::to_string(kMaxDocumentBytes) +
                          " bytes",
                      source_, "");
  }
  check_flow_nesting(text, source_);
  std::optional<YAML::Mark> second;
  try {
    root_ = YAML::Load(text);
    second = second_document(text);
  } catch (const YAML::Exception& e) {
    fail("", e.mark, "malformed YAML: " + e.msg);
  }
  if (!root_ || root_.IsNull()) {
    fail("", YAML::Mark::null_mark(),
         "empty document; expected a mapping with name, family, architecture, ...");
  }
  if (second) fail("", *second, "expected one YAML document, found a second one");
  if (!root_.IsMap()) {
    fail("", root_.Mark(), "expected a mapping at the top level, got " + describe(root_));
  }
}

void Document::apply_override(const std::string& override_text) {
  const auto bad = [&](const std::string& what) {
    throw ConfigError(source_ + ": override '" + override_text + "': " + what, source_, "");
  };
  const auto equals = override_text.find('=');
  if (equals == std::string::npos || equals == 0) bad("expected key.path=value");
  const std::string key_path = override_text.substr(0, equals);
  std::vector<std::string> keys;
  for (size_t begin = 0;;) {
    const auto dot = key_path.find('.', begin);
    keys.push_back(key_path.substr(begin, dot - begin));
    if (keys.back().empty()) bad("empty key in '" + key_path + "'");
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  YAML::Node value;
  try {
    value = YAML::Load(override_text.substr(equals + 1));
  } catch (const YAML::Exception& e) {
    bad("malformed YAML value: " + e.msg);
  }
  set_path(root_, keys, 0, value, bad);
  overrides_.emplace_back(key_path, override_text);
}

const std::string* Document::override_of(const std::string& key_path) const {
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
    if (!key_path.empty() && (key_path == it->first || starts_with(key_path, it->first + "."))) {
      return &it->second;
    }
  }
  return nullptr;
}

void Document::fail(const std::string& key_path, const YAML::Mark& mark,
                    const std::string& what) const {
  const std::string key_part = key_path.empty() ? "" : key_path + ": ";
  // An override wrote the value: its position in the file would point at the wrong text.
  if (const auto* override_text = override_of(key_path)) {
    throw ConfigError(source_ + ": override '" + *override_text + "': " + key_part + what, source_,
                      key_path);
  }
  if (mark.is_null()) throw ConfigError(source_ + ": " + key_part + what, source_, key_path);
  // yaml-cpp counts from 0; editors and compilers from 1.
  const int line = mark.line + 1, column = mark.column + 1;
  throw ConfigError(
      source_ + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + key_part + what,
      source_, key_path, line, column);
}

MapReader::MapReader(const Document& document, const YAML::Node& node, std::string path)
    : document_(&document),
      path_(std::move(path)),
      mark_(node.IsDefined() ? node.Mark() : YAML::Mark::null_mark()) {
  if (!node.IsDefined() || node.IsNull()) return;
  if (!node.IsMap()) document_->fail(path_, mark_, "expected a mapping, got " + describe(node));
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar()) {
      document_->fail(path_, key.Mark(), "expected a key name, got " + describe(key));
    }
    // yaml-cpp keeps both entries of a repeated key; the reader would see only one of them.
    if (find(key.Scalar())) {
      document_->fail(this->path(key.Scalar()), key.Mark(), "duplicate key '" + key.Scalar() + "'");
    }
    entries_.push_back({key.Scalar(), key.Mark(), it->second});
  }
}

std::string MapReader::path(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

const MapReader::Entry* MapReader::find(const std::string& key) const {
  for (const auto& entry : entries_) {
    if (entry.key == key) return &entry;
  }
  return nullptr;
}

const MapReader::Entry* MapReader::lookup(const std::string& key, bool required) {
  if (std::find(declared_.begin(), declared_.end(), key) == declared_.end()) {
    declared_.push_back(key);
  }
  const Entry* entry = find(key);
  if (!entry && required) {
    document_->fail(path(key), mark_, "required key is missing");
  }
  if (entry) document_->note_read(path(key));
  return entry;
}

bool MapReader::has(const std::string& key) { return lookup(key, false) != nullptr; }

bool MapReader::is_sequence(const std::string& key) {
  const Entry* entry = lookup(key, false);
  return entry && entry->value.IsSequence();
}

std::string MapReader::relation_key(const std::string& first, const std::string& second) {
  if (overridden(second) && !overridden(first)) return second;
  return has(first) ? first : second;
}

bool MapReader::overridden(const std::string& key) const {
  return document_->override_of(path(key)) != nullptr;
}

void MapReader::fail(const std::string& key, const std::string& what) const {
  const Entry* entry = find(key);
  YAML::Mark mark = mark_;
  if (entry) mark = entry->value.Mark().is_null() ? entry->key_mark : entry->value.Mark();
  document_->fail(path(key), mark, what);
}

void MapReader::fail_here(const std::string& what) const { document_->fail(path_, mark_, what); }

void MapReader::fail_type(const Entry& entry, const std::string& expected) const {
  fail(entry.key, "expected " + expected + ", got " + describe(entry.value));
}

int64_t MapReader::integer(const std::string& key, std::optional<int64_t> fallback, int64_t min,
                           int64_t max) {
  const Entry* entry = lookup(key, !fallback);
  if (!entry) return *fallback;
  int64_t value = 0;
  if (!decode_integer(entry->value, value)) fail_type(*entry, integer_range(min, max));
  if (value < min || value > max) fail_type(*entry, integer_range(min, max));
  return value;
}

double MapReader::number(const std::string& key, std::optional<double> fallback, double min,
                         double max, bool min_exclusive) {
  const Entry* entry = lookup(key, !fallback);
  if (!entry) return *fallback;
  double value = 0.0;
  if (!decode_number(entry->value, value) || !in_range(value, min, max, min_exclusive)) {
    fail_type(*entry, number_range(min, max, min_exclusive));
  }
  return value;
}

bool MapReader::boolean(const std::string& key, std::optional<bool> fallback) {
  const Entry* entry = lookup(key, !fallback);
  if (!entry) return *fallback;
  bool value = false;
  if (!decode_boolean(entry->value, value)) fail_type(*entry, "true or false");
  return value;
}

std::string MapReader::string(const std::string& key, std::optional<std::string> fallback) {
  const Entry* entry = lookup(key, !fallback);
  if (!entry) return *fallback;
  if (!entry->value.IsScalar() || entry->value.Scalar().empty()) {
    fail_type(*entry, "a non-empty string");
  }
  return entry->value.Scalar();
}

c10::Device MapReader::device(const std::string& key, const std::string& fallback) {
  const auto name = string(key, fallback);
  const bool indexed = name.size() > 5 && name.rfind("cuda:", 0) == 0 && name.size() <= 8 &&
                       name.find_first_not_of("0123456789", 5) == std::string::npos;
  if (name != "cpu" && name != "cuda" && !indexed) {
    fail(key, "expected cpu, cuda or cuda:N, got '" + name + "'");
  }
  return c10::Device(name);
}

c10::ScalarType MapReader::dtype(const std::string& key, const std::string& fallback,
                                 bool accept_fp64) {
  std::vector<std::string> names = {"fp32", "bf16", "fp16"};
  if (accept_fp64) names.emplace_back("fp64");
  return parse_dtype(key, choice(key, fallback, names), accept_fp64);
}

std::string MapReader::choice(const std::string& key, std::optional<std::string> fallback,
                              const std::vector<std::string>& allowed) {
  const Entry* entry = lookup(key, !fallback);
  if (!entry) return *fallback;
  const std::string expected = "one of " + join(allowed, ", ");
  if (!entry->value.IsScalar()) fail_type(*entry, expected);
  const std::string value = entry->value.Scalar();
  if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
    fail_type(*entry, expected);
  }
  return value;
}

std::optional<double> MapReader::nullable_number(const std::string& key,
                                                 std::optional<double> fallback, double min,
                                                 double max, bool min_exclusive) {
  const Entry* entry = find(key);
  if (entry && entry->value.IsNull()) {
    lookup(key, false);
    return std::nullopt;
  }
  if (!entry) {
    lookup(key, false);
    return fallback;
  }
  return number(key, 0.0, min, max, min_exclusive);
}

std::optional<bool> MapReader::nullable_boolean(const std::string& key,
                                                std::optional<bool> fallback) {
  const Entry* entry = find(key);
  if (!entry) {
    lookup(key, false);
    return fallback;
  }
  if (entry->value.IsNull()) {
    lookup(key, false);
    return std::nullopt;
  }
  return boolean(key, false);
}

std::optional<std::vector<int64_t>> MapReader::integer_list(const std::string& key, size_t size,
                                                            int64_t min, int64_t max) {
  const Entry* entry = lookup(key, false);
  if (!entry) return std::nullopt;
  const std::string expected = (size > 0 ? "a sequence of " + std::to_string(size)
                                         : std::string("a non-empty sequence of")) +
                               " integers in [" + std::to_string(min) + ", " + std::to_string(max) +
                               "]";
  if (!entry->value.IsSequence() || entry->value.size() == 0 ||
      (size > 0 && entry->value.size() != size)) {
    fail_type(*entry, expected);
  }
  std::vector<int64_t> values;
  for (size_t i = 0; i < entry->value.size(); ++i) {
    const YAML::Node item = entry->value[i];
    int64_t value = 0;
    if (!decode_integer(item, value) || value < min || value > max) {
      document_->fail(path(key) + "[" + std::to_string(i) + "]", item.Mark(),
                      "expected " + expected + ", got " + describe(item));
    }
    values.push_back(value);
  }
  return values;
}

std::optional<std::vector<double>> MapReader::number_list(const std::string& key, size_t size,
                                                          double min, double max,
                                                          bool min_exclusive) {
  const Entry* entry = lookup(key, false);
  if (!entry) return std::nullopt;
  const std::string expected = (size > 0 ? "a sequence of " + std::to_string(size)
                                         : std::string("a non-empty sequence of")) +
                               " numbers in " + interval(min, max, min_exclusive);
  if (!entry->value.IsSequence() || entry->value.size() == 0 ||
      (size > 0 && entry->value.size() != size)) {
    fail_type(*entry, expected);
  }
  std::vector<double> values;
  for (size_t i = 0; i < entry->value.size(); ++i) {
    const YAML::Node item = entry->value[i];
    double value = 0.0;
    if (!decode_number(item, value) || !in_range(value, min, max, min_exclusive)) {
      document_->fail(path(key) + "[" + std::to_string(i) + "]", item.Mark(),
                      "expected " + expected + ", got " + describe(item));
    }
    values.push_back(value);
  }
  return values;
}

std::optional<std::vector<std::string>> MapReader::string_list(const std::string& key) {
  const Entry* entry = lookup(key, false);
  if (!entry) return std::nullopt;
  if (!entry->value.IsSequence()) fail_type(*entry, "a sequence of strings");
  std::vector<std::string> values;
  for (size_t i = 0; i < entry->value.size(); ++i) {
    const YAML::Node item = entry->value[i];
    if (!item.IsScalar() || item.Scalar().empty()) {
      document_->fail(path(key) + "[" + std::to_string(i) + "]", item.Mark(),
                      "expected a non-empty string, got " + describe(item));
    }
    values.push_back(item.Scalar());
  }
  return values;
}

std::vector<MapReader> MapReader::map_list(const std::string& key) {
  const Entry* entry = lookup(key, false);
  std::vector<MapReader> items;
  if (!entry || entry->value.IsNull()) return items;
  if (!entry->value.IsSequence()) fail_type(*entry, "a sequence of mappings");
  for (size_t i = 0; i < entry->value.size(); ++i) {
    const YAML::Node item = entry->value[i];
    const std::string item_path = path(key) + "[" + std::to_string(i) + "]";
    if (!item.IsMap()) {
      document_->fail(item_path, item.Mark(), "expected a mapping, got " + describe(item));
    }
    items.emplace_back(*document_, item, item_path);
  }
  return items;
}

MapReader MapReader::map(const std::string& key, bool required) {
  const Entry* entry = lookup(key, required);
  MapReader child(*document_, entry ? entry->value : YAML::Node(), path(key));
  // An absent or empty section: errors about its keys point at where it would be.
  if (child.mark_.is_null()) child.mark_ = entry ? entry->key_mark : mark_;
  return child;
}

void MapReader::finish() const {
  for (const auto& entry : entries_) {
    if (std::find(declared_.begin(), declared_.end(), entry.key) == declared_.end()) {
      document_->fail(path(entry.key), entry.key_mark,
                      "unknown key '" + entry.key + "'; expected one of " + join(declared_, ", "));
    }
  }
}

}  // namespace attnzoo::detail
