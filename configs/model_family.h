// The model families of the zoo (vit, conformer, ...) behind one registry. A family is everything
// the rest of attnzoo asks of a kind of model: how its YAML document reads, how its module is
// built and its checkpoints load, what input it takes, how a batch goes through it, and its size.
// The CLI, api/ and train/ ask the family of a config, never which family it is:
//
//   const auto& family = model_family(config.family);
//   family.check_input(config, input, "--input x.safetensors: ");
//   auto logits = family.classify(*model.module, config, input);
//
// A new family is its own files (its Options, module and checkpoint layouts in models/, a
// ModelFamily here) plus one line in model_family.cpp's list; the capabilities it lacks (a CTC
// head, frames along time, streaming) have defaults. tests/configs/test_family_conformance.cpp
// holds every family to the same checks.
#pragma once

#include <attnzoo/configs/model_config.h>
#include <attnzoo/configs/model_stats.h>
#include <attnzoo/io/safetensors.h>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attnzoo {
namespace detail {
class MapReader;
}

// What a model takes, and so which frontend prepares its input.
enum class InputKind {
  kImages,         // [B, C, H, W] pixels, prepared by the image frontend from config.image
  kAudioFeatures,  // [B, T, F] features with lengths [B], prepared from config.features
};
const char* input_kind_name(InputKind kind);  // "images" | "audio"

// One batch as a family's forward takes it.
struct ModelInput {
  ModelInput() = default;
  ModelInput(torch::Tensor values, torch::Tensor lengths = {})  // implicit: model.classify({x})
      : values(std::move(values)), lengths(std::move(lengths)) {}

  torch::Tensor values;   // images [B, C, H, W] or features [B, T, F]
  torch::Tensor lengths;  // features: valid frames [B] (undefined: all T); images: undefined
  // Models that stream: the chunks their attention sees for this batch instead of the config's
  // streaming section (dynamic chunk training draws them per batch). Others ignore it.
  std::optional<StreamingConfig> attention_chunks;
};

// Outputs by name, in the order a family gives them ("logits", "encoded", "lengths", ...).
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// How the tokens of a model's attention lie over its input, to draw attention on it.
struct TokenLayout {
  int64_t prefix = 0;  // tokens before the input's own (class, distillation and register tokens)
  // The input's tokens, row-major over a grid: the patches of an image or a spectrogram (rows >
  // 1), or encoder frames along time (rows 1).
  int64_t rows = 1;
  int64_t cols = 0;
  // True when the first token's output makes the prediction (its attention row is the one to
  // show); false when every token contributes (the mean over the queries).
  bool first_token_predicts = false;
};

// What loading a checkpoint did.
struct LoadedWeights {
  std::string layout;  // the checkpoint layout used (one of the family's checkpoint_formats())
  // What the model took from the layout beyond its tensors, each a sentence for the load report:
  // a numeric convention of the layout (Hugging Face's LayerNorm eps 1e-12) that the config did
  // not state for it.
  std::vector<std::string> notes;
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;

  virtual const std::string& name() const = 0;  // `family:` in a document
  virtual InputKind input_kind() const = 0;
  virtual std::vector<std::string> checkpoint_formats() const = 0;

  // The family's sections of a model document (architecture, attention, preprocessing, streaming,
  // checkpoint) into `config`; every mistake a ConfigError at its key.
  virtual void read(detail::MapReader& root, ModelConfig& config) const = 0;

  // The module of `config`, freshly initialised (LibTorch's generator).
  virtual std::shared_ptr<torch::nn::Module> build(const ModelConfig& config) const = 0;
  // Loads `tensors` (read from `source`) into a module of build(config), strictly; the layout is
  // `format` when non-empty, else detected from the names. A numeric convention of the layout
  // that the config does not state for it is applied to the module and to `config`, and noted.
  virtual LoadedWeights load_weights(torch::nn::Module& module, ModelConfig& config,
                                     const io::TensorDict& tensors, const std::string& format,
                                     const std::string& source) const = 0;

  virtual ModelStats stats(const ModelConfig& config) const = 0;
  // The classification head's classes; 0 when the model has none.
  virtual int64_t num_classes(const ModelConfig& config) const = 0;
  // The CTC head's outputs (blank included), which forward() names "logits" beside "encoded";
  // 0 (the default) when the model has none.
  virtual int64_t ctc_vocab(const ModelConfig& config) const;
  // The token vocabulary of the speech heads (the CTC head's, a transducer's): the size of the
  // token table that decodes them; 0 without any. The default: ctc_vocab.
  virtual int64_t token_vocab(const ModelConfig& config) const;
  // The attention layers a forward records (AttentionRecorder), and their backend.
  virtual int64_t attention_layers(const ModelConfig& config) const = 0;
  virtual std::string attention_backend(const ModelConfig& config) const = 0;

  // The shortest input along time a model takes (audio features; the default, 1, for images).
  virtual int64_t min_frames(const ModelConfig& config) const;
  // The period in ms of the frames forward() names "encoded", when they are frames along time
  // (a speech encoder's); 0 (the default) otherwise.
  virtual double frame_ms(const ModelConfig& config) const;
  // Checks a batch against what the model takes (its rank, channels or feature bins, sizes,
  // lengths). Throws InputError beginning with `what` (where the batch came from,
  // e.g. "x.safetensors: "), then the tensor: "tensor 'pixels' must be [B, 3, H, W] ...".
  virtual void check_input(const ModelConfig& config, const ModelInput& input,
                           const std::string& what) const = 0;
  // Checks that a checked batch can go through forward(..., stream = true); throws
  // InputError saying why not (the default: the family does not stream).
  virtual void check_stream(const ModelConfig& config, const ModelInput& input) const;
  // A batch of `batch` random inputs of the config's size (`frames` long for audio), for
  // benchmarks.
  virtual ModelInput random_input(const ModelConfig& config, int64_t batch,
                                  int64_t frames) const = 0;

  // Forward passes through a module of build(config), on the input's device and dtype.
  // Classification logits [B, classes] (training, evaluation, the classifiers).
  virtual torch::Tensor classify(torch::nn::Module& module, const ModelConfig& config,
                                 const ModelInput& input) const = 0;
  // Everything the model computes, named (attnzoo forward); `stream` runs chunk by chunk. The
  // names: "logits" (a classifier of images), "encoded" [B, T', D] and "lengths" [B] (an encoder
  // of audio), "logits" (its CTC log-probabilities), "class_logits" (its classifier).
  virtual NamedTensors forward(torch::nn::Module& module, const ModelConfig& config,
                               const ModelInput& input, bool stream) const = 0;
  // Where the tokens of an input of this shape lie (attnzoo attention-map).
  virtual TokenLayout token_layout(const ModelConfig& config, const ModelInput& input) const = 0;
};

// The family called `name`; throws ConfigError listing the families for an unknown one.
const ModelFamily& model_family(const std::string& name);
// The registered families' names, sorted.
std::vector<std::string> model_family_names();
// Every checkpoint layout of every family, sorted and unique (the CLI's --format).
std::vector<std::string> all_checkpoint_formats();

}  // namespace attnzoo
