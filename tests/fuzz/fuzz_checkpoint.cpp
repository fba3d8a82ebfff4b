// libFuzzer target: checkpoint import, a safetensors file mapped onto a model of each layout.
// The first byte of the input picks a model and a layout (or detection from the names); the rest
// is the file. The models are tiny instances of each family: a ViT (timm, torchvision and Hugging
// Face layouts), a Conformer without subsampling (torchaudio, attnzoo), a Conformer with Conv2d
// subsampling and relative positions (WeNet, ESPnet), an Audio Spectrogram Transformer (Hugging
// Face, timm). The seeds (tests/fuzz/corpus/checkpoint/, made by make_checkpoint_seeds.py with
// the reference libraries) are each library's own state_dict of the same sizes.
//
// Whatever is refused must be refused with an attnzoo::Error, and must leave the model exactly as
// it was (the loader checks every name, shape and dtype before it copies anything). Whatever is
// accepted must have come through one of the family's layouts and left every parameter and
// buffer with its shape.
#include <attnzoo/configs/registry.h>
#include <attnzoo/core/error.h>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using namespace attnzoo;

const char* const kVit = R"(name: fuzz_vit
family: vit
architecture: {img_size: 16, patch_size: 8, embed_dim: 16, depth: 1, num_heads: 2, mlp_ratio: 2.0,
               num_classes: 3}
preprocess: {input_size: [3, 16, 16], crop_pct: 1.0, interpolation: bilinear, mean: [0.5, 0.5, 0.5],
             std: [0.5, 0.5, 0.5]}
)";
const char* const kConformer = R"(name: fuzz_conformer
family: conformer
architecture: {input_dim: 16, encoder_dim: 16, num_layers: 1, num_heads: 2, ffn_dim: 32,
               depthwise_conv_kernel_size: 3, conv_norm: batch_norm, subsampling: none,
               position: none, final_norm: false}
)";
const char* const kConformerRelPos = R"(name: fuzz_conformer_rel_pos
family: conformer
architecture: {input_dim: 20, encoder_dim: 16, num_layers: 2, num_heads: 4, ffn_dim: 32,
               depthwise_conv_kernel_size: 5, conv_norm: batch_norm, subsampling: conv2d4,
               position: rel_pos_wenet, global_cmvn: true, final_norm: true, vocab_size: 7}
features: {kind: fbank, num_mel_bins: 20}
)";
const char* const kAst = R"(name: fuzz_ast
family: ast
architecture: {num_mel_bins: 16, max_length: 32, patch_size: 8, patch_stride: 8, embed_dim: 16,
               depth: 1, num_heads: 2, mlp_ratio: 2.0, num_classes: 3, norm_eps: 1.0e-12}
features: {kind: fbank, num_mel_bins: 16, frames: 32}
)";

struct Model {
  ZooModel model;
  std::vector<torch::Tensor> initial;  // every parameter and buffer as built, in module order
};

struct Case {
  size_t model;
  const char* format;  // "" detects the layout from the names
};

constexpr std::array<Case, 13> kCases{{{0, "timm"},
                                       {0, "torchvision"},
                                       {0, "hf"},
                                       {0, ""},
                                       {1, "torchaudio"},
                                       {1, "attnzoo"},
                                       {1, ""},
                                       {2, "wenet"},
                                       {2, "espnet"},
                                       {2, ""},
                                       {3, "hf"},
                                       {3, "timm"},
                                       {3, ""}}};

std::vector<torch::Tensor> state_of(const torch::nn::Module& module) {
  std::vector<torch::Tensor> state;
  for (const auto& p : module.parameters()) state.push_back(p);
  for (const auto& b : module.buffers()) state.push_back(b);
  return state;
}

std::vector<Model>& models() {
  static std::vector<Model> all = [] {
    std::vector<Model> built;
    for (const char* yaml : {kVit, kConformer, kConformerRelPos, kAst}) {
      torch::manual_seed(0);
      auto model = build_model(parse_model_config(yaml, "fuzz.yaml"));
      std::vector<torch::Tensor> initial;
      for (const auto& t : state_of(*model.module)) initial.push_back(t.detach().clone());
      built.push_back({std::move(model), std::move(initial)});
    }
    return built;
  }();
  return all;
}

// A tensor's bytes, flat (a 0-dim tensor, such as BatchNorm's num_batches_tracked, included).
torch::Tensor bytes_of(const torch::Tensor& t) {
  return t.detach().contiguous().reshape({-1}).view(torch::kByte);
}

// True when every tensor of the module equals (bitwise, NaNs included) its initial value.
bool unchanged(const Model& m) {
  const auto state = state_of(*m.model.module);
  if (state.size() != m.initial.size()) return false;
  for (size_t i = 0; i < state.size(); ++i) {
    if (state[i].sizes() != m.initial[i].sizes() || state[i].dtype() != m.initial[i].dtype() ||
        !torch::equal(bytes_of(state[i]), bytes_of(m.initial[i]))) {
      return false;
    }
  }
  return true;
}

void restore(Model& m) {
  torch::NoGradGuard no_grad;
  const auto state = state_of(*m.model.module);
  for (size_t i = 0; i < state.size(); ++i) state[i].copy_(m.initial[i]);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::set_num_threads(1);
  models();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Case& c = kCases[data[0] % kCases.size()];
  Model& m = models()[c.model];
  const auto& family = m.model.family();
  ModelConfig config = m.model.config;
  try {
    const auto file = io::load_safetensors_from_memory(data + 1, size - 1, "fuzz.safetensors");
    const auto loaded =
        family.load_weights(*m.model.module, config, file.tensors, c.format, "fuzz.safetensors");
    const auto formats = family.checkpoint_formats();
    if (std::find(formats.begin(), formats.end(), loaded.layout) == formats.end()) {
      __builtin_trap();
    }
    const auto state = state_of(*m.model.module);
    for (size_t i = 0; i < state.size(); ++i) {
      if (state[i].sizes() != m.initial[i].sizes()) __builtin_trap();
    }
    restore(m);
  } catch (const Error&) {
    if (!unchanged(m)) __builtin_trap();
  }
  return 0;
}
