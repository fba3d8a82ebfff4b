#include <attnzoo/core/error.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/io/torch_checkpoint.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

namespace attnzoo::io {
namespace {

using Ref = PickleDocument::Ref;

// The legacy format's first pickle: the magic number 0x1950a86a20f9469cfc6c, pickled with
// protocol 2 as a 10-byte LONG1.
constexpr std::array<unsigned char, 14> kLegacyStart = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c,
                                                        0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
constexpr int64_t kLegacyProtocolVersion = 1001;
// The keys under which training checkpoints keep a state dict, in the order they are listed.
constexpr const char* kStateDictKeys[] = {
    "state_dict", "model", "module", "model_state_dict", "state_dict_ema", "model_ema", "ema"};
constexpr const char* kDdpPrefix = "module.";

[[noreturn]] void fail(const ByteSource& source, const std::string& what) {
  throw CheckpointError(source.name() + ": " + what);
}

bool is_legacy(const ByteSource& source) {
  if (source.size() < kLegacyStart.size()) return false;
  std::array<unsigned char, kLegacyStart.size()> start{};
  source.read(0, start.data(), start.size(), "the first bytes");
  return start == kLegacyStart;
}

bool is_tar(const ByteSource& source) {
  if (source.size() < 512) return false;
  char magic[5];
  source.read(257, magic, 5, "a tar header");
  return std::memcmp(magic, "ustar", 5) == 0;
}

// A dict of names to tensors: string keys, at least one tensor, nothing but tensors (and None,
// which state dicts of modules with optional buffers can hold).
bool is_state_dict(const PickleDocument& doc, Ref ref) {
  if (doc.kind(ref) != PickleKind::kDict) return false;
  const auto& items = doc.items(ref);
  bool any = false;
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (doc.kind(items[i]) != PickleKind::kString) return false;
    const auto kind = doc.kind(items[i + 1]);
    if (kind == PickleKind::kTensor) {
      any = true;
    } else if (kind != PickleKind::kNone) {
      return false;
    }
  }
  return any;
}

// "epoch (int), state_dict (dict of 152 entries), ..." for messages.
std::string list_keys(const PickleDocument& doc, Ref dict) {
  std::string out;
  const auto& items = doc.items(dict);
  size_t listed = 0;
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (listed == 30) {
      out += ", and " + std::to_string(items.size() / 2 - listed) + " more";
      break;
    }
    const std::string key = doc.kind(items[i]) == PickleKind::kString
                                ? doc.text(items[i]).substr(0, 80)
                                : doc.describe(items[i]);
    out += (listed++ ? ", " : "") + key + " (" + doc.describe(items[i + 1]) + ")";
  }
  return out.empty() ? "none" : out;
}

struct Found {
  Ref dict;
  std::string key;
};

Found find_state_dict(const PickleDocument& doc, const std::string& key, const ByteSource& source) {
  const Ref root = doc.root();
  if (!key.empty()) {
    Ref at = root;
    std::string path;
    size_t begin = 0;
    while (begin <= key.size()) {
      const size_t end = std::min(key.find('/', begin), key.size());
      const std::string part = key.substr(begin, end - begin);
      if (doc.kind(at) != PickleKind::kDict) {
        fail(source, "key '" + key + "': " + (path.empty() ? "the checkpoint" : "'" + path + "'") +
                         " holds a " + doc.describe(at) + ", not a dict");
      }
      const Ref* next = doc.find(at, part);
      if (!next) {
        fail(source, "key '" + key + "': " + (path.empty() ? "the checkpoint" : "'" + path + "'") +
                         " has no entry '" + part + "'; its keys: " + list_keys(doc, at));
      }
      at = *next;
      path += (path.empty() ? "" : "/") + part;
      begin = end + 1;
    }
    bool any_tensor = false;
    if (doc.kind(at) == PickleKind::kDict) {
      const auto& items = doc.items(at);
      for (size_t i = 1; i < items.size(); i += 2) {
        any_tensor = any_tensor || doc.kind(items[i]) == PickleKind::kTensor;
      }
    }
    if (!any_tensor) {
      fail(source, "key '" + key + "' holds a " + doc.describe(at) + ", not a state dict");
    }
    return {at, key};
  }
  if (is_state_dict(doc, root)) return {root, ""};
  if (doc.kind(root) != PickleKind::kDict) {
    fail(source, "holds a " + doc.describe(root) +
                     ", not a state dict (a dict of names to tensors, or a checkpoint dict that "
                     "holds one)");
  }
  std::vector<std::string> found;
  for (const char* candidate : kStateDictKeys) {
    const Ref* value = doc.find(root, candidate);
    if (value && is_state_dict(doc, *value)) found.emplace_back(candidate);
  }
  if (found.size() == 1) return {*doc.find(root, found[0]), found[0]};
  if (found.empty()) {
    std::string known;
    for (const char* candidate : kStateDictKeys)
      known += (known.empty() ? "" : ", ") + std::string(candidate);
    fail(source, "no state dict at the top level nor under " + known +
                     "; the checkpoint's keys: " + list_keys(doc, root) +
                     ". Name the one that holds it with the key option (--key)");
  }
  std::string names;
  for (const auto& name : found) names += (names.empty() ? "" : ", ") + name;
  fail(source, "holds several state dicts (" + names + "): choose one with the key option (--key " +
                   found[0] +
                   "; timm's load_checkpoint takes the EMA weights, state_dict_ema, by default)");
}

