#include <attnzoo/core/error.h>
#include <attnzoo/io/pickle.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <unordered_map>

namespace attnzoo::io {

const char* pickle_kind_name(PickleKind kind) {
  switch (kind) {
    case PickleKind::kNone:
      return "None";
    case PickleKind::kBool:
      return "bool";
    case PickleKind::kInt:
    case PickleKind::kBigInt:
      return "int";
    case PickleKind::kFloat:
      return "float";
    case PickleKind::kString:
      return "str";
    case PickleKind::kBytes:
      return "bytes";
    case PickleKind::kList:
      return "list";
    case PickleKind::kTuple:
      return "tuple";
    case PickleKind::kSet:
      return "set";
    case PickleKind::kDict:
      return "dict";
    case PickleKind::kGlobal:
      return "name";
    case PickleKind::kStorage:
      return "storage";
    case PickleKind::kTensor:
      return "tensor";
    case PickleKind::kNumpyDtype:
      return "numpy dtype";
  }
  return "value";
}

const std::string& PickleDocument::text(Ref ref) const {
  return texts_[static_cast<size_t>(values_[ref].integer)];
}

const std::vector<PickleDocument::Ref>& PickleDocument::items(Ref ref) const {
  return containers_[static_cast<size_t>(values_[ref].integer)];
}

const std::string& PickleDocument::type_name(Ref ref) const {
  return container_types_[static_cast<size_t>(values_[ref].integer)];
}

const PickleTensor& PickleDocument::tensor(Ref ref) const {
  return tensors_[static_cast<size_t>(values_[ref].integer)];
}

const PickleStorage& PickleDocument::storage(Ref ref) const {
  return storages_[storage_refs_[static_cast<size_t>(values_[ref].integer)].storage];
}

uint64_t PickleDocument::storage_view_offset(Ref ref) const {
  return storage_refs_[static_cast<size_t>(values_[ref].integer)].view_offset;
}

uint64_t PickleDocument::storage_view_numel(Ref ref) const {
  return storage_refs_[static_cast<size_t>(values_[ref].integer)].view_numel;
}

const PickleDocument::Ref* PickleDocument::find(Ref dict, std::string_view key) const {
  if (kind(dict) != PickleKind::kDict) return nullptr;
  const auto& entries = items(dict);
  for (size_t i = 0; i + 1 < entries.size(); i += 2) {
    if (kind(entries[i]) == PickleKind::kString && text(entries[i]) == key) return &entries[i + 1];
  }
  return nullptr;
}

std::string PickleDocument::describe(Ref ref) const {
  switch (kind(ref)) {
    case PickleKind::kBool:
      return boolean(ref) ? "True" : "False";
    case PickleKind::kInt:
      return std::to_string(integer(ref));
    case PickleKind::kFloat:
      return std::to_string(number(ref));
    case PickleKind::kString:
      return "'" + text(ref).substr(0, 60) + (text(ref).size() > 60 ? "...'" : "'");
    case PickleKind::kList:
    case PickleKind::kTuple:
    case PickleKind::kSet:
      return std::string(pickle_kind_name(kind(ref))) + " of " + std::to_string(items(ref).size()) +
             " items";
    case PickleKind::kDict:
      return (type_name(ref) == "dict" ? std::string("dict") : type_name(ref)) + " of " +
             std::to_string(items(ref).size() / 2) + " entries";
    case PickleKind::kTensor: {
      std::string shape = "tensor [";
      const auto& sizes = tensor(ref).sizes;
      for (size_t i = 0; i < sizes.size(); ++i) {
        shape += (i ? ", " : "") + std::to_string(sizes[i]);
      }
      return shape + "]";
    }
    case PickleKind::kGlobal:
    case PickleKind::kNumpyDtype:
      return text(ref);
    default:
      return pickle_kind_name(kind(ref));
  }
}

namespace {

// What an accepted global means to the reader.
enum class Global {
  kOrderedDict,
  kRebuildTensor,      // torch._utils._rebuild_tensor(storage, offset, size, stride)
  kRebuildTensorV2,    // ... (storage, offset, size, stride, requires_grad, hooks[, metadata])
  kRebuildParameter,   // (data, requires_grad, hooks[, state])
  kRebuildFromTypeV2,  // (func, new_type, args, state)
  kSize,
  kDevice,
  kCodecsEncode,
  kSet,
  kFrozenSet,
  kNamespace,
  kNumpyScalar,
  kNumpyDtype,
  kValue,  // a name used as a value only: dtypes, storage types, tensor types
};

// The storage types by the element type they hold ("torch.FloatStorage", and the same under
// torch.cuda for checkpoints saved from a GPU before torch 1.6's typed storages).
const std::map<std::string, SafetensorsDtype, std::less<>>& storage_types() {
  static const std::map<std::string, SafetensorsDtype, std::less<>> types = {
      {"FloatStorage", SafetensorsDtype::kF32}, {"DoubleStorage", SafetensorsDtype::kF64},
      {"HalfStorage", SafetensorsDtype::kF16},  {"BFloat16Storage", SafetensorsDtype::kBF16},
      {"LongStorage", SafetensorsDtype::kI64},  {"IntStorage", SafetensorsDtype::kI32},
      {"ShortStorage", SafetensorsDtype::kI16}, {"CharStorage", SafetensorsDtype::kI8},
      {"ByteStorage", SafetensorsDtype::kU8},   {"BoolStorage", SafetensorsDtype::kBool},
  };
  return types;
}

bool is_storage_type(std::string_view name, SafetensorsDtype* dtype = nullptr) {
  for (const std::string_view prefix : {"torch.cuda.", "torch."}) {
    if (name.substr(0, prefix.size()) != prefix) continue;
    const auto it = storage_types().find(name.substr(prefix.size()));
    if (it == storage_types().end()) return false;
    if (dtype) *dtype = it->second;
    return true;
  }
  return false;
}

bool accepted_global(const std::string& name, Global* meaning) {
  static const std::map<std::string, Global, std::less<>> globals = {
      {"collections.OrderedDict", Global::kOrderedDict},
      {"torch._utils._rebuild_tensor", Global::kRebuildTensor},
      {"torch._utils._rebuild_tensor_v2", Global::kRebuildTensorV2},
      {"torch._utils._rebuild_parameter", Global::kRebuildParameter},
      {"torch._utils._rebuild_parameter_with_state", Global::kRebuildParameter},
      {"torch._tensor._rebuild_from_type_v2", Global::kRebuildFromTypeV2},
      {"torch.Size", Global::kSize},
      {"torch.device", Global::kDevice},
      {"_codecs.encode", Global::kCodecsEncode},
      {"builtins.set", Global::kSet},
      {"__builtin__.set", Global::kSet},
      {"builtins.frozenset", Global::kFrozenSet},
      {"__builtin__.frozenset", Global::kFrozenSet},
      {"argparse.Namespace", Global::kNamespace},
      {"numpy.core.multiarray.scalar", Global::kNumpyScalar},
      {"numpy._core.multiarray.scalar", Global::kNumpyScalar},
      {"numpy.dtype", Global::kNumpyDtype},
      {"torch.Tensor", Global::kValue},
      {"torch.nn.parameter.Parameter", Global::kValue},
  };
  static const char* const dtypes[] = {
      "float32",   "float",      "float64", "double",  "float16", "half",   "bfloat16", "int64",
      "long",      "int32",      "int",     "int16",   "short",   "int8",   "uint8",    "bool",
      "complex64", "complex128", "cfloat",  "cdouble", "uint16",  "uint32", "uint64"};
  const auto it = globals.find(name);
  if (it != globals.end()) {
    *meaning = it->second;
    return true;
  }
  if (is_storage_type(name)) {
    *meaning = Global::kValue;
    return true;
  }
  for (const char* dtype : dtypes) {
    if (name == std::string("torch.") + dtype) {
      *meaning = Global::kValue;
      return true;
    }
  }
  return false;
}

// Every multi-byte opcode argument is little-endian.
uint64_t little_endian(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    const uint32_t min = n == 1 ? 0x80 : n == 2 ? 0x800 : 0x10000;
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace

class PickleReader {
 public:
  using Ref = PickleDocument::Ref;

  PickleReader(std::string_view bytes, const std::string& source, const PickleLimits& limits,
               bool* ran_out)
      : bytes_(bytes), source_(source), limits_(limits), ran_out_(ran_out) {}

  PickleDocument run(size_t* consumed) {
    while (true) {
      const unsigned char op = byte();
      if (op == '.') {  // STOP
        doc_.root_ = pop("STOP");
        if (consumed) *consumed = at_;
        return std::move(doc_);
      }
      step(op);
    }
  }

 private:
  using Value = PickleDocument::Value;

  [[noreturn]] void fail(const std::string& what) const {
    throw CheckpointError(source_ + ": " + what + " (pickle byte " + std::to_string(at_) + ")");
  }

  // --- input -------------------------------------------------------------------------------
  [[noreturn]] void truncated(const char* what) {
    if (ran_out_) *ran_out_ = true;
    fail(what);
  }
  const unsigned char* take(uint64_t n) {
    if (n > bytes_.size() - at_)
      truncated("the pickle ends inside an opcode's argument (truncated)");
    const auto* p = reinterpret_cast<const unsigned char*>(bytes_.data()) + at_;
    at_ += static_cast<size_t>(n);
    return p;
  }
  unsigned char byte() {
    if (at_ >= bytes_.size()) truncated("the pickle ends before its STOP opcode (truncated)");
    return static_cast<unsigned char>(bytes_[at_++]);
  }
  uint64_t unsigned_le(size_t n) { return little_endian(take(n), n); }
  std::string_view line() {
    const size_t end = bytes_.find('\n', at_);
    if (end == std::string_view::npos) truncated("the pickle ends inside a text argument");
    const auto text = bytes_.substr(at_, end - at_);
    at_ = end + 1;
    return text;
  }

  // --- values ------------------------------------------------------------------------------
  Ref add(PickleKind kind, int64_t integer = 0, double number = 0.0) {
    if (doc_.values_.size() >= limits_.max_values) {
      fail("more than " + std::to_string(limits_.max_values) + " values");
    }
    doc_.values_.push_back({kind, 0, integer, number});
    return static_cast<Ref>(doc_.values_.size() - 1);
  }
  Ref add_text(PickleKind kind, std::string text) {
    if (kind == PickleKind::kString && !valid_utf8(text)) fail("a string that is not UTF-8");
    doc_.texts_.push_back(std::move(text));
    return add(kind, static_cast<int64_t>(doc_.texts_.size() - 1));
  }
  Ref add_container(PickleKind kind, std::vector<Ref> items = {}, std::string type = "") {
    doc_.containers_.push_back({});
    doc_.container_types_.push_back(type.empty() ? pickle_kind_name(kind) : std::move(type));
    const Ref ref = add(kind, static_cast<int64_t>(doc_.containers_.size() - 1));
    for (const Ref item : items) insert(ref, item);
    return ref;
  }
  Value& value(Ref ref) { return doc_.values_[ref]; }
  PickleKind kind(Ref ref) const { return doc_.values_[ref].kind; }
  std::vector<Ref>& items_of(Ref ref) {
    return doc_.containers_[static_cast<size_t>(doc_.values_[ref].integer)];
  }
  static bool is_container(PickleKind kind) {
    return kind == PickleKind::kList || kind == PickleKind::kTuple || kind == PickleKind::kSet ||
           kind == PickleKind::kDict;
  }
  // Adds `item` to the container `into`, keeping the nesting bound.
  void insert(Ref into, Ref item) {
    if (is_container(kind(item))) {
      auto& depth = value(into).depth;
      depth = std::max(depth, value(item).depth + 1);
      if (depth > limits_.max_depth) {
        fail("containers nested more than " + std::to_string(limits_.max_depth) + " levels deep");
      }
    }
    items_of(into).push_back(item);
  }
  std::string describe(Ref ref) const { return doc_.describe(ref); }
  const std::string& text(Ref ref) const {
    return doc_.texts_[static_cast<size_t>(doc_.values_[ref].integer)];
  }
  int64_t integer_arg(Ref ref, const char* what) {
    if (kind(ref) == PickleKind::kInt) return value(ref).integer;
    if (kind(ref) == PickleKind::kBool) return value(ref).integer;
    fail(std::string(what) + " must be an int, got " + describe(ref));
  }
  std::vector<int64_t> integer_tuple(Ref ref, const char* what) {
    if (kind(ref) != PickleKind::kTuple && kind(ref) != PickleKind::kList) {
      fail(std::string(what) + " must be a tuple of ints, got " + describe(ref));
    }
    std::vector<int64_t> out;
    for (const Ref item : items_of(ref)) out.push_back(integer_arg(item, what));
    return out;
  }

  // --- the stack ---------------------------------------------------------------------------
  void push(Ref ref) { stack_.push_back(ref); }
  Ref pop(const char* op) {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) {
      fail(std::string(op) + " with an empty stack");
    }
    const Ref ref = stack_.back();
    stack_.pop_back();
    return ref;
  }
  Ref& top(const char* op) {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) {
      fail(std::string(op) + " with an empty stack");
    }
    return stack_.back();
  }
  // The items above the topmost mark, which is removed.
  std::vector<Ref> pop_mark(const char* op) {
    if (marks_.empty()) fail(std::string(op) + " without a MARK");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<Ref> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }

