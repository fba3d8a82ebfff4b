#include <attnzoo/io/atomic_file.h>
#include <attnzoo/io/safetensors.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace attnzoo::io {
namespace {

static_assert(sizeof(void*) == 8, "safetensors offsets are 64-bit");

bool host_is_little_endian() {
  const uint16_t probe = 1;
  unsigned char first = 0;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

void check_host(const std::string& source) {
  if (!host_is_little_endian()) {
    throw SafetensorsError(source +
                           ": safetensors data is little-endian; big-endian hosts are "
                           "not supported");
  }
}

std::vector<TensorEntry> layout(const TensorDict& tensors) {
  std::vector<TensorEntry> entries;
  uint64_t offset = 0;
  for (const auto& item : tensors) {
    const auto& name = item.key();
    if (name.empty() || name == "__metadata__") {
      throw SafetensorsError("save_safetensors: invalid tensor name '" + name + "'");
    }
    const auto& t = item.value();
    if (!t.defined())
      throw SafetensorsError("save_safetensors: tensor '" + name + "' is undefined");
    TensorEntry e;
    e.name = name;
    e.dtype = from_torch_dtype(t.scalar_type());
    e.shape = t.sizes().vec();
    e.begin = offset;
    e.end = offset + static_cast<uint64_t>(t.numel()) * dtype_size(e.dtype);
    offset = e.end;
    entries.push_back(std::move(e));
  }
  return entries;
}

}  // namespace

torch::Dtype to_torch_dtype(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kBool:
      return torch::kBool;
    case SafetensorsDtype::kU8:
      return torch::kByte;
    case SafetensorsDtype::kI8:
      return torch::kChar;
    case SafetensorsDtype::kI16:
      return torch::kShort;
    case SafetensorsDtype::kU16:
      return torch::kUInt16;
    case SafetensorsDtype::kF16:
      return torch::kHalf;
    case SafetensorsDtype::kBF16:
      return torch::kBFloat16;
    case SafetensorsDtype::kI32:
      return torch::kInt;
    case SafetensorsDtype::kU32:
      return torch::kUInt32;
    case SafetensorsDtype::kF32:
      return torch::kFloat;
    case SafetensorsDtype::kF64:
      return torch::kDouble;
    case SafetensorsDtype::kI64:
      return torch::kLong;
    case SafetensorsDtype::kU64:
      return torch::kUInt64;
    case SafetensorsDtype::kF8E4M3:
      return torch::kFloat8_e4m3fn;
    case SafetensorsDtype::kF8E5M2:
      return torch::kFloat8_e5m2;
  }
  throw SafetensorsError("safetensors: unknown dtype");
}

SafetensorsDtype from_torch_dtype(torch::Dtype dtype) {
  for (const auto candidate :
       {SafetensorsDtype::kBool, SafetensorsDtype::kU8, SafetensorsDtype::kI8,
        SafetensorsDtype::kI16, SafetensorsDtype::kU16, SafetensorsDtype::kF16,
        SafetensorsDtype::kBF16, SafetensorsDtype::kI32, SafetensorsDtype::kU32,
        SafetensorsDtype::kF32, SafetensorsDtype::kF64, SafetensorsDtype::kI64,
        SafetensorsDtype::kU64, SafetensorsDtype::kF8E4M3, SafetensorsDtype::kF8E5M2}) {
    if (to_torch_dtype(candidate) == dtype) return candidate;
  }
  throw SafetensorsError(std::string("safetensors has no dtype for ") + c10::toString(dtype));
}

Safetensors load_safetensors_from_memory(const void* data, size_t size, const std::string& source) {
  check_host(source);
  const auto* bytes = static_cast<const unsigned char*>(data);
  const auto header = parse_buffer(bytes, size, source);
  Safetensors result;
  result.metadata = header.metadata;
  for (const auto& t : header.tensors) {
    auto tensor = torch::empty(t.shape, torch::TensorOptions().dtype(to_torch_dtype(t.dtype)));
    if (t.end > t.begin) {
      std::memcpy(tensor.data_ptr(), bytes + header.data_offset + t.begin, t.end - t.begin);
    }
    result.tensors.insert(t.name, std::move(tensor));
  }
  return result;
}

Safetensors load_safetensors(const std::string& path) {
  check_host(path);
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    throw SafetensorsError(path + ": no such file");
  }
  if (std::filesystem::is_directory(status)) {
    throw SafetensorsError(path + ": is a directory, not a safetensors file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SafetensorsError(path + ": cannot open (" + std::strerror(errno) + ")");
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  unsigned char first8[8] = {};
  in.read(reinterpret_cast<char*>(first8), std::min<uint64_t>(8, file_size));
  const uint64_t length = read_header_length(first8, file_size, path);
  std::string json(length, '\0');
  if (!in.read(json.data(), static_cast<std::streamsize>(length))) {
    throw SafetensorsError(path + ": could not read the header");
  }
  const auto header = parse_header(json, file_size - 8 - length, path);
  Safetensors result;
  result.metadata = header.metadata;
  // The tensors tile the data in offset order (parse_header checks it): read in sequence, without
  // a seek per tensor (each would drop the stream's buffer: 10^5 small tensors took 0.3 s more).
  in.seekg(static_cast<std::streamoff>(8 + length));
  for (const auto& t : header.tensors) {
    auto tensor = torch::empty(t.shape, torch::TensorOptions().dtype(to_torch_dtype(t.dtype)));
    const uint64_t n = t.end - t.begin;
    if (n > 0) {
      if (!in.read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(n))) {
        throw SafetensorsError(path + ": could not read tensor '" + t.name +
                               "' (was the file changed while being read?)");
      }
    }
    result.tensors.insert(t.name, std::move(tensor));
  }
  return result;
}

namespace {

// Header, then each tensor's bytes, streamed: a checkpoint is never held twice in memory.
void write_safetensors(std::ostream& out, const TensorDict& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const auto entries = layout(tensors);
  const std::string header = make_header(entries, metadata);
  const uint64_t length = header.size();
  char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  out.write(prefix, 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& item : tensors) {
    const auto t = item.value().detach().to(torch::kCPU).contiguous();
    out.write(static_cast<const char*>(t.data_ptr()),
              static_cast<std::streamsize>(t.numel() * t.element_size()));
  }
}

}  // namespace

std::string serialize_safetensors(const TensorDict& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  check_host("serialize_safetensors");
  std::ostringstream out;
  write_safetensors(out, tensors, metadata);
  return std::move(out).str();
}

void save_safetensors(const std::string& path, const TensorDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  check_host(path);
  try {
    AtomicFileWriter file(path);
    write_safetensors(file.stream(), tensors, metadata);
    file.commit();
  } catch (const SafetensorsError&) {
    throw;
  } catch (const Error& e) {
    throw SafetensorsError(e.what());
  }
}

}  // namespace attnzoo::io
