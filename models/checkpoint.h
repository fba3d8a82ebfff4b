// Loading weights into a module by parameter and buffer name, strictly: every missing,
// unexpected and mis-shaped tensor is reported by name, all at once, in one error.
#pragma once

#include "io/safetensors.h"

#include <torch/nn/module.h>

#include <set>
#include <stdexcept>
#include <string>

namespace attnzoo {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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
// device). Throws CheckpointError listing all problems; on error the module is left unchanged.
void load_state_dict(torch::nn::Module& module, const io::TensorDict& tensors,
                     const LoadOptions& options = {});

// The module's parameters and buffers as a TensorDict (detached), for saving.
io::TensorDict state_dict(const torch::nn::Module& module);

}  // namespace attnzoo