  void memo_put(uint64_t index) {
    if (stack_.empty()) fail("PUT with an empty stack");
    memo_[index] = stack_.back();
  }
  void memo_get(uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) fail("GET of memo entry " + std::to_string(index) + ", never PUT");
    push(it->second);
  }

  // --- globals -----------------------------------------------------------------------------
  Ref global(std::string module, std::string name) {
    if (!valid_utf8(module) || !valid_utf8(name)) fail("a global whose name is not UTF-8");
    const std::string full = module + "." + name;
    Global meaning;
    if (!accepted_global(full, &meaning)) {
      std::string hint;
      if (module.rfind("__torch__", 0) == 0) {
        hint = " (a TorchScript archive: save the model's state_dict() with torch.save instead)";
      } else if (name == "_rebuild_qtensor" || name == "_rebuild_sparse_tensor" ||
                 name == "_rebuild_wrapper_subclass" || name == "_rebuild_meta_tensor_no_storage") {
        hint = " (quantized, sparse, meta and subclassed tensors are not read)";
      } else if (std::isupper(static_cast<unsigned char>(name.empty() ? 'a' : name[0])) &&
                 module.find("torch") == std::string::npos && module != "numpy") {
        hint = " (a pickled object, not a state dict: save its state_dict() instead)";
      }
      throw CheckpointError(source_ + ": refuses to call " + full.substr(0, 200) + hint +
                            ": only tensors, containers, numbers and strings are read");
    }
    const Ref ref = add_text(PickleKind::kGlobal, full);
    global_of_[ref] = meaning;
    return ref;
  }
  Global meaning_of(Ref callable, const char* op) {
    const auto it = global_of_.find(callable);
    if (kind(callable) != PickleKind::kGlobal || it == global_of_.end()) {
      fail(std::string(op) + " of " + describe(callable) + ", which is not a function");
    }
    return it->second;
  }

