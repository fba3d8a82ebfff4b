// Reading and writing safetensors files as LibTorch tensors: the project's weights format.
//
// Loading validates the whole header against the file size first (safetensors_format.h), then
// reads each tensor straight into its own storage: no second copy of the file in memory, and no
// read outside the file whatever the header says. Saving goes through io/atomic_file.h: after a
// kill or a crash at any moment the file is the previous one or the new one, never a truncated one.
#pragma once

#include <attnzoo/io/safetensors_format.h>

#include <torch/types.h>
// After types.h: ordered_dict.h uses TORCH_CHECK without including it.
#include <torch/ordered_dict.h>

#include <map>
#include <string>

namespace attnzoo::io {

using TensorDict = torch::OrderedDict<std::string, torch::Tensor>;

struct Safetensors {
  TensorDict tensors;  // CPU tensors, in file order
  std::map<std::string, std::string> metadata;
};

// Throws SafetensorsError naming `path` for anything wrong with the file (missing, a directory,
// unreadable, truncated, malformed or inconsistent header).
Safetensors load_safetensors(const std::string& path);
Safetensors load_safetensors_from_memory(const void* data, size_t size,
                                         const std::string& source = "<memory>");

// Writes `tensors` (any device, any strides; stored contiguous, little-endian) and `metadata`.
// Names must be unique and non-empty; "__metadata__" is reserved.
void save_safetensors(const std::string& path, const TensorDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});
std::string serialize_safetensors(const TensorDict& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

// The torch dtype of a safetensors dtype, and back (throws for types safetensors lacks).
torch::Dtype to_torch_dtype(SafetensorsDtype dtype);
SafetensorsDtype from_torch_dtype(torch::Dtype dtype);

}  // namespace attnzoo::io
