#include <attnzoo/configs/omegaconf_interpolation.h>

#include <attnzoo/core/error.h>

#include <map>
#include <set>
#include <vector>

namespace attnzoo::detail {
namespace {

constexpr size_t kMaxNodes = 1'000'000;

using Path = std::vector<std::string>;

std::string join(const Path& path) {
  std::string out;
  for (const auto& key : path) out += (out.empty() ? "" : ".") + key;
  return out.empty() ? "<root>" : out;
}

bool is_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// A scalar as OmegaConf's str() would join it into a string.
std::string as_text(const YAML::Node& node) {
  const std::string& s = node.Scalar();
  if (node.Tag() != "!") {  // a plain scalar: quoted ones are strings
    if (s == "true" || s == "True" || s == "TRUE") return "True";
    if (s == "false" || s == "False" || s == "FALSE") return "False";
    if (s == "null" || s == "Null" || s == "NULL" || s == "~") return "None";
  }
  return s;
}

// Nodes are rebound with reset(), never assigned: yaml-cpp's operator= on a node that refers to
// part of a document overwrites that part.
class Resolver {
 public:
  Resolver(const YAML::Node& root, std::string file) : root_(root), file_(std::move(file)) {}

  // The resolved node at `path` (its value in the original document, resolved in place).
  YAML::Node resolved(const Path& path, const Path& asked_by) {
    const std::string key = join(path);
    if (const auto done = done_.find(key); done != done_.end()) return done->second;
    if (!active_.insert(key).second) {
      fail(asked_by, "the interpolation of '" + key + "' refers back to itself (a cycle)");
    }
    const YAML::Node node = find(path, asked_by);
    YAML::Node out;
    uint64_t size = 1;  // nodes in the result once every shared part is counted where it appears
    if (node.IsMap()) {
      out = YAML::Node(YAML::NodeType::Map);
      for (const auto& item : node) {
        Path child = path;
        child.push_back(item.first.Scalar());
        out[item.first.Scalar()] = resolved(child, child);
        size += sizes_.at(join(child));
      }
    } else if (node.IsSequence()) {
      out = YAML::Node(YAML::NodeType::Sequence);
      for (size_t i = 0; i < node.size(); ++i) {
        Path child = path;
        child.push_back(std::to_string(i));
        out.push_back(resolved(child, child));
        size += sizes_.at(join(child));
      }
    } else if (node.IsScalar() && node.Scalar().find("${") != std::string::npos) {
      out = interpolate(node, path, size);
    } else {
      out = YAML::Clone(node);
    }
    if (size > kMaxNodes) {
      fail(path, "resolves to more than " + std::to_string(kMaxNodes) + " nodes");
    }
    active_.erase(key);
    done_[key] = out;
    sizes_[key] = size;
    return out;
  }

 private:
  [[noreturn]] void fail(const Path& key, const std::string& what) const {
    throw ConfigError(file_ + ": " + join(key) + ": " + what, file_, join(key));
  }

  // The node at `path` in the original document; an interpolation met on the way to a deeper
  // path is resolved first (${a.b} where a is ${c}).
  YAML::Node find(const Path& path, const Path& asked_by) {
    YAML::Node node = root_;
    for (size_t i = 0; i < path.size(); ++i) {
      if (node.IsScalar() && node.Scalar().find("${") != std::string::npos) {
        node.reset(resolved(Path(path.begin(), path.begin() + static_cast<long>(i)), asked_by));
      }
      // Looked up through a const node: a non-const operator[] adds the key it does not find.
      const YAML::Node& here = node;
      const bool index = here.IsSequence() && is_digits(path[i]) && path[i].size() < 10 &&
                         std::stoull(path[i]) < here.size();
      const YAML::Node next = here.IsMap() ? here[path[i]]
                              : index      ? here[std::stoull(path[i])]
                                           : YAML::Node(YAML::NodeType::Undefined);
      if (!next.IsDefined()) {
        fail(asked_by, "the interpolation's key '" + join(path) + "' does not exist");
      }
      node.reset(next);
    }
    return node;
  }

