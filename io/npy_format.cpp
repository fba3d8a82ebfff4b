#include <attnzoo/core/error.h>
#include <attnzoo/io/npy_format.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

namespace attnzoo::io {
namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyMagicSize = 6;
// Version 1.0 stores the header length in 16 bits; 2.0 and 3.0 in 32, bounded here.
constexpr uint32_t kMaxNpyHeader = uint32_t{1} << 20;
constexpr size_t kMaxNpyDims = 32;

[[noreturn]] void npy_fail(const ByteSource& source, const std::string& what) {
  throw CheckpointError(source.name() + ": " + what);
}

// The header's dict literal, read as Python would read it, for the few forms NumPy writes.
class HeaderLiteral {
 public:
  HeaderLiteral(const ByteSource& source, std::string text)
      : source_(source), text_(std::move(text)) {}

  NpyHeader parse() {
    NpyHeader header;
    std::optional<std::string> descr;
    std::optional<bool> fortran;
    std::optional<std::vector<int64_t>> shape;
    expect('{');
    skip_space();
    while (peek() != '}') {
      const auto key = quoted();
      expect(':');
      if (key == "descr") {
        if (descr) fail("'descr' is given twice");
        skip_space();
        if (peek() != '\'' && peek() != '"') {
          fail("'descr' is not a type string: structured arrays are not read");
        }
        descr = quoted();
      } else if (key == "fortran_order") {
        if (fortran) fail("'fortran_order' is given twice");
        fortran = boolean();
      } else if (key == "shape") {
        if (shape) fail("'shape' is given twice");
        shape = tuple();
      } else {
        fail("unknown key '" + key.substr(0, 40) + "'");
      }
      skip_space();
      if (peek() == ',') {
        ++at_;
        skip_space();
      } else if (peek() != '}') {
        fail("expected ',' or '}' at byte " + std::to_string(at_));
      }
    }
    ++at_;
    skip_space();
    if (at_ != text_.size()) fail("text after the header's '}'");
    if (!descr || !fortran || !shape) fail("the header lacks 'descr', 'fortran_order' or 'shape'");
    read_descr(*descr, header);
    header.fortran_order = *fortran;
    header.shape = std::move(*shape);
    return header;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    npy_fail(source_, "not a .npy header NumPy writes: " + what);
  }
  char peek() const {
    if (at_ >= text_.size()) fail("it ends early");
    return text_[at_];
  }
  void skip_space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\t')) {
      ++at_;
    }
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(std::string("expected '") + c + "' at byte " + std::to_string(at_));
    ++at_;
  }
  std::string quoted() {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a quoted key at byte " + std::to_string(at_));
    const auto end = text_.find(quote, at_ + 1);
    if (end == std::string::npos) fail("an unterminated string");
    auto value = text_.substr(at_ + 1, end - at_ - 1);
    if (value.find('\\') != std::string::npos) fail("an escape in a string");
    at_ = end + 1;
    return value;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const size_t n = std::strlen(word);
      if (text_.compare(at_, n, word) == 0) {
        at_ += n;
        return value;
      }
    }
    fail("'fortran_order' is neither True nor False");
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> dims;
    skip_space();
    while (peek() != ')') {
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("a shape of non-numbers");
      int64_t value = 0;
      while (at_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at_]))) {
        if (value > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("a dimension too large");
        value = value * 10 + (text_[at_++] - '0');
      }
      // Python's own L suffix, written by NumPy under Python 2.
      if (at_ < text_.size() && text_[at_] == 'L') ++at_;
      dims.push_back(value);
      if (dims.size() > kMaxNpyDims)
        fail("more than " + std::to_string(kMaxNpyDims) + " dimensions");
      skip_space();
      if (peek() == ',') {
        ++at_;
        skip_space();
      } else if (peek() != ')') {
        fail("expected ',' or ')' in the shape");
      }
    }
    ++at_;
    return dims;
  }
  void read_descr(const std::string& descr, NpyHeader& header) const {
    const auto not_read = [&] {
      fail("type '" + descr.substr(0, 40) +
           "' is not read (booleans, integers and floats of 1 to 8 bytes)");
    };
    if (descr.size() != 3 || !std::isdigit(static_cast<unsigned char>(descr[2]))) not_read();
    const char order = descr[0], kind = descr[1];
    const int size = descr[2] - '0';
    const bool known =
        (kind == 'b' && size == 1) ||
        ((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8)) ||
        (kind == 'f' && (size == 2 || size == 4 || size == 8));
    if (!known) not_read();
    if (order == '>' && size > 1) fail("type '" + descr + "' is big-endian; not read");
    if (order != '<' && order != '|' && order != '=' && order != '>') {
      fail("type '" + descr + "' has no byte order");
    }
    header.kind = kind;
    header.itemsize = size;
  }

  const ByteSource& source_;
  std::string text_;
  size_t at_ = 0;
};

double half_to_double(uint16_t h) {
  const int sign = (h >> 15) & 1, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double value;
  if (exponent == 0) {
    value = std::ldexp(static_cast<double>(mantissa), -24);
  } else if (exponent == 31) {
    value = mantissa == 0 ? std::numeric_limits<double>::infinity()
                          : std::numeric_limits<double>::quiet_NaN();
  } else {
    value = std::ldexp(static_cast<double>(mantissa | 0x400), exponent - 25);
  }
  return sign ? -value : value;
}

