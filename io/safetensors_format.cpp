#include <attnzoo/io/safetensors_format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace attnzoo::io {
namespace {

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;
  size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kBool, "BOOL", 1},      {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},          {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},        {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},      {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},        {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF64, "F64", 8},        {SafetensorsDtype::kI64, "I64", 8},
    {SafetensorsDtype::kU64, "U64", 8},        {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
};

const DtypeInfo& info(SafetensorsDtype dtype) {
  for (const auto& d : kDtypes) {
    if (d.dtype == dtype) return d;
  }
  throw std::logic_error("safetensors: unknown dtype enumerator");
}

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw SafetensorsError(source + ": " + what);
}

// The largest dimension count accepted; real checkpoints use at most 5 or 6.
constexpr size_t kMaxDims = 64;

// Reads a non-negative integer that fits in 63 bits, or fails naming `what`.
uint64_t as_count(const nlohmann::json& value, const std::string& source, const std::string& what) {
  if (!value.is_number_integer()) fail(source, what + " must be a non-negative integer");
  if (value.is_number_unsigned()) {
    const auto v = value.get<uint64_t>();
    if (v > (uint64_t{1} << 62)) fail(source, what + " is too large (" + std::to_string(v) + ")");
    return v;
  }
  const auto v = value.get<int64_t>();
  if (v < 0) fail(source, what + " must be non-negative, got " + std::to_string(v));
  return static_cast<uint64_t>(v);
}

TensorEntry parse_entry(const std::string& name, const nlohmann::json& value,
                        const std::string& source) {
  const std::string where = "tensor '" + name + "'";
  if (!value.is_object()) fail(source, where + ": expected an object");
  for (const auto& [key, unused] : value.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      fail(source, where + ": unexpected key '" + key + "'");
    }
  }
  TensorEntry entry;
  entry.name = name;
  const auto dtype_it = value.find("dtype");
  if (dtype_it == value.end() || !dtype_it->is_string()) {
    fail(source, where + ": missing string \"dtype\"");
  }
  const auto dtype = parse_dtype(dtype_it->get<std::string>());
  if (!dtype) fail(source, where + ": unknown dtype '" + dtype_it->get<std::string>() + "'");
  entry.dtype = *dtype;

  const auto shape_it = value.find("shape");
  if (shape_it == value.end() || !shape_it->is_array()) {
    fail(source, where + ": missing array \"shape\"");
  }
  if (shape_it->size() > kMaxDims) {
    fail(source, where + ": " + std::to_string(shape_it->size()) + " dimensions (at most " +
                     std::to_string(kMaxDims) + ")");
  }
  // Byte size = product(shape) · element size, computed without overflow.
  unsigned __int128 bytes = info(entry.dtype).size;
  for (const auto& dim : *shape_it) {
    const uint64_t d = as_count(dim, source, where + ": shape entry");
    entry.shape.push_back(static_cast<int64_t>(d));
    bytes *= d;
    if (bytes > (static_cast<unsigned __int128>(1) << 64))
      bytes = static_cast<unsigned __int128>(1) << 64;
  }

  const auto offsets_it = value.find("data_offsets");
  if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    fail(source, where + ": \"data_offsets\" must be [begin, end]");
  }
  entry.begin = as_count((*offsets_it)[0], source, where + ": data_offsets[0]");
  entry.end = as_count((*offsets_it)[1], source, where + ": data_offsets[1]");
  if (entry.end < entry.begin) {
    fail(source, where + ": data_offsets end " + std::to_string(entry.end) + " < begin " +
                     std::to_string(entry.begin));
  }
  if (bytes != entry.end - entry.begin) {
    fail(source, where + ": shape and dtype " + dtype_it->get<std::string>() + " need " +
                     (bytes >> 64 ? std::string("more than 2^64")
                                  : std::to_string(static_cast<uint64_t>(bytes))) +
                     " bytes, data_offsets give " + std::to_string(entry.end - entry.begin));
  }
  return entry;
}

// At most this many tensors in one file: the largest model of the zoo has under a thousand, and
// a header of 10^5 tiny tensors (4.5 MB) would otherwise cost a second of parsing and allocation
// before its names could be refused. Checked on the parser's first pass, before the header is
// built.
constexpr size_t kMaxTensors = 50'000;

// The first key that appears twice in one JSON object, from the parser's events (a SAX handler
// for nlohmann::json::sax_parse): one set of keys per open object, each key looked up once. Stops
// at the (kMaxTensors + 1)th tensor.
struct DuplicateKeyFinder {
  using Json = nlohmann::json;
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  size_t tensors = 0;  // keys of the top-level object but __metadata__
  bool too_many = false;

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const Json::string_t&) { return true; }
  bool string(Json::string_t&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool start_object(std::size_t) {
    open_objects.emplace_back();
    return true;
  }
  bool key(Json::string_t& key) {
    if (open_objects.size() == 1 && key != "__metadata__" && ++tensors > kMaxTensors) {
      too_many = true;
      return false;
    }
    if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
    return true;
  }
  bool end_object() {
    open_objects.pop_back();
    return true;
  }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
  // The DOM parse that follows reports the error.
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }
};

}  // namespace