  // "${...}" or a string holding several: the whole node (`size`: its nodes), or the joined text.
  YAML::Node interpolate(const YAML::Node& node, const Path& path, uint64_t& size) {
    const std::string& s = node.Scalar();
    std::string text;
    size_t at = 0;
    YAML::Node whole;
    bool is_whole = false;
    while (at < s.size()) {
      if (s.compare(at, 3, "\\${") == 0) {
        text += "${";
        at += 3;
        continue;
      }
      if (s.compare(at, 2, "${") != 0) {
        text += s[at++];
        continue;
      }
      size_t end = at + 2;
      const std::string inner = body(s, end, path);  // end: past the closing brace
      const Path from = target(inner, path);
      const YAML::Node value = lookup(from, path);
      if (at == 0 && end == s.size()) {
        whole.reset(value);
        is_whole = true;
        size = sizes_.at(join(from));
      } else {
        if (!value.IsScalar() && !value.IsNull()) {
          fail(path, "'" + join(from) + "' is a map or a list, inside a string");
        }
        text += value.IsNull() ? "None" : as_text(value);
      }
      at = end;
    }
    if (is_whole) return whole;
    return YAML::Node(text);
  }

  // The text between "${" at begin - 2 and its closing brace, inner interpolations resolved;
  // `at` moves past the brace.
  std::string body(const std::string& s, size_t& at, const Path& path) {
    std::string out;
    while (at < s.size() && s[at] != '}') {
      if (s.compare(at, 2, "${") == 0) {
        at += 2;
        const std::string inner = body(s, at, path);
        const YAML::Node value = lookup(target(inner, path), path);
        if (!value.IsScalar()) fail(path, "'" + inner + "' in a key is not a scalar");
        out += value.Scalar();
        continue;
      }
      out += s[at++];
    }
    if (at >= s.size()) fail(path, "an interpolation without its closing brace: '" + s + "'");
    ++at;
    return out;
  }

  // The resolved value at `at` that an interpolation at `path` names; a ??? value is an error.
  YAML::Node lookup(const Path& at, const Path& path) {
    YAML::Node value = resolved(at, path);
    if (value.IsScalar() && value.Scalar() == "???") {
      fail(path, "'" + join(at) + "' is ??? (a value OmegaConf leaves missing)");
    }
    return value;
  }

  // The path an interpolation names, from the root or relative to `path`'s map.
  Path target(const std::string& inner, const Path& path) const {
    const auto colon = inner.find(':');
    if (colon != std::string::npos) {
      fail(path, "'${" + inner + "}' calls the resolver '" + inner.substr(0, colon) +
                     "', which attnzoo does not run (only ${key.path} interpolations)");
    }
    size_t at = 0;
    Path out;
    if (!inner.empty() && inner[0] == '.') {
      out = Path(path.begin(), path.end() - (path.empty() ? 0 : 1));  // the node's own map
      at = 1;
      while (at < inner.size() && inner[at] == '.') {
        if (out.empty()) fail(path, "'${" + inner + "}' goes above the document's root");
        out.pop_back();
        ++at;
      }
    }
    std::string key;
    auto push = [&] {
      if (key.empty()) fail(path, "'${" + inner + "}' is not a key path");
      out.push_back(key);
      key.clear();
    };
    for (; at < inner.size(); ++at) {
      const char c = inner[at];
      if (c == '.') {
        push();
      } else if (c == '[') {
        if (!key.empty()) push();
        const auto close = inner.find(']', at);
        if (close == std::string::npos) fail(path, "'${" + inner + "}': '[' without ']'");
        key = inner.substr(at + 1, close - at - 1);
        push();
        at = close;
        if (at + 1 < inner.size() && inner[at + 1] == '.') ++at;
      } else if (c == ' ' || c == '$' || c == '{' || c == '}' || c == '\\') {
        fail(path, "'${" + inner + "}' is not a key path");
      } else {
        key += c;
      }
    }
    if (!key.empty() || out.empty()) push();
    return out;
  }

  const YAML::Node& root_;
  std::string file_;
  std::map<std::string, YAML::Node> done_;
  std::map<std::string, uint64_t> sizes_;
  std::set<std::string> active_;
};

}  // namespace

YAML::Node resolve_interpolations(const YAML::Node& root, const std::string& file) {
  Resolver resolver(root, file);
  return resolver.resolved({}, {});
}

}  // namespace attnzoo::detail
