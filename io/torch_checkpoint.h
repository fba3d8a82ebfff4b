// PyTorch checkpoint files (.pt .pth .bin .ckpt) read in C++, without Python and without
// executing anything they hold:
//   torch.save's zip format (torch >= 1.6): <record>/data.pkl with <record>/data/<key> storages
//   the legacy format (torch.save(..., _use_new_zipfile_serialization=False), and torch < 1.6):
//     pickles of a magic number, protocol version and system info, the object, the storage keys,
//     then each storage's element count and bytes
// The pickle is read by io/pickle.h's allow-list. Of what it describes, only the state dict's
// tensors are read: each storage once, straight from the file into its own memory (no second
// copy of the file), shared by the tensors that view it with their offsets and strides.
//
// Training checkpoints keep the state dict under a key. Found without being told: the top level
// when it is a state dict, else the one of state_dict, model, module, model_state_dict,
// state_dict_ema, model_ema, ema that holds one. Several (a timm training checkpoint has
// state_dict and state_dict_ema) are an error listing them; `key` chooses (a path of keys joined
// by '/' for nested ones). DistributedDataParallel's "module." prefix, on every name, is removed.
//
// Errors are CheckpointError naming the file: a malformed, truncated or hostile file, a global
// outside the allow-list, a dtype or tensor kind attnzoo does not read, a state dict not found.
#pragma once

#include <attnzoo/io/byte_source.h>
#include <attnzoo/io/pickle.h>
#include <attnzoo/io/zip_archive.h>

#include <torch/types.h>
// After types.h: ordered_dict.h uses TORCH_CHECK without including it.
#include <torch/ordered_dict.h>

#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo::io {

struct TorchCheckpointOptions {
  std::string key;  // where the state dict is; empty: found as above
  // data.pkl (or the legacy format's pickles) may hold at most this many bytes: a state dict's
  // pickle takes about 150 bytes a tensor.
  uint64_t max_pickle_bytes = 100'000'000;
  PickleLimits pickle;
  ZipLimits zip;
};

struct TorchCheckpoint {
  torch::OrderedDict<std::string, torch::Tensor> tensors;  // CPU tensors, in the file's order
  std::string format;                                      // "torch.save zip" | "torch.save legacy"
  std::string key;  // where the state dict was: "" for the top level, else the key path
  // What else the reader did or skipped, each a sentence for the load report.
  std::vector<std::string> notes;
};

// Whether `source` begins as torch.save's zip or legacy format does.
bool is_torch_checkpoint(const ByteSource& source);

TorchCheckpoint load_torch_checkpoint(const std::string& path,
                                      const TorchCheckpointOptions& options = {});
TorchCheckpoint load_torch_checkpoint(const ByteSource& source,
                                      const TorchCheckpointOptions& options = {});

}  // namespace attnzoo::io