  // callable(*args), for the accepted globals.
  Ref call(Ref callable, Ref args_ref, const char* op) {
    const Global meaning = meaning_of(callable, op);
    if (kind(args_ref) != PickleKind::kTuple) {
      fail(std::string(op) + " of " + text(callable) + " with arguments that are not a tuple");
    }
    const std::vector<Ref> args = items_of(args_ref);
    const std::string& name = text(callable);
    auto arity = [&](size_t low, size_t high) {
      if (args.size() < low || args.size() > high) {
        fail(name + " takes " + std::to_string(low) +
             (high != low ? " to " + std::to_string(high) : "") + " arguments, got " +
             std::to_string(args.size()));
      }
    };
    switch (meaning) {
      case Global::kOrderedDict: {
        arity(0, 1);
        const Ref dict = add_container(PickleKind::kDict, {}, "collections.OrderedDict");
        if (args.size() == 1) {
          if (kind(args[0]) != PickleKind::kList && kind(args[0]) != PickleKind::kTuple) {
            fail(name + " of " + describe(args[0]));
          }
          for (const Ref pair : std::vector<Ref>(items_of(args[0]))) {
            if (kind(pair) != PickleKind::kTuple || items_of(pair).size() != 2) {
              fail(name + " of an item that is not a (key, value) pair");
            }
            const auto kv = items_of(pair);
            insert(dict, kv[0]);
            insert(dict, kv[1]);
          }
        }
        return dict;
      }
      case Global::kRebuildTensor:
        arity(4, 4);
        return rebuild_tensor(name, args, false);
      case Global::kRebuildTensorV2:
        arity(6, 7);
        if (kind(args[5]) != PickleKind::kDict || !items_of(args[5]).empty()) {
          fail(name + ": a tensor with backward hooks");
        }
        return rebuild_tensor(name, args, integer_arg(args[4], "requires_grad") != 0);
      case Global::kRebuildParameter:
        arity(3, 4);
        if (kind(args[0]) != PickleKind::kTensor) fail(name + " of " + describe(args[0]));
        return args[0];
      case Global::kRebuildFromTypeV2: {
        arity(4, 4);
        const Global function = meaning_of(args[0], name.c_str());
        if (function != Global::kRebuildTensor && function != Global::kRebuildTensorV2 &&
            function != Global::kRebuildParameter) {
          fail(name + " of " + text(args[0]) + ", which rebuilds no tensor");
        }
        if (kind(args[1]) != PickleKind::kGlobal ||
            (text(args[1]) != "torch.Tensor" && text(args[1]) != "torch.nn.parameter.Parameter")) {
          fail(name + " into " + describe(args[1]) + " (only plain tensors and parameters)");
        }
        return call(args[0], args[2], name.c_str());
      }
      case Global::kSize:
        arity(0, 1);
        if (args.empty()) return add_container(PickleKind::kTuple);
        integer_tuple(args[0], "torch.Size");
        return args[0];
      case Global::kDevice: {
        arity(1, 2);
        if (kind(args[0]) != PickleKind::kString) fail(name + " of " + describe(args[0]));
        std::string device = text(args[0]);
        if (args.size() == 2 && kind(args[1]) == PickleKind::kInt) {
          device += ":" + std::to_string(value(args[1]).integer);
        }
        return add_text(PickleKind::kString, device);
      }
      case Global::kCodecsEncode: {
        arity(1, 2);
        if (kind(args[0]) != PickleKind::kString ||
            (args.size() == 2 && (kind(args[1]) != PickleKind::kString ||
                                  (text(args[1]) != "latin1" && text(args[1]) != "latin-1")))) {
          fail(name + ": only _codecs.encode(text, 'latin1') is read (protocol 2's bytes)");
        }
        // Each code point below 256 is one byte.
        const std::string& in = text(args[0]);
        std::string out;
        for (size_t i = 0; i < in.size(); ++i) {
          const auto c = static_cast<unsigned char>(in[i]);
          if (c < 0x80) {
            out += static_cast<char>(c);
          } else if ((c & 0xE0) == 0xC0 && i + 1 < in.size() && c <= 0xC3) {
            out += static_cast<char>(((c & 0x1F) << 6) | (in[++i] & 0x3F));
          } else {
            fail(name + ": a code point above 255 in latin-1 text");
          }
        }
        return add_text(PickleKind::kBytes, std::move(out));
      }
      case Global::kSet:
      case Global::kFrozenSet: {
        arity(0, 1);
        const Ref set = add_container(PickleKind::kSet);
        if (args.size() == 1) {
          if (!is_container(kind(args[0])) || kind(args[0]) == PickleKind::kDict) {
            fail(name + " of " + describe(args[0]));
          }
          for (const Ref item : std::vector<Ref>(items_of(args[0]))) insert(set, item);
        }
        return set;
      }
      case Global::kNamespace:
        arity(0, 0);
        return add_container(PickleKind::kDict, {}, "argparse.Namespace");
      case Global::kNumpyDtype: {
        arity(1, 3);
        if (kind(args[0]) != PickleKind::kString) fail(name + " of " + describe(args[0]));
        return add_text(PickleKind::kNumpyDtype, "<" + text(args[0]));
      }
      case Global::kNumpyScalar:
        arity(1, 2);
        return numpy_scalar(name, args);
      case Global::kValue:
        break;
    }
    fail(std::string(op) + " of " + name + ", which is read as a name only");
  }

