// `attnzoo convert IN OUT.safetensors [--key K]`: weights of any format attnzoo reads (a
// PyTorch checkpoint .pt .pth .bin .ckpt, a sharded index, safetensors) written as one
// safetensors file, the tensors as they are named in IN (no layout is mapped): for those who
// keep their weights as safetensors, or hand them to another tool. Tensors that shared storage in
// IN (tied weights) are written as copies, since safetensors forbids aliasing.
#include "tools/cli/commands.h"

#include <attnzoo/core/error.h>
#include <attnzoo/io/weights_file.h>

#include <filesystem>
#include <iostream>
#include <map>

namespace attnzoo::cli {
namespace {

struct ConvertOptions {
  std::string input;
  std::string output;
  std::string key;
};

int run_convert(const ConvertOptions& o) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::exists(o.output, error) && fs::equivalent(o.input, o.output, error)) {
    throw Error("convert: " + o.output + " is the input itself");
  }
  io::WeightsFileOptions options;
  options.key = o.key;
  const auto file = io::load_weights_file(o.input, options);
  auto metadata = file.metadata;
  metadata["format"] = "pt";  // what transformers' loaders expect of a PyTorch safetensors file
  metadata["converted_from"] = fs::path(o.input).filename().string() +
                               (o.key.empty() ? "" : " (key " + o.key + ")") + ", " + file.format;
  io::save_safetensors(o.output, file.tensors, metadata);
  std::map<std::string, int64_t> by_dtype;
  int64_t bytes = 0;
  for (const auto& item : file.tensors) {
    by_dtype[c10::toString(item.value().scalar_type())] += 1;
    bytes += item.value().numel() * static_cast<int64_t>(item.value().element_size());
  }
  std::cout << o.input << " (" << file.format << "): " << file.tensors.size() << " tensors (";
  bool first = true;
  for (const auto& [dtype, count] : by_dtype) {
    std::cout << (first ? "" : ", ") << count << " " << dtype;
    first = false;
  }
  std::cout << "), " << bytes << " bytes -> " << o.output << "\n";
  for (const auto& note : file.notes) std::cout << "  " << note << "\n";
  return 0;
}

}  // namespace

Command add_convert_command(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  auto* sub = app.add_subcommand(
      "convert",
      "Write weights (a PyTorch checkpoint, a sharded index, safetensors) as one safetensors file, "
      "their names as they are");
  sub->add_option("input", o->input,
                  "a .pt/.pth/.bin/.ckpt checkpoint, an *.index.json or "
                  "a safetensors file")
      ->required();
  sub->add_option("output", o->output, "the safetensors file to write (replaced whole)")
      ->required();
  sub->add_option("--key", o->key,
                  "The state dict of a training checkpoint (state_dict, state_dict_ema, ...; "
                  "a/b for a nested one; default: found)");
  return {sub, [o] { return run_convert(*o); }};
}

}  // namespace attnzoo::cli
