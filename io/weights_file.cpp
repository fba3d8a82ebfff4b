#include <attnzoo/core/error.h>
#include <attnzoo/io/archive_entry.h>
#include <attnzoo/io/gunzip.h>
#include <attnzoo/io/tar_archive.h>
#include <attnzoo/io/weights_file.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>

namespace attnzoo::io {
namespace {

namespace fs = std::filesystem;

// An index lists names and files: a few MB for the largest models.
constexpr uintmax_t kMaxIndexBytes = 64u << 20;

// The entry NeMo's save_to writes the state dict to.
constexpr const char* kNemoWeightsEntry = "model_weights.ckpt";

// A PyTorch checkpoint inside a tar archive: `entry`, or NeMo's model_weights.ckpt when empty.
WeightsFile load_from_archive(const std::string& path, const std::string& entry,
                              const WeightsFileOptions& options) {
  const FileSource file(path);
  const TarArchive archive(file);
  const std::string name = entry.empty() ? kNemoWeightsEntry : entry;
  const auto* found = archive.find(name);
  if (!found) {
    throw CheckpointError(path + ": a tar archive without '" + name + "'" +
                          (entry.empty() ? " (the weights of a NeMo .nemo file)" : ""));
  }
  const auto source = archive.open(*found);
  if (!is_torch_checkpoint(*source)) {
    throw CheckpointError(source->name() + ": not a PyTorch checkpoint (torch.save)");
  }
  TorchCheckpointOptions torch_options = options.torch;
  torch_options.key = options.key;
  auto checkpoint = load_torch_checkpoint(*source, torch_options);
  WeightsFile out;
  out.tensors = std::move(checkpoint.tensors);
  out.format = checkpoint.format + (archive.gzipped() ? " in a gzipped tar" : " in a tar");
  out.notes = std::move(checkpoint.notes);
  return out;
}

WeightsFile load_one(const std::string& path, const WeightsFileOptions& options) {
  if (const auto split = split_archive_entry(path)) {
    return load_from_archive(split->archive, split->entry, options);
  }
  std::error_code error;
  if (fs::is_directory(path, error)) {
    throw CheckpointError(path +
                          ": is a directory, not a weights file (a model folder is given as the "
                          "model: --model DIR)");
  }
  WeightsFile out;
  {
    const FileSource source(path);
    if (is_torch_checkpoint(source)) {
      TorchCheckpointOptions torch_options = options.torch;
      torch_options.key = options.key;
      auto checkpoint = load_torch_checkpoint(source, torch_options);
      out.tensors = std::move(checkpoint.tensors);
      out.format = checkpoint.format;
      out.notes = std::move(checkpoint.notes);
      return out;
    }
    if (TarArchive::is_tar(source) || is_gzip(source)) return load_from_archive(path, "", options);
  }
  if (!options.key.empty()) {
    throw CheckpointError(path + ": key '" + options.key +
                          "' was given, but this is no PyTorch checkpoint (a safetensors file "
                          "holds one state dict, without keys)");
  }
  auto file = load_safetensors(path);
  out.tensors = std::move(file.tensors);
  out.metadata = std::move(file.metadata);
  out.format = "safetensors";
  return out;
}

WeightsFile load_index(const std::string& path, const WeightsFileOptions& options) {
  std::error_code error;
  const auto size = fs::file_size(path, error);
  if (error) throw CheckpointError(path + ": no such file");
  if (size > kMaxIndexBytes) {
    throw CheckpointError(path + ": an index of " + std::to_string(size) +
                          " bytes, more than the limit of " + std::to_string(kMaxIndexBytes));
  }
  std::ifstream in(path, std::ios::binary);
  nlohmann::ordered_json index;
  try {
    index = nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(path + ": not JSON (" + e.what() + ")");
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw CheckpointError(path + ": an index needs a \"weight_map\" of tensor names to files");
  }
  const fs::path folder = fs::path(path).parent_path();
  // The shards in the order the map first names them, and the names each must hold.
  std::vector<std::string> shards;
  std::map<std::string, std::set<std::string>> expected;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) {
      throw CheckpointError(path + ": weight_map['" + name.substr(0, 100) +
                            "'] is not a file name");
    }
    const auto shard = file.get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos ||
        shard.find('\\') != std::string::npos || shard == "." || shard == "..") {
      throw CheckpointError(path + ": weight_map['" + name.substr(0, 100) + "'] names '" +
                            shard.substr(0, 100) + "', not a file beside the index");
    }
    if (!expected.count(shard)) shards.push_back(shard);
    expected[shard].insert(name);
  }
  if (shards.empty()) throw CheckpointError(path + ": the weight_map is empty");
  WeightsFile out;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string shard_path = (folder / shards[i]).string();
    auto shard = load_one(shard_path, options);
    auto& names = expected[shards[i]];
    for (const auto& item : shard.tensors) {
      if (!names.erase(item.key())) {
        throw CheckpointError(shard_path + ": holds '" + item.key().substr(0, 100) + "', which " +
                              path + " does not list for it");
      }
      if (out.tensors.contains(item.key())) {
        throw CheckpointError(shard_path + ": '" + item.key().substr(0, 100) +
                              "' is in an earlier shard too");
      }
      out.tensors.insert(item.key(), item.value());
    }
    if (!names.empty()) {
      throw CheckpointError(shard_path + ": lacks '" + names.begin()->substr(0, 100) + "' (and " +
                            std::to_string(names.size() - 1) + " more) that " + path +
                            " lists in it");
    }
    if (i == 0) {
      out.metadata = shard.metadata;
      out.format = "sharded " + shard.format + " (" + std::to_string(shards.size()) + " files)";
    }
    for (const auto& note : shard.notes) {
      if (i == 0) out.notes.push_back(note);
    }
  }
  return out;
}

}  // namespace

bool is_weights_index(const std::string& path) {
  const std::string suffix = ".index.json";
  return path.size() > suffix.size() &&
         path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

WeightsFile load_weights_file(const std::string& path, const WeightsFileOptions& options) {
  return is_weights_index(path) ? load_index(path, options) : load_one(path, options);
}

}  // namespace attnzoo::io