  Ref rebuild_tensor(const std::string& name, const std::vector<Ref>& args, bool requires_grad) {
    if (kind(args[0]) != PickleKind::kStorage) {
      fail(name + " of " + describe(args[0]) + " instead of a storage");
    }
    if (doc_.tensors_.size() >= limits_.max_tensors) {
      fail("more than " + std::to_string(limits_.max_tensors) + " tensors");
    }
    PickleTensor t;
    const auto& ref = doc_.storage_refs_[static_cast<size_t>(value(args[0]).integer)];
    t.storage = ref.storage;
    t.view_offset = ref.view_offset;
    t.view_numel = ref.view_numel;
    t.offset = integer_arg(args[1], "a tensor's storage offset");
    t.sizes = integer_tuple(args[2], "a tensor's size");
    t.strides = integer_tuple(args[3], "a tensor's stride");
    t.requires_grad = requires_grad;
    if (t.sizes.size() != t.strides.size()) {
      fail(name + ": " + std::to_string(t.sizes.size()) + " sizes but " +
           std::to_string(t.strides.size()) + " strides");
    }
    if (t.sizes.size() > 64) fail(name + ": more than 64 dimensions");
    // The elements the view reaches: offset + sum((size - 1) * stride), all within the storage.
    if (t.offset < 0) fail(name + ": a negative storage offset");
    unsigned __int128 last = static_cast<uint64_t>(t.offset);
    unsigned __int128 numel = 1;
    for (size_t d = 0; d < t.sizes.size(); ++d) {
      if (t.sizes[d] < 0 || t.strides[d] < 0) fail(name + ": a negative size or stride");
      numel *= static_cast<uint64_t>(t.sizes[d]);
      if (numel > (static_cast<unsigned __int128>(1) << 62)) fail(name + ": too many elements");
      if (t.sizes[d] > 0) {
        last +=
            static_cast<unsigned __int128>(t.sizes[d] - 1) * static_cast<uint64_t>(t.strides[d]);
      }
    }
    if (numel > 0 && last >= t.view_numel) {
      const auto& storage = doc_.storages_[t.storage];
      fail("a tensor of " + std::to_string(static_cast<uint64_t>(numel)) +
           " elements reaches element " + std::to_string(static_cast<uint64_t>(last)) +
           " of storage '" + storage.key.substr(0, 100) + "', which holds " +
           std::to_string(t.view_numel) + " (a storage shorter than its tensor)");
    }
    doc_.tensors_.push_back(std::move(t));
    return add(PickleKind::kTensor, static_cast<int64_t>(doc_.tensors_.size() - 1));
  }