double element(const unsigned char* p, char kind, int size) {
  uint64_t bits = 0;
  for (int i = 0; i < size; ++i) bits |= static_cast<uint64_t>(p[i]) << (8 * i);
  if (kind == 'f') {
    if (size == 2) return half_to_double(static_cast<uint16_t>(bits));
    if (size == 4) {
      float f;
      const auto b32 = static_cast<uint32_t>(bits);
      std::memcpy(&f, &b32, 4);
      return f;
    }
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  if (kind == 'i' && size < 8 && (bits >> (8 * size - 1)) != 0) {
    bits |= ~uint64_t{0} << (8 * size);  // sign-extend
  }
  if (kind == 'i') return static_cast<double>(static_cast<int64_t>(bits));
  return static_cast<double>(bits);
}

}  // namespace

bool is_npy(const ByteSource& source) {
  if (source.size() < kNpyMagicSize) return false;
  return source.read_string(0, kNpyMagicSize, "the .npy magic") ==
         std::string(kNpyMagic, kNpyMagicSize);
}

NpyHeader parse_npy_header(const ByteSource& source) {
  if (!is_npy(source)) npy_fail(source, "not a .npy file (no \\x93NUMPY at its start)");
  if (source.size() < kNpyMagicSize + 4) npy_fail(source, "truncated .npy header");
  const auto version = source.read_string(kNpyMagicSize, 2, "the .npy version");
  const int major = static_cast<unsigned char>(version[0]);
  if (major < 1 || major > 3) {
    npy_fail(source, ".npy format version " + std::to_string(major) + " (1 to 3 are read)");
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  const auto length_text =
      source.read_string(kNpyMagicSize + 2, length_bytes, "the .npy header length");
  uint32_t length = 0;
  for (size_t i = 0; i < length_bytes; ++i) {
    length |= static_cast<uint32_t>(static_cast<unsigned char>(length_text[i])) << (8 * i);
  }
  if (length > kMaxNpyHeader) {
    npy_fail(source, ".npy header of " + std::to_string(length) + " bytes (at most " +
                         std::to_string(kMaxNpyHeader) + ")");
  }
  const uint64_t start = kNpyMagicSize + 2 + length_bytes;
  auto header = HeaderLiteral(source, source.read_string(start, length, "the .npy header")).parse();
  header.data_offset = start + length;
  uint64_t count = 1;
  for (const auto d : header.shape) {
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
      npy_fail(source, "the shape's element count overflows");
    }
    count *= static_cast<uint64_t>(d);
  }
  header.count = count;
  const uint64_t available = source.size() - header.data_offset;
  if (count > available / static_cast<uint64_t>(header.itemsize)) {
    npy_fail(source, "the shape needs " + std::to_string(count) + " elements of " +
                         std::to_string(header.itemsize) + " bytes, and the file holds " +
                         std::to_string(available) + " bytes of data");
  }
  return header;
}

std::vector<double> read_npy_values(const ByteSource& source, const NpyHeader& header) {
  const size_t size = static_cast<size_t>(header.itemsize);
  const auto bytes =
      source.read_string(header.data_offset, header.count * size, "the .npy elements");
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  std::vector<double> values(header.count);
  const size_t dims = header.shape.size();
  if (!header.fortran_order || dims < 2) {
    for (uint64_t i = 0; i < header.count; ++i)
      values[i] = element(data + i * size, header.kind, header.itemsize);
    return values;
  }
  // Fortran order: the first index varies fastest in the file; walk the C order's indices.
  std::vector<uint64_t> stride(dims, 1), index(dims, 0);
  for (size_t k = 1; k < dims; ++k)
    stride[k] = stride[k - 1] * static_cast<uint64_t>(header.shape[k - 1]);
  for (uint64_t i = 0; i < header.count; ++i) {
    uint64_t at = 0;
    for (size_t k = 0; k < dims; ++k) at += index[k] * stride[k];
    values[i] = element(data + at * size, header.kind, header.itemsize);
    for (size_t k = dims; k-- > 0;) {
      if (++index[k] < static_cast<uint64_t>(header.shape[k])) break;
      index[k] = 0;
    }
  }
  return values;
}

std::map<std::string, NpyArray> read_npz(const ByteSource& source, uint64_t max_entry_bytes) {
  if (!ZipArchive::is_zip(source)) npy_fail(source, "not an .npz file (not a zip archive)");
  const ZipArchive archive(source);
  std::map<std::string, NpyArray> arrays;
  for (const auto& entry : archive.entries()) {
    const auto label = "entry '" + entry.name.substr(0, 200) + "'";
    if (entry.name.size() < 5 || entry.name.compare(entry.name.size() - 4, 4, ".npy") != 0) {
      npy_fail(source, label + " is not an .npy file");
    }
    if (entry.size > max_entry_bytes) {
      npy_fail(source, label + " holds " + std::to_string(entry.size) + " bytes (at most " +
                           std::to_string(max_entry_bytes) + ")");
    }
    const auto bytes = archive.read_string(entry, max_entry_bytes, label);
    const MemorySource inner(bytes.data(), bytes.size(), source.name() + " (" + label + ")");
    const auto header = parse_npy_header(inner);
    auto name = entry.name.substr(0, entry.name.size() - 4);
    NpyArray array{header.shape, read_npy_values(inner, header)};
    if (!arrays.emplace(std::move(name), std::move(array)).second) {
      npy_fail(source, label + " is there twice");
    }
  }
  return arrays;
}

}  // namespace attnzoo::io