// Where each storage's bytes are, and how they are read.
class StorageBytes {
 public:
  virtual ~StorageBytes() = default;
  // Throws unless the file holds the storage's bytes: called before its memory is allocated.
  virtual void check(const PickleStorage& storage) const = 0;
  // Reads the whole storage into `destination` (numel · element size bytes).
  virtual void read(const PickleStorage& storage, void* destination) const = 0;
};

class ZipStorages final : public StorageBytes {
 public:
  ZipStorages(const ZipArchive& archive, std::string record)
      : archive_(archive), record_(std::move(record)) {}
  void check(const PickleStorage& storage) const override { entry(storage); }
  void read(const PickleStorage& storage, void* destination) const override {
    archive_.read(entry(storage), destination);
  }

 private:
  const ZipEntry& entry(const PickleStorage& storage) const {
    const auto* entry = archive_.find(record_ + "data/" + storage.key);
    const std::string label = "storage '" + storage.key.substr(0, 100) + "'";
    if (!entry) {
      fail(archive_.source(),
           label + ": the archive has no entry " + record_ + "data/" + storage.key.substr(0, 100));
    }
    const uint64_t bytes = storage.numel * dtype_size(storage.dtype);
    if (entry->size != bytes) {
      fail(archive_.source(), label + " holds " + std::to_string(entry->size) +
                                  " bytes; its pickle claims " + std::to_string(storage.numel) +
                                  " elements of " + std::to_string(dtype_size(storage.dtype)) +
                                  " bytes (" + std::to_string(bytes) + ")");
    }
    return *entry;
  }

  const ZipArchive& archive_;
  std::string record_;
};

class LegacyStorages final : public StorageBytes {
 public:
  LegacyStorages(const ByteSource& source, std::map<std::string, std::pair<uint64_t, uint64_t>> at)
      : source_(source), at_(std::move(at)) {}
  void check(const PickleStorage& storage) const override { data_offset(storage); }
  void read(const PickleStorage& storage, void* destination) const override {
    source_.read(data_offset(storage), destination, storage.numel * dtype_size(storage.dtype),
                 "storage '" + storage.key.substr(0, 100) + "'");
  }

 private:
  uint64_t data_offset(const PickleStorage& storage) const {
    const auto it = at_.find(storage.key);
    const std::string label = "storage '" + storage.key.substr(0, 100) + "'";
    if (it == at_.end()) fail(source_, label + " is not among the storages the file holds");
    if (it->second.second != storage.numel) {
      fail(source_, label + " holds " + std::to_string(it->second.second) +
                        " elements; its pickle claims " + std::to_string(storage.numel));
    }
    return it->second.first;
  }

  const ByteSource& source_;
  std::map<std::string, std::pair<uint64_t, uint64_t>> at_;  // key -> (data offset, elements)
};

void swap_bytes(torch::Tensor& storage) {
  const size_t width = storage.element_size();
  if (width == 1) return;
  auto* p = static_cast<unsigned char*>(storage.data_ptr());
  const auto n = static_cast<size_t>(storage.numel());
  for (size_t i = 0; i < n; ++i) std::reverse(p + i * width, p + (i + 1) * width);
}

