// libFuzzer target: PyTorch checkpoints read in C++ (io/torch_checkpoint.h) on arbitrary bytes:
// the zip reader, the restricted unpickler, the state dict's search and its tensors built from
// storages. An input that starts as a zip or as the legacy format is read as a checkpoint file;
// any other is read as a bare pickle (the unpickler's own coverage). The seeds
// (tests/fuzz/corpus/pickle/, made by make_pickle_seeds.py) are real torch.save files of timm,
// torchvision, transformers, WeNet-layout and ESPnet state dicts, in both formats, and their
// data.pkl pickles alone.
//
// Whatever is refused must be refused with an attnzoo::Error (CheckpointError); whatever is
// accepted must have every tensor's elements inside its storage: each is read here, so ASan
// reports a view past its memory.
#include <attnzoo/core/error.h>
#include <attnzoo/io/pickle.h>
#include <attnzoo/io/torch_checkpoint.h>

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnzoo::io;
  try {
    const MemorySource source(data, size, "fuzz.pth");
    if (is_torch_checkpoint(source)) {
      const auto checkpoint = load_torch_checkpoint(source);
      for (const auto& item : checkpoint.tensors) {
        const auto& t = item.value();
        // Every element of the view, read (a copy of a strided view touches each one).
        const auto copy = t.contiguous();
        if (copy.numel() != t.numel()) __builtin_trap();
        if (copy.numel() > 0 && copy.is_floating_point()) (void)copy.sum().item<double>();
      }
    } else {
      const auto doc =
          read_pickle(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.pkl");
      (void)doc.describe(doc.root());
    }
  } catch (const attnzoo::Error&) {
  }
  return 0;
}
