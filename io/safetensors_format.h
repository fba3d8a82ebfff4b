// The safetensors container format (Hugging Face, https://github.com/huggingface/safetensors):
//
//   [8 bytes: header length N, little-endian u64][N bytes: JSON header][data]
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets
// relative to the start of the data; an optional "__metadata__" maps strings to strings.
//
// This half of the reader is torch-free: it parses and validates a header against the size of the
// data it describes, so that it can be fuzzed on its own (tests/fuzz/) and so that nothing is read
// or allocated before every offset, size and shape is known to be consistent.
#pragma once

#include <attnzoo/core/error.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace attnzoo::io {

// Any malformed, truncated or hostile input. The message names the source (file path) first.
class SafetensorsError : public Error {
 public:
  using Error::Error;
};

enum class SafetensorsDtype {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kF8E4M3,
  kF8E5M2
};

// Bytes per element, and the name used in headers ("F32", ...).
size_t dtype_size(SafetensorsDtype dtype);
const char* dtype_name(SafetensorsDtype dtype);
std::optional<SafetensorsDtype> parse_dtype(std::string_view name);

struct TensorEntry {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section, [begin, end)
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;  // sorted by begin offset
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // where the data section starts in the file: 8 + header length
  uint64_t data_size = 0;
};

// Headers larger than this are rejected before anything is allocated (the reference
// implementation's limit).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Reads the header length from the first 8 bytes and checks it against the file size.
uint64_t read_header_length(const unsigned char* first8, uint64_t file_size,
                            const std::string& source);

// Parses and validates `header_json` for a data section of `data_size` bytes: known dtypes,
// non-negative shapes whose byte size matches the offsets (no overflow), offsets in bounds,
// tensors covering the data section exactly (no overlap, no hole), no duplicate keys, string
// metadata. Throws SafetensorsError naming `source`, the tensor and the problem.
SafetensorsHeader parse_header(std::string_view header_json, uint64_t data_size,
                               const std::string& source);

// Both steps on a whole file held in memory.
SafetensorsHeader parse_buffer(const unsigned char* data, size_t size, const std::string& source);

// The JSON header for `tensors` (whose offsets must tile the data section in order) and
// `metadata`, padded with spaces to a multiple of 8 bytes so that the data section is aligned.
std::string make_header(const std::vector<TensorEntry>& tensors,
                        const std::map<std::string, std::string>& metadata);

}  // namespace attnzoo::io