// The state dict's tensors, each storage read once and viewed by its tensors.
TorchCheckpoint build(const PickleDocument& doc, const Found& found, const StorageBytes& bytes,
                      bool big_endian, const ByteSource& source, std::string format) {
  TorchCheckpoint out;
  out.format = std::move(format);
  out.key = found.key;
  if (!found.key.empty()) out.notes.push_back("the state dict under '" + found.key + "'");
  std::map<uint32_t, torch::Tensor> storages;
  std::vector<std::string> skipped;
  const auto& items = doc.items(found.dict);
  bool all_ddp = items.size() >= 2;
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (doc.kind(items[i]) != PickleKind::kString) {
      fail(source,
           "the state dict has a key that is not a string (" + doc.describe(items[i]) + ")");
    }
    if (doc.kind(items[i + 1]) == PickleKind::kTensor &&
        doc.text(items[i]).rfind(kDdpPrefix, 0) != 0) {
      all_ddp = false;
    }
  }
  // Every storage is checked against the file before any is allocated.
  for (size_t i = 1; i < items.size(); i += 2) {
    if (doc.kind(items[i]) == PickleKind::kTensor) {
      bytes.check(doc.storages()[doc.tensor(items[i]).storage]);
    }
  }
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    std::string name = doc.text(items[i]);
    const Ref value = items[i + 1];
    if (doc.kind(value) != PickleKind::kTensor) {
      skipped.push_back(name.substr(0, 80) + " (" + doc.describe(value) + ")");
      continue;
    }
    if (name.empty()) fail(source, "the state dict has a tensor with an empty name");
    const auto& t = doc.tensor(value);
    auto it = storages.find(t.storage);
    if (it == storages.end()) {
      const auto& s = doc.storages()[t.storage];
      auto storage = torch::empty({static_cast<int64_t>(s.numel)},
                                  torch::TensorOptions().dtype(to_torch_dtype(s.dtype)));
      bytes.read(s, storage.data_ptr());
      if (big_endian) swap_bytes(storage);
      if (s.dtype == SafetensorsDtype::kBool) {
        // A bool is one byte of 0 or 1; any other byte would be undefined behaviour to use.
        auto* p = static_cast<unsigned char*>(storage.data_ptr());
        for (uint64_t k = 0; k < s.numel; ++k) p[k] = p[k] != 0;
      }
      it = storages.emplace(t.storage, std::move(storage)).first;
    }
    auto tensor =
        it->second.as_strided(t.sizes, t.strides, static_cast<int64_t>(t.view_offset) + t.offset);
    if (all_ddp) name = name.substr(std::strlen(kDdpPrefix));
    if (out.tensors.contains(name)) {
      fail(source, "the state dict names tensor '" + name.substr(0, 100) + "' twice");
    }
    out.tensors.insert(name, std::move(tensor));
  }
  if (out.tensors.is_empty()) fail(source, "the state dict holds no tensor");
  if (all_ddp) out.notes.push_back("DistributedDataParallel's prefix 'module.' removed");
  if (!skipped.empty()) {
    std::string list;
    for (size_t i = 0; i < skipped.size() && i < 10; ++i) list += (i ? ", " : "") + skipped[i];
    if (skipped.size() > 10) list += ", and " + std::to_string(skipped.size() - 10) + " more";
    out.notes.push_back(std::to_string(skipped.size()) +
                        " entries that are not tensors skipped: " + list);
  }
  return out;
}

TorchCheckpoint load_zip(const ByteSource& source, const TorchCheckpointOptions& options) {
  const ZipArchive archive(source, options.zip);
  // The record's folder: the one top-level folder holding data.pkl.
  std::string record;
  for (const auto& entry : archive.entries()) {
    const auto slash = entry.name.find('/');
    if (slash != std::string::npos &&
        entry.name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      if (!record.empty())
        fail(source, "two records in one archive (" + record + "data.pkl and " +
                         entry.name.substr(0, 100) + ")");
      record = entry.name.substr(0, slash + 1);
    }
  }
  if (record.empty()) {
    fail(source, "a zip archive without <folder>/data.pkl: not a file of torch.save");
  }
  const auto* pickle_entry = archive.find(record + "data.pkl");
  const std::string pickle =
      archive.read_string(*pickle_entry, options.max_pickle_bytes, "the pickle");
  bool big_endian = false;
  if (const auto* order = archive.find(record + "byteorder")) {
    const std::string value = archive.read_string(*order, 16, "the byte order");
    if (value != "little" && value != "big") {
      fail(source, record + "byteorder is '" + value.substr(0, 16) + "', not little or big");
    }
    big_endian = value == "big";
  }
  const auto doc = read_pickle(pickle, source.name(), options.pickle);
  const auto found = find_state_dict(doc, options.key, source);
  return build(doc, found, ZipStorages(archive, record), big_endian, source, "torch.save zip");
}

