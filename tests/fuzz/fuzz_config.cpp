// libFuzzer target: the YAML config reader and the config builders on arbitrary bytes. The input
// is a document, then `key.path=value` overrides, separated by NUL bytes; it is read both as a
// model config and as a training config, as if it were a file of the zoo's configs/train/ folder
// (so that a training config's `model:` reaches the zoo's model files, and zoo names resolve
// against the zoo: ATTNZOO_ZOO_PATH is set to the repository's configs/).
//
// Whatever is refused must be refused with ConfigError. Whatever is accepted must hold up:
//   - its size and cost (model_stats) are computed without overflow (UBSan checks);
//   - a model of at most kMaxBuiltParameters is built without an error, holds exactly the
//     parameters model_stats counts, and, when one forward pass costs at most kMaxForwardMacs
//     on an input of at most kMaxInputElements, runs a batch of the family's random input to
//     finite outputs.
// A config the readers accept and the model then rejects is a gap in validation.
// The document also goes through OmegaConf's interpolations (configs/omegaconf_interpolation.h,
// as a NeMo config would): a ConfigError or a result, never a crash or an unbounded walk; and it
// is read as a NeMo model's model_config.yaml (configs/nemo_source.cpp, in an unpacked .nemo
// folder beside an empty model_weights.ckpt and a tokenizer.model): a ConfigError, or a document
// that parses and builds as any other.
// Seeds: tests/fuzz/corpus/config/ and the zoo's own YAML files (tools/fuzz.sh passes configs/).
#include <attnzoo/configs/model_source.h>
#include <attnzoo/configs/model_stats.h>
#include <attnzoo/configs/omegaconf_interpolation.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/configs/train_config.h>

#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

using namespace attnzoo;

// Small bounds keep each run fast; the checks are the same at any size.
constexpr int64_t kMaxBuiltParameters = 2'000'000;
constexpr int64_t kMaxForwardMacs = 20'000'000;
constexpr size_t kMaxOverrides = 8;
constexpr int64_t kMaxInputElements = 4'000'000;

const std::string kZoo = ATTNZOO_FUZZ_ZOO;

// The document and its overrides: the parts of the input between NUL bytes.
std::vector<std::string> split_at_nul(const uint8_t* data, size_t size) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      if (parts.size() > kMaxOverrides) break;
      parts.emplace_back();
    } else {
      parts.back().push_back(static_cast<char>(data[i]));
    }
  }
  return parts;
}

bool all_finite(const NamedTensors& outputs) {
  for (const auto& [name, tensor] : outputs) {
    if (tensor.is_floating_point() && !torch::isfinite(tensor).all().item<bool>()) return false;
  }
  return true;
}

// The elements of the random batch a forward would take (what the family's random_input makes).
// A model of few parameters and little compute may still take a huge input (a patch stride far
// larger than the patch, an image section larger than the model's img_size): the batch would be
// the harness's allocation, not the model's.
int64_t input_elements(const ModelConfig& config) {
  if (config.family == "vit") {
    int64_t elements = 1;
    for (const int64_t n :
         {config.image.channels, config.image.transform.height, config.image.transform.width}) {
      if (__builtin_mul_overflow(elements, n, &elements)) return INT64_MAX;
    }
    return elements;
  }
  if (const auto* vit = std::any_cast<ViTOptions>(&config.architecture)) {
    const int64_t width = vit->img_width() > 0 ? vit->img_width() : vit->img_size();
    return vit->img_size() * width;  // ast: [frames, mel bins]
  }
  return 0;  // conformer: 8 frames of input_dim features, which the parameters bound
}

void check_accepted_model(const ModelConfig& config) {
  const auto stats = model_stats(config);
  if (stats.parameters < 1 || stats.macs < 0) __builtin_trap();
  if (stats.parameters > kMaxBuiltParameters) return;
  torch::NoGradGuard no_grad;
  auto model = build_model(config);  // an exception here escapes: a validation gap
  int64_t parameters = 0;
  for (const auto& p : model.module->parameters()) parameters += p.numel();
  if (parameters != stats.parameters) __builtin_trap();
  if (stats.macs > kMaxForwardMacs || input_elements(config) > kMaxInputElements) return;
  model.module->eval();
  const auto& family = model.family();
  const auto input =
      family.random_input(config, 1, std::max<int64_t>(family.min_frames(config), 8));
  if (!all_finite(family.forward(*model.module, config, input, false))) __builtin_trap();
}

// An unpacked .nemo folder of this process: model_config.yaml is each input.
std::string nemo_folder() {
  static const std::string dir = [] {
    const auto path = std::filesystem::temp_directory_path() /
                      ("attnzoo_fuzz_nemo_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    std::ofstream(path / "model_weights.ckpt") << "";
    std::ofstream(path / "tokenizer.model") << "";
    return path.string();
  }();
  return dir;
}

void check_nemo_document(const std::string& text) {
  std::ofstream(nemo_folder() + "/model_config.yaml", std::ios::binary | std::ios::trunc) << text;
  std::string document;
  try {
    document = describe_model_source(nemo_folder());
  } catch (const ConfigError&) {
    return;
  } catch (const YAML::Exception&) {
    return;  // not YAML: the document itself does not parse
  }
  // What the importer writes, the reader must take (its values are the importer's checked ones).
  check_accepted_model(parse_model_config(document, nemo_folder() + "/model_config.yaml"));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::set_num_threads(1);
  setenv("ATTNZOO_ZOO_PATH", kZoo.c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = split_at_nul(data, size);
  const std::string text = std::move(parts.front());
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  const std::string source = kZoo + "/train/fuzz.yaml";
  try {
    check_accepted_model(parse_model_config(text, source, overrides));
  } catch (const ConfigError&) {
  }
  try {
    const auto train = parse_train_config(text, source, overrides);
    if (train.model.family.empty()) __builtin_trap();
  } catch (const ConfigError&) {
  }
  try {
    const auto resolved = attnzoo::detail::resolve_interpolations(YAML::Load(text), source);
    if (!resolved.IsDefined()) __builtin_trap();
  } catch (const ConfigError&) {
  } catch (const YAML::Exception&) {
  }
  check_nemo_document(text);
  return 0;
}