size_t dtype_size(SafetensorsDtype dtype) { return info(dtype).size; }
const char* dtype_name(SafetensorsDtype dtype) { return info(dtype).name; }

std::optional<SafetensorsDtype> parse_dtype(std::string_view name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return d.dtype;
  }
  return std::nullopt;
}

uint64_t read_header_length(const unsigned char* first8, uint64_t file_size,
                            const std::string& source) {
  if (file_size < 8) {
    fail(source, "too short for a safetensors file (" + std::to_string(file_size) +
                     " bytes; the header length alone takes 8)");
  }
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | first8[i];  // little-endian
  if (length > kMaxHeaderBytes) {
    fail(source, "header length " + std::to_string(length) + " exceeds the limit of " +
                     std::to_string(kMaxHeaderBytes) + " bytes (not a safetensors file?)");
  }
  if (length > file_size - 8) {
    fail(source, "truncated: the header claims " + std::to_string(length) + " bytes but only " +
                     std::to_string(file_size - 8) + " follow");
  }
  return length;
}

SafetensorsHeader parse_header(std::string_view header_json, uint64_t data_size,
                               const std::string& source) {
  const auto first = header_json.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || header_json[first] != '{') {
    fail(source, "the header is not a JSON object (not a safetensors file?)");
  }
  // nlohmann keeps the last of duplicate keys silently; a header with two entries of one name is
  // ambiguous, so a first pass over the parse events looks for one. (Not nlohmann's parse
  // callback: it rescans the enclosing object at the end of each inner one, quadratic in the
  // number of tensors; 10^5 tensors took minutes.)
  std::string duplicate;
  nlohmann::json header;
  try {
    DuplicateKeyFinder finder;
    if (nlohmann::json::sax_parse(header_json.begin(), header_json.end(), &finder)) {
      duplicate = finder.duplicate;
    }
    if (finder.too_many) {
      fail(source, "more than " + std::to_string(kMaxTensors) +
                       " tensors in the header, the limit of a checkpoint");
    }
    header = nlohmann::json::parse(header_json.begin(), header_json.end());
  } catch (const nlohmann::json::exception& e) {
    fail(source, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) fail(source, "duplicate key '" + duplicate + "' in the header");
  if (!header.is_object()) fail(source, "the header is not a JSON object");

  SafetensorsHeader result;
  result.data_size = data_size;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(source, "__metadata__ must be an object of strings");
      for (const auto& [key, item] : value.items()) {
        if (!item.is_string()) fail(source, "__metadata__ entry '" + key + "' is not a string");
        result.metadata[key] = item.get<std::string>();
      }
      continue;
    }
    result.tensors.push_back(parse_entry(name, value, source));
  }
  // The tensors must tile the data section: sorted by offset, each starting where the previous
  // one ends, the last ending at the end of the data. No overlap means no aliasing of tensors;
  // no hole means no bytes a writer could hide.
  std::stable_sort(result.tensors.begin(), result.tensors.end(),
                   [](const TensorEntry& a, const TensorEntry& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  uint64_t expected = 0;
  for (const auto& t : result.tensors) {
    if (t.begin != expected) {
      fail(source, "tensor '" + t.name + "' starts at data offset " + std::to_string(t.begin) +
                       ", expected " + std::to_string(expected) +
                       (t.begin < expected ? " (overlaps the previous tensor)" : " (a hole)"));
    }
    expected = t.end;
  }
  if (expected != data_size) {
    fail(source, expected > data_size
                     ? "truncated: the tensors need " + std::to_string(expected) +
                           " bytes of data but the file holds " + std::to_string(data_size)
                     : "the tensors cover " + std::to_string(expected) + " of the " +
                           std::to_string(data_size) + " data bytes (trailing bytes)");
  }
  return result;
}

SafetensorsHeader parse_buffer(const unsigned char* data, size_t size, const std::string& source) {
  const uint64_t length = read_header_length(data, size, source);
  const std::string_view json(reinterpret_cast<const char*>(data) + 8, length);
  auto header = parse_header(json, size - 8 - length, source);
  header.data_offset = 8 + length;
  return header;
}

std::string make_header(const std::vector<TensorEntry>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  // An ordered JSON object keeps the tensors in data order, which makes files diffable.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (const auto& t : tensors) {
    header[t.name] = {
        {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace attnzoo::io
