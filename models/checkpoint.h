// Loading weights into a module by parameter and buffer name, strictly: every missing,
// unexpected and mis-shaped tensor is reported by name, all at once, in one error.
#pragma once

#include <attnzoo/core/error.h>
#include <attnzoo/io/safetensors.h>

#include <torch/nn/module.h>

#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnzoo {

struct LoadOptions {
  // Names the module has that the checkpoint may lack (they keep their current values), e.g.
  // a classifier head when loading a backbone. Declared where the model is built, not guessed.
  std::set<std::string> optional;
  // Checkpoint tensors to ignore (e.g. an optimiser's leftovers, a pooler the model lacks).
  std::set<std::string> ignore;
  // Where the tensors came from, for messages.
  std::string source = "checkpoint";
};

// Copies tensors[name] into every parameter and buffer of `module` (converted to its dtype and
// device). Throws CheckpointError listing the problems (the first 30 names of each kind, and how
// many); on error the module is left unchanged.
void load_state_dict(torch::nn::Module& module, const io::TensorDict& tensors,
                     const LoadOptions& options = {});

// The module's parameters and buffers as a TensorDict (detached), for saving.
io::TensorDict state_dict(const torch::nn::Module& module);

// Mapping another library's layout onto ours (models/*_checkpoint.cpp): regex renames and the
// fusion of separate q, k, v projections.
struct RenameRule {
  std::regex pattern;
  std::string replacement;  // may use the pattern's groups: "blocks.$1.norm1.$2"
};

// The first rule whose pattern matches the whole name rewrites it; other names are kept as they
// are, so that the strict loader reports them.
std::string rename_with(const std::vector<RenameRule>& rules, const std::string& name);

// Puts `tensor`, the source tensor `from` renamed, under `name` of our layout. Two source tensors
// that map to one name are a CheckpointError naming the name and the second tensor.
void insert_mapped(io::TensorDict& out, const std::string& name, const std::string& from,
                   const torch::Tensor& tensor);

// Separate q, k, v projections gathered per fused target (e.g. "blocks.3.attn.qkv.weight") and
// emitted as the rows [q; k; v] of our fused projection (layers/attention.h), or [k; v] for a
// cross-attention's kv (order "kv"). An incomplete set is emitted under "<target>.q"-style names,
// so that the strict loader reports the target as missing and the parts as unexpected.
class QkvParts {
 public:
  // order: the parts of each target, in the order of their rows: "qkv" or "kv".
  explicit QkvParts(std::string order = "qkv");
  // part: one of order's letters.
  void add(const std::string& target, char part, const torch::Tensor& tensor);
  void insert_into(io::TensorDict& out) const;

 private:
  std::string order_;
  std::map<std::string, std::map<char, torch::Tensor>> parts_;
};

}  // namespace attnzoo