TorchCheckpoint load_legacy(const ByteSource& source, const TorchCheckpointOptions& options) {
  const uint64_t limit = std::min<uint64_t>(source.size(), options.max_pickle_bytes);
  uint64_t prefix = std::min<uint64_t>(limit, uint64_t{1} << 20);
  while (true) {
    const std::string bytes = source.read_string(0, prefix, "the pickles");
    std::string_view rest = bytes;
    size_t used = 0, offset = 0;
    bool ran_out = false;
    try {
      auto next = [&]() {
        auto doc = read_pickle(rest, source.name(), options.pickle, &used, &ran_out);
        rest.remove_prefix(used);
        offset += used;
        return doc;
      };
      const auto magic = next();
      (void)magic;  // checked by is_legacy: the first bytes are exactly its pickle
      const auto version = next();
      if (version.kind(version.root()) != PickleKind::kInt ||
          version.integer(version.root()) != kLegacyProtocolVersion) {
        fail(source,
             "legacy format protocol version " + version.describe(version.root()) + ", not 1001");
      }
      const auto sys_info = next();
      (void)sys_info;  // storages are little-endian whatever the saving host was
      const auto doc = next();
      const auto keys = next();
      const auto found = find_state_dict(doc, options.key, source);
      if (keys.kind(keys.root()) != PickleKind::kList) {
        fail(source, "the legacy format's storage keys are not a list");
      }
      std::map<std::string, SafetensorsDtype> dtypes;
      for (const auto& s : doc.storages()) dtypes.emplace(s.key, s.dtype);
      std::map<std::string, std::pair<uint64_t, uint64_t>> at;
      uint64_t position = offset;
      for (const Ref key : keys.items(keys.root())) {
        if (keys.kind(key) != PickleKind::kString) {
          fail(source, "a legacy storage key that is not a string");
        }
        const auto dtype = dtypes.find(keys.text(key));
        if (dtype == dtypes.end()) {
          fail(source, "storage '" + keys.text(key).substr(0, 100) + "' is listed but never used");
        }
        unsigned char count_bytes[8];
        source.read(position, count_bytes, 8, "a storage's size");
        uint64_t count = 0;
        for (int b = 7; b >= 0; --b) count = (count << 8) | count_bytes[b];
        const uint64_t width = dtype_size(dtype->second);
        if (count > (source.size() - position - 8) / width) {
          fail(source, "storage '" + keys.text(key).substr(0, 100) + "' claims " +
                           std::to_string(count) + " elements, more than the file holds");
        }
        at[keys.text(key)] = {position + 8, count};
        position += 8 + count * width;
      }
      return build(doc, found, LegacyStorages(source, std::move(at)), false, source,
                   "torch.save legacy");
    } catch (const CheckpointError&) {
      if (!ran_out || prefix >= limit) throw;
      prefix = std::min(limit, prefix * 4);
    }
  }
}

}  // namespace

bool is_torch_checkpoint(const ByteSource& source) {
  return ZipArchive::is_zip(source) || is_legacy(source);
}

TorchCheckpoint load_torch_checkpoint(const ByteSource& source,
                                      const TorchCheckpointOptions& options) {
  if (ZipArchive::is_zip(source)) return load_zip(source, options);
  if (is_legacy(source)) return load_legacy(source, options);
  if (is_tar(source)) {
    fail(source,
         "a tar-format PyTorch checkpoint (torch 0.3 and earlier) is not read: load it with an "
         "old torch and save it again");
  }
  fail(source, "not a PyTorch checkpoint (neither torch.save's zip nor its legacy format)");
}

TorchCheckpoint load_torch_checkpoint(const std::string& path,
                                      const TorchCheckpointOptions& options) {
  const FileSource source(path);
  return load_torch_checkpoint(source, options);
}

}  // namespace attnzoo::io