  Ref numpy_scalar(const std::string& name, const std::vector<Ref>& args) {
    if (kind(args[0]) != PickleKind::kNumpyDtype || args.size() != 2 ||
        kind(args[1]) != PickleKind::kBytes) {
      fail(name + ": only scalars of a dtype and their bytes are read");
    }
    const std::string& code = text(args[0]);  // e.g. "<f8"
    const std::string& data = text(args[1]);
    if (code.size() < 3 || code[0] == '>') fail(name + ": a big-endian numpy scalar");
    const char type = code[1];
    size_t width = 0;
    try {
      width = static_cast<size_t>(std::stoul(code.substr(2)));
    } catch (...) {
      fail(name + ": numpy dtype '" + code.substr(1, 20) + "' is not read");
    }
    if (data.size() != width || (width != 1 && width != 2 && width != 4 && width != 8)) {
      fail(name + ": numpy dtype '" + code.substr(1, 20) + "' with " + std::to_string(data.size()) +
           " bytes");
    }
    const uint64_t raw = little_endian(reinterpret_cast<const unsigned char*>(data.data()), width);
    switch (type) {
      case 'f': {
        double v = 0.0;
        if (width == 8) {
          std::memcpy(&v, &raw, 8);
        } else if (width == 4) {
          float f;
          const auto bits = static_cast<uint32_t>(raw);
          std::memcpy(&f, &bits, 4);
          v = f;
        } else {
          fail(name + ": numpy float of " + std::to_string(width) + " bytes is not read");
        }
        return add(PickleKind::kFloat, 0, v);
      }
      case 'i': {
        const int shift = static_cast<int>(64 - 8 * width);
        const auto v = static_cast<int64_t>(raw << shift) >> shift;
        return add(PickleKind::kInt, v);
      }
      case 'u':
        if (raw > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          fail(name + ": a uint64 above 2^63");
        }
        return add(PickleKind::kInt, static_cast<int64_t>(raw));
      case 'b':
        return add(PickleKind::kBool, raw != 0);
      default:
        fail(name + ": numpy dtype '" + code.substr(1, 20) + "' is not read");
    }
  }

