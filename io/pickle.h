// A restricted reader of Python pickles, for the PyTorch checkpoints users bring (torch.save's
// data.pkl, the legacy format's pickle stream). Nothing in a pickle is ever executed: the reader
// is a stack machine over the opcodes of protocols 2 to 5 (and the text opcodes checkpoints
// still carry), and the only globals it accepts are those a checkpoint of tensors needs, each
// given a meaning here instead of being imported:
//
//   collections.OrderedDict                       a dict
//   torch._utils._rebuild_tensor(_v2)              a tensor: storage, offset, sizes, strides
//   torch._utils._rebuild_parameter(_with_state)   the same tensor (a Parameter's data)
//   torch._tensor._rebuild_from_type_v2            the tensor its function rebuilds
//   torch.Size, torch.device                       a tuple, a string
//   torch.<Type>Storage, torch.cuda.<Type>Storage  a storage's element type, in a persistent id
//   torch.float32 ... (dtypes), torch.Tensor, torch.nn.parameter.Parameter   names, as values
//   _codecs.encode(text, "latin1")                 bytes (protocol 2's spelling of bytes)
//   builtins.set, builtins.frozenset               a set
//   argparse.Namespace                             a dict of its attributes (training args)
//   numpy scalar and dtype                         the number (metrics saved as numpy values)
//
// Any other global is refused by name, before anything uses it: "evil.pth: refuses to call
// posix.system: only tensors, containers, numbers and strings are read". Storages are persistent
// ids ('storage', type, key, location, numel); the reader records them and checks every tensor's
// view against its storage's size, so that the caller only copies bytes known to be in bounds.
//
// Bounded: the values a pickle may create, the tensors, and the nesting of containers (deep
// nesting is refused, not recursed into). Values live in one arena and refer to each other by
// index, so that memo references and even cycles cost nothing to build or free. Errors are
// CheckpointError naming the source first. Standard library only (fuzzed).
#pragma once

#include <attnzoo/io/safetensors_format.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnzoo::io {

enum class PickleKind : uint8_t {
  kNone,
  kBool,
  kInt,     // fits in 64 bits
  kBigInt,  // a Python int of more than 64 bits: text() holds its little-endian two's complement
  kFloat,
  kString,  // UTF-8
  kBytes,
  kList,
  kTuple,
  kSet,
  kDict,        // items(): key, value, key, value, ...; type_name(): dict, OrderedDict, ...
  kGlobal,      // a name the reader accepts as a value (a dtype, a storage type): text()
  kStorage,     // a persistent id: storage()
  kTensor,      // tensor()
  kNumpyDtype,  // text(): its code with the byte order, e.g. "<f8"
};
const char* pickle_kind_name(PickleKind kind);

// A storage as a persistent id names it. The element types are those safetensors has too.
struct PickleStorage {
  std::string key;   // its record: data/<key> in a zip, the root key in the legacy format
  std::string type;  // as pickled, e.g. "torch.FloatStorage"
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::string location;  // "cpu", "cuda:0", ...
  uint64_t numel = 0;    // elements
};

struct PickleTensor {
  uint32_t storage = 0;      // index into PickleDocument::storages()
  uint64_t view_offset = 0;  // legacy storage views: where the view starts, in elements
  uint64_t view_numel = 0;   // the view's (or the whole storage's) elements
  int64_t offset = 0;        // in elements, from the view's start
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  bool requires_grad = false;
};

struct PickleLimits {
  // Values a pickle may create (each opcode makes at most one): a state dict of a thousand
  // tensors makes about 20,000; a training checkpoint with its optimizer a few times that.
  size_t max_values = 4'000'000;
  // Tensors a pickle may rebuild: safetensors' limit (io/safetensors_format.cpp).
  size_t max_tensors = 50'000;
  // Containers within containers: checkpoints nest a few levels.
  uint32_t max_depth = 100;
};

class PickleDocument {
 public:
  using Ref = uint32_t;

  Ref root() const { return root_; }
  PickleKind kind(Ref ref) const { return values_[ref].kind; }
  bool boolean(Ref ref) const { return values_[ref].integer != 0; }
  int64_t integer(Ref ref) const { return values_[ref].integer; }
  double number(Ref ref) const { return values_[ref].number; }
  // Strings, bytes, big integers, globals and numpy dtypes.
  const std::string& text(Ref ref) const;
  // Lists, tuples, sets; dicts as key, value, key, value, ...
  const std::vector<Ref>& items(Ref ref) const;
  // A dict's Python type: "dict", "collections.OrderedDict" or "argparse.Namespace".
  const std::string& type_name(Ref ref) const;
  const PickleTensor& tensor(Ref ref) const;
  // Of a kStorage value: the storage, and the part of it the persistent id names (the legacy
  // format's storage views; otherwise all of it).
  const PickleStorage& storage(Ref ref) const;
  uint64_t storage_view_offset(Ref ref) const;
  uint64_t storage_view_numel(Ref ref) const;
  const std::vector<PickleStorage>& storages() const { return storages_; }
  // How many tensors the pickle rebuilt.
  size_t tensor_count() const { return tensors_.size(); }

  // The value under string key `key` of a dict, or nullptr.
  const Ref* find(Ref dict, std::string_view key) const;
  // A short description for messages: "dict of 3 entries", "tensor [768, 3, 16, 16]", "'text'".
  std::string describe(Ref ref) const;

 private:
  friend class PickleReader;
  struct Value {
    PickleKind kind = PickleKind::kNone;
    uint32_t depth = 0;   // containers: how many levels of containers they hold
    int64_t integer = 0;  // bool, int; other kinds: the index of their data
    double number = 0.0;  // float
  };
  std::vector<Value> values_;
  std::vector<std::string> texts_;
  std::vector<std::vector<Ref>> containers_;
  std::vector<std::string> container_types_;
  std::vector<PickleTensor> tensors_;
  struct StorageRef {
    uint32_t storage;
    uint64_t view_offset, view_numel;
  };
  std::vector<StorageRef> storage_refs_;
  std::vector<PickleStorage> storages_;
  Ref root_ = 0;
};

// Reads the pickle at the start of `bytes`, through its STOP opcode; `consumed`, when given,
// receives the bytes it took (the legacy format has several pickles and storages in a row).
// `ran_out`, when given, tells whether an error was the end of `bytes` (a longer prefix of the
// stream may read).
PickleDocument read_pickle(std::string_view bytes, const std::string& source,
                           const PickleLimits& limits = {}, size_t* consumed = nullptr,
                           bool* ran_out = nullptr);

}  // namespace attnzoo::io
