// The sections of a model document that several families share (attention:, preprocess: for
// images, features: for audio, checkpoint:) and the bounds on sizes every reader applies.
// Internal to configs/.
#pragma once

#include <attnzoo/configs/model_config.h>
#include <attnzoo/configs/yaml_reader.h>
#include <attnzoo/layers/attention_backend.h>

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo::detail {

// Upper bounds on sizes: a config is untrusted input, and a typo such as depth: 12000 should be an
// error, not an attempt to allocate the model. Each is far above any published ViT.
inline constexpr int64_t kMaxImageSize = 8192;
inline constexpr int64_t kMaxChannels = 64;
inline constexpr int64_t kMaxEmbedDim = 16384;
inline constexpr int64_t kMaxDepth = 1000;
inline constexpr int64_t kMaxHeads = 1024;
inline constexpr int64_t kMaxClasses = 1000000;
inline constexpr int64_t kMaxTokens = 1024;
inline constexpr int64_t kMaxBackendSize = int64_t{1} << 20;
inline constexpr double kMaxMlpRatio = 64.0;
inline constexpr int64_t kMaxFeatures = 4096;
inline constexpr int64_t kMaxKernel = 1024;
inline constexpr int64_t kMaxChunk = 1 << 20;
inline constexpr int64_t kMaxSampleRate = 384000;
inline constexpr int64_t kMaxFrames = 1 << 20;
inline constexpr int64_t kMaxBeam = 10000;
// Rates are probabilities of dropping; 1 would drop everything.
inline constexpr double kBelowOne = 0.999999;

// The `attention:` section, shared by every family that has attention layers.
struct AttentionSection {
  std::string backend = "auto";
  AttentionBackendOptions options;
  bool head_gating = false;
};
AttentionSection read_attention(MapReader attention);

// `preprocess:` for image models: timm's pretrained-cfg fields, checked against the model's
// channels and patch size (height x width give the default input_size; `tiled`: patches that do
// not overlap, which must tile the input).
ImagePreprocessConfig read_image_preprocess(MapReader pre, int64_t in_chans, int64_t height,
                                            int64_t width, int64_t patch_size, bool tiled);

// `features:` of speech models, into the audio frontend's options. Absent: std::nullopt, the
// model takes features made elsewhere (e.g. torchaudio's Conformer behind the user's own front
// end). Its num_mel_bins must equal the model's `input_dim`, the value of `input_key`.
std::optional<AudioFeatureOptions> read_audio_features(MapReader& root, int64_t input_dim,
                                                       const std::string& input_key);

// The speech heads a model has, which its `decoding:` section decodes with.
struct SpeechHeads {
  int64_t vocab = 0;  // the token vocabulary's size (0: no speech head)
  bool ctc = false;
  bool transducer = false;
  int64_t decoder_directions = 0;  // the attention decoder's: 0 none, 1 left to right, 2 both
};

// `decoding:` of a model with `heads` (DecodingConfig; absent: an empty one). Files are resolved
// against the folder of `source`, the YAML file, and must exist; a model without a speech head
// may not have the section. mode attention_rescoring and reverse_weight need the decoder's
// directions; head the head.
DecodingConfig read_decoding(MapReader& root, const std::string& source, const SpeechHeads& heads);

// `checkpoint:` into `config`: its `format` (one of the family's `formats`), `file` (resolved
// against config.source's folder; it must exist) and `key`; and `cmvn_file` (resolved and checked
// the same way) for a family whose models take global CMVN statistics (`takes_cmvn`), refused by
// name for the others.
void read_checkpoint(MapReader checkpoint, const std::vector<std::string>& formats,
                     ModelConfig& config, bool takes_cmvn = false);

// Whether loading a checkpoint of `layout` should give `key_path` the layout's own value (a
// numeric convention, such as a LayerNorm eps): not when an override sets it; not when the
// document states it and declares no layout or this one (the value is the user's, or belongs to
// this layout); otherwise yes (the default, or the value of the layout the document declares).
bool adopts_layout_value(const ModelConfig& config, const std::string& key_path,
                         const std::string& layout);
// "LayerNorm eps 1e-12, the hf layout's, instead of the config's 1e-06 (--set
// architecture.norm_eps=1e-06 keeps it)".
std::string layout_value_note(const std::string& key_path, double before, double after,
                              const std::string& layout, const std::string& what);

// Throws std::invalid_argument "<what>must be floating point, got Long" for another dtype (the
// families' input checks).
void require_floating(const torch::Tensor& tensor, const std::string& what);

}  // namespace attnzoo::detail