  // ('storage', type, key, location, numel[, view]) -> a kStorage value.
  Ref persistent_load(Ref pid) {
    if (kind(pid) != PickleKind::kTuple) fail("a persistent id that is not a tuple");
    const auto parts = items_of(pid);
    if (parts.size() < 5 || parts.size() > 6 || kind(parts[0]) != PickleKind::kString ||
        text(parts[0]) != "storage") {
      fail("a persistent id other than ('storage', type, key, location, numel)");
    }
    PickleStorage storage;
    if (kind(parts[1]) != PickleKind::kGlobal || !is_storage_type(text(parts[1]), &storage.dtype)) {
      fail("a storage of type " + describe(parts[1]) +
           " (float, half, bfloat16, double, int64, int32, int16, int8, uint8 and bool are read)");
    }
    storage.type = text(parts[1]);
    if (kind(parts[2]) != PickleKind::kString || kind(parts[3]) != PickleKind::kString) {
      fail("a storage whose key or location is not a string");
    }
    storage.key = text(parts[2]);
    storage.location = text(parts[3]);
    const int64_t numel = integer_arg(parts[4], "a storage's size");
    if (numel < 0 || numel > (int64_t{1} << 56))
      fail("a storage of " + std::to_string(numel) + " elements");
    storage.numel = static_cast<uint64_t>(numel);
    uint32_t index;
    const auto found = storage_index_.find(storage.key);
    if (found == storage_index_.end()) {
      index = static_cast<uint32_t>(doc_.storages_.size());
      storage_index_.emplace(storage.key, index);
      doc_.storages_.push_back(storage);
    } else {
      index = found->second;
      const auto& known = doc_.storages_[index];
      if (known.dtype != storage.dtype || known.numel != storage.numel) {
        fail("storage '" + storage.key.substr(0, 100) +
             "' is named twice, with another type or size");
      }
    }
    PickleDocument::StorageRef ref{index, 0, storage.numel};
    if (parts.size() == 6 && kind(parts[5]) != PickleKind::kNone) {
      // The legacy format's storage views: (view_key, offset, size) into the root storage.
      if (kind(parts[5]) != PickleKind::kTuple || items_of(parts[5]).size() != 3) {
        fail("a storage view that is not (key, offset, size)");
      }
      const auto view = items_of(parts[5]);
      const int64_t offset = integer_arg(view[1], "a storage view's offset");
      const int64_t size = integer_arg(view[2], "a storage view's size");
      if (offset < 0 || size < 0 || static_cast<uint64_t>(offset) > storage.numel ||
          static_cast<uint64_t>(size) > storage.numel - static_cast<uint64_t>(offset)) {
        fail("a storage view outside storage '" + storage.key.substr(0, 100) + "'");
      }
      ref.view_offset = static_cast<uint64_t>(offset);
      ref.view_numel = static_cast<uint64_t>(size);
    }
    doc_.storage_refs_.push_back(ref);
    return add(PickleKind::kStorage, static_cast<int64_t>(doc_.storage_refs_.size() - 1));
  }

  // obj.__setstate__(state) or obj.__dict__.update(state), for the objects the reader makes.
  void build(Ref object, Ref state) {
    if (kind(object) == PickleKind::kNumpyDtype) {
      // (version, byteorder, subarray, names, fields, elsize, alignment, flags)
      if (kind(state) == PickleKind::kTuple && items_of(state).size() >= 2 &&
          kind(items_of(state)[1]) == PickleKind::kString) {
        const std::string order = text(items_of(state)[1]);
        auto& code = doc_.texts_[static_cast<size_t>(value(object).integer)];
        code[0] = order == ">" ? '>' : '<';
      }
      return;
    }
    if (kind(object) == PickleKind::kDict) {
      // A (dict, slots) pair: the first is the instance's __dict__.
      if (kind(state) == PickleKind::kTuple && items_of(state).size() == 2) {
        state = items_of(state)[0];
      }
      if (kind(state) == PickleKind::kNone) return;
      if (kind(state) != PickleKind::kDict) fail("BUILD of a dict with " + describe(state));
      // An OrderedDict's attributes (a state dict's _metadata) are not entries; a Namespace's are.
      if (doc_.container_types_[static_cast<size_t>(value(object).integer)] ==
          "argparse.Namespace") {
        for (const Ref item : std::vector<Ref>(items_of(state))) insert(object, item);
      }
      return;
    }
    if (kind(object) == PickleKind::kTensor) return;  // a Parameter's Python attributes
    fail("BUILD of " + describe(object));
  }

  void set_items(Ref dict, const std::vector<Ref>& items, const char* op) {
    if (kind(dict) != PickleKind::kDict) fail(std::string(op) + " on " + describe(dict));
    if (items.size() % 2 != 0) fail(std::string(op) + " with a key without a value");
    for (const Ref item : items) insert(dict, item);
  }
  void append_items(Ref list, const std::vector<Ref>& items, const char* op) {
    if (kind(list) != PickleKind::kList) fail(std::string(op) + " on " + describe(list));
    for (const Ref item : items) insert(list, item);
  }

  Ref integer_from_bytes(const unsigned char* p, size_t n) {
    if (n == 0) return add(PickleKind::kInt, 0);
    if (n <= 8) {
      const uint64_t raw = little_endian(p, n);
      const int shift = static_cast<int>(64 - 8 * n);
      return add(PickleKind::kInt, static_cast<int64_t>(raw << shift) >> shift);
    }
    return add_text(PickleKind::kBigInt, std::string(reinterpret_cast<const char*>(p), n));
  }

  Ref text_integer(std::string_view digits, const char* op) {
    if (!digits.empty() && digits.back() == 'L') digits.remove_suffix(1);
    if (digits == "00") return add(PickleKind::kBool, 0);  // protocol 0's False and True
    if (digits == "01") return add(PickleKind::kBool, 1);
    size_t i = 0;
    const bool negative = !digits.empty() && digits[0] == '-';
    if (negative || (!digits.empty() && digits[0] == '+')) i = 1;
    if (i >= digits.size() || digits.size() - i > 18)
      fail(std::string(op) + ": an int out of range");
    int64_t v = 0;
    for (; i < digits.size(); ++i) {
      if (digits[i] < '0' || digits[i] > '9') fail(std::string(op) + ": not an int");
      v = v * 10 + (digits[i] - '0');
    }
    return add(PickleKind::kInt, negative ? -v : v);
  }

