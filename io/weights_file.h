// Weights as users have them, in one call: a safetensors file, a PyTorch checkpoint (.pt .pth
// .bin .ckpt: io/torch_checkpoint.h), or the index of a sharded checkpoint
// (model.safetensors.index.json, pytorch_model.bin.index.json: a weight_map from each tensor to
// the shard beside the index that holds it), or a tar archive holding a PyTorch checkpoint: a
// NeMo .nemo file (its model_weights.ckpt), or any entry named as ARCHIVE#ENTRY
// (io/archive_entry.h), read in place. The format is told by the file's bytes, not its name, but
// for the index (by its name).
//
//   auto weights = io::load_weights_file("vit.pth");            // the state dict, found
//   auto ema = io::load_weights_file("last.pth", {"state_dict_ema"});
//
// Errors are CheckpointError (PyTorch files, indexes) or SafetensorsError naming the file.
#pragma once

#include <attnzoo/io/safetensors.h>
#include <attnzoo/io/torch_checkpoint.h>

#include <map>
#include <string>
#include <vector>

namespace attnzoo::io {

struct WeightsFileOptions {
  // The state dict's key in a PyTorch training checkpoint (TorchCheckpointOptions::key); a
  // safetensors file holds one state dict and takes none.
  std::string key;
  TorchCheckpointOptions torch;
};

struct WeightsFile {
  TensorDict tensors;
  std::map<std::string, std::string> metadata;  // a safetensors file's (or its first shard's)
  // "safetensors", "torch.save zip", "torch.save legacy", "sharded safetensors (3 files)", ...
  std::string format;
  // What the reader chose or skipped, a sentence each (the key of the state dict, a prefix
  // removed).
  std::vector<std::string> notes;
};

WeightsFile load_weights_file(const std::string& path, const WeightsFileOptions& options = {});

// Whether `path` names a sharded checkpoint's index (it ends in .index.json).
bool is_weights_index(const std::string& path);

}  // namespace attnzoo::io