  void step(unsigned char op) {
    switch (op) {
      case 0x80:  // PROTO
        if (byte() > 5) fail("pickle protocol above 5");
        return;
      case 0x95:  // FRAME: a read-ahead hint
        take(8);
        return;
      case '(':  // MARK
        marks_.push_back(stack_.size());
        return;
      case '0':  // POP
        if (!stack_.empty() && (marks_.empty() || stack_.size() > marks_.back())) {
          stack_.pop_back();
        } else if (!marks_.empty() && stack_.size() == marks_.back()) {
          marks_.pop_back();
        } else {
          fail("POP with an empty stack");
        }
        return;
      case '1':  // POP_MARK
        pop_mark("POP_MARK");
        return;
      case '2':  // DUP
        push(top("DUP"));
        return;
      case 'N':
        push(add(PickleKind::kNone));
        return;
      case 0x88:  // NEWTRUE
        push(add(PickleKind::kBool, 1));
        return;
      case 0x89:  // NEWFALSE
        push(add(PickleKind::kBool, 0));
        return;
      case 'J': {  // BININT
        const auto v = static_cast<int32_t>(static_cast<uint32_t>(unsigned_le(4)));
        push(add(PickleKind::kInt, v));
        return;
      }
      case 'K':  // BININT1
        push(add(PickleKind::kInt, static_cast<int64_t>(unsigned_le(1))));
        return;
      case 'M':  // BININT2
        push(add(PickleKind::kInt, static_cast<int64_t>(unsigned_le(2))));
        return;
      case 0x8a: {  // LONG1
        const size_t n = byte();
        push(integer_from_bytes(take(n), n));
        return;
      }
      case 0x8b: {  // LONG4
        const auto n = static_cast<int32_t>(static_cast<uint32_t>(unsigned_le(4)));
        if (n < 0) fail("LONG4 of a negative length");
        push(integer_from_bytes(take(static_cast<uint64_t>(n)), static_cast<size_t>(n)));
        return;
      }
      case 'I':  // INT (text)
        push(text_integer(line(), "INT"));
        return;
      case 'L':  // LONG (text)
        push(text_integer(line(), "LONG"));
        return;
      case 'G': {  // BINFLOAT: big-endian
        const unsigned char* p = take(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | p[i];
        double v;
        std::memcpy(&v, &bits, 8);
        push(add(PickleKind::kFloat, 0, v));
        return;
      }
      case 'F': {  // FLOAT (text)
        const std::string text(line());
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) fail("FLOAT: not a number");
        push(add(PickleKind::kFloat, 0, v));
        return;
      }
      case 'X': {  // BINUNICODE
        const uint64_t n = unsigned_le(4);
        push(add_text(PickleKind::kString, std::string(reinterpret_cast<const char*>(take(n)), n)));
        return;
      }
      case 0x8c: {  // SHORT_BINUNICODE
        const uint64_t n = byte();
        push(add_text(PickleKind::kString, std::string(reinterpret_cast<const char*>(take(n)), n)));
        return;
      }
      case 0x8d: {  // BINUNICODE8
        const uint64_t n = unsigned_le(8);
        push(add_text(PickleKind::kString, std::string(reinterpret_cast<const char*>(take(n)), n)));
        return;
      }
      case 'T': {  // BINSTRING: Python 2's str, read as text (torch.load's default encoding)
        const auto n = static_cast<int32_t>(static_cast<uint32_t>(unsigned_le(4)));
        if (n < 0) fail("BINSTRING of a negative length");
        const auto n64 = static_cast<uint64_t>(n);
        push(add_text(PickleKind::kString,
                      std::string(reinterpret_cast<const char*>(take(n64)), n64)));
        return;
      }
      case 'U': {  // SHORT_BINSTRING
        const uint64_t n = byte();
        push(add_text(PickleKind::kString, std::string(reinterpret_cast<const char*>(take(n)), n)));
        return;
      }
      case 'B': {  // BINBYTES
        const uint64_t n = unsigned_le(4);
        push(add_text(PickleKind::kBytes, std::string(reinterpret_cast<const char*>(take(n)), n)));
        return;
      }
      case 'C': {  // SHORT_BINBYTES
        const uint64_t n = byte();
        push(add_text(PickleKind::kBytes, std::string(reinterpret_cast<const char*>(take(n)), n)));
        return;
      }
      case 0x8e:    // BINBYTES8
      case 0x96: {  // BYTEARRAY8
        const uint64_t n = unsigned_le(8);
        push(add_text(PickleKind::kBytes, std::string(reinterpret_cast<const char*>(take(n)), n)));
        return;
      }
      case '}':  // EMPTY_DICT
        push(add_container(PickleKind::kDict));
        return;
      case ']':  // EMPTY_LIST
        push(add_container(PickleKind::kList));
        return;
      case ')':  // EMPTY_TUPLE
        push(add_container(PickleKind::kTuple));
        return;
      case 0x8f:  // EMPTY_SET
        push(add_container(PickleKind::kSet));
        return;
      case 'd': {  // DICT
        auto items = pop_mark("DICT");
        if (items.size() % 2 != 0) fail("DICT with a key without a value");
        push(add_container(PickleKind::kDict, items));
        return;
      }
      case 'l':  // LIST
        push(add_container(PickleKind::kList, pop_mark("LIST")));
        return;
      case 't':  // TUPLE
        push(add_container(PickleKind::kTuple, pop_mark("TUPLE")));
        return;
      case 0x91:  // FROZENSET
        push(add_container(PickleKind::kSet, pop_mark("FROZENSET")));
        return;
      case 0x85:    // TUPLE1
      case 0x86:    // TUPLE2
      case 0x87: {  // TUPLE3
        const size_t n = op - 0x84u;
        std::vector<Ref> items(n);
        for (size_t i = n; i-- > 0;) items[i] = pop("TUPLEn");
        push(add_container(PickleKind::kTuple, items));
        return;
      }
      case 'a': {  // APPEND
        const Ref item = pop("APPEND");
        append_items(top("APPEND"), {item}, "APPEND");
        return;
      }
      case 'e': {  // APPENDS
        const auto items = pop_mark("APPENDS");
        append_items(top("APPENDS"), items, "APPENDS");
        return;
      }
      case 0x90: {  // ADDITEMS
        const auto items = pop_mark("ADDITEMS");
        const Ref set = top("ADDITEMS");
        if (kind(set) != PickleKind::kSet) fail("ADDITEMS on " + describe(set));
        for (const Ref item : items) insert(set, item);
        return;
      }
      case 's': {  // SETITEM
        const Ref v = pop("SETITEM");
        const Ref k = pop("SETITEM");
        set_items(top("SETITEM"), {k, v}, "SETITEM");
        return;
      }
      case 'u': {  // SETITEMS
        const auto items = pop_mark("SETITEMS");
        set_items(top("SETITEMS"), items, "SETITEMS");
        return;
      }
      case 'p': {  // PUT (text)
        const std::string index(line());
        try {
          memo_put(std::stoull(index));
        } catch (const std::logic_error&) {
          fail("PUT of a memo index that is not a number");
        }
        return;
      }
      case 'g': {  // GET (text)
        const std::string index(line());
        uint64_t i = 0;
        try {
          i = std::stoull(index);
        } catch (const std::logic_error&) {
          fail("GET of a memo index that is not a number");
        }
        memo_get(i);
        return;
      }
      case 'q':  // BINPUT
        memo_put(byte());
        return;
      case 'r':  // LONG_BINPUT
        memo_put(unsigned_le(4));
        return;
      case 0x94:  // MEMOIZE
        memo_put(memo_.size());
        return;
      case 'h':  // BINGET
        memo_get(byte());
        return;
      case 'j':  // LONG_BINGET
        memo_get(unsigned_le(4));
        return;
      case 'c': {  // GLOBAL: "module\nname\n"
        std::string module(line());
        std::string name(line());
        push(global(std::move(module), std::move(name)));
        return;
      }
      case 0x93: {  // STACK_GLOBAL
        const Ref name = pop("STACK_GLOBAL");
        const Ref module = pop("STACK_GLOBAL");
        if (kind(name) != PickleKind::kString || kind(module) != PickleKind::kString) {
          fail("STACK_GLOBAL of names that are not strings");
        }
        push(global(text(module), text(name)));
        return;
      }
      case 'R': {  // REDUCE
        const Ref args = pop("REDUCE");
        const Ref callable = pop("REDUCE");
        push(call(callable, args, "REDUCE"));
        return;
      }
      case 0x81: {  // NEWOBJ: cls.__new__(cls, *args)
        const Ref args = pop("NEWOBJ");
        const Ref cls = pop("NEWOBJ");
        push(call(cls, args, "NEWOBJ"));
        return;
      }
      case 0x92: {  // NEWOBJ_EX: cls.__new__(cls, *args, **kwargs)
        const Ref kwargs = pop("NEWOBJ_EX");
        const Ref args = pop("NEWOBJ_EX");
        const Ref cls = pop("NEWOBJ_EX");
        if (kind(kwargs) != PickleKind::kDict || !items_of(kwargs).empty()) {
          fail("NEWOBJ_EX with keyword arguments");
        }
        push(call(cls, args, "NEWOBJ_EX"));
        return;
      }
      case 'b': {  // BUILD
        const Ref state = pop("BUILD");
        build(top("BUILD"), state);
        return;
      }
      case 'Q':  // BINPERSID
        push(persistent_load(pop("BINPERSID")));
        return;
      case 'P':
        fail("a text persistent id (PERSID); torch.save writes tuples");
      case 'S':
      case 'V':
        fail("protocol 0 text strings are not read (torch.save writes protocol 2 or later)");
      case 'i':
      case 'o':
        fail("INST/OBJ (protocol 0 and 1 objects) are not read");
      case 0x82:
      case 0x83:
      case 0x84:
        fail("extension codes (EXT1/2/4) are not read");
      case 0x97:
      case 0x98:
        fail("out-of-band buffers (protocol 5) are not read");
      default:
        fail("unknown pickle opcode 0x" + [op] {
          const char* hex = "0123456789abcdef";
          return std::string{hex[op >> 4], hex[op & 15]};
        }());
    }
  }

  std::string_view bytes_;
  const std::string& source_;
  const PickleLimits& limits_;
  bool* ran_out_;
  size_t at_ = 0;
  PickleDocument doc_;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Ref> memo_;
  std::unordered_map<Ref, Global> global_of_;
  std::unordered_map<std::string, uint32_t> storage_index_;
};

PickleDocument read_pickle(std::string_view bytes, const std::string& source,
                           const PickleLimits& limits, size_t* consumed, bool* ran_out) {
  if (ran_out) *ran_out = false;
  return PickleReader(bytes, source, limits, ran_out).run(consumed);
}

}  // namespace attnzoo::io
