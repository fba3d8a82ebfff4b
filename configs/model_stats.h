// Size and cost of a model, computed from its config without building it (ViT-H has 632 M
// parameters: building it only to count them takes seconds and gigabytes).
//
// Cost convention (as timm's and fvcore's tables): multiply-accumulates (MACs) of one forward pass,
// counting matrix products and convolutions only; norms, softmax, activations, additions and
// position encodings themselves are not counted. FLOPs = 2 × MACs.
//   ViT        one image at the config's preprocess.input_size: patch embedding, qkv, q·kᵀ,
//              attention·v, output projection, MLP, classifier.
//   Conformer  one second of audio, as the mean over a 10 s utterance (attention grows as T², so
//              the length must be stated): subsampling convolutions and projection, feed-forward
//              modules, qkv, q·kᵀ, attention·v, output projection, the relative-position terms
//              (linear_pos, (q + v)·p, u·k), the convolution module, CTC.
#pragma once

#include <attnzoo/configs/model_config.h>
#include <attnzoo/models/conformer.h>
#include <attnzoo/models/vit.h>

#include <cstdint>
#include <string>

namespace attnzoo {

struct ModelStats {
  int64_t parameters = 0;  // exactly what the built module holds (parameters, not buffers)
  int64_t macs = 0;        // per image (ViT) or per second of audio (Conformer), see above
  std::string basis;       // what `macs` is per: "3x224x224 image", "1 s audio (10 s utterance)"
  double gflops() const { return 2.0 * static_cast<double>(macs) / 1e9; }
};

ModelStats model_stats(const ModelConfig& config);

// The parts, for ViT.
int64_t vit_parameter_count(const ViTOptions& options);
// images of height × width (multiples of the patch size).
int64_t vit_macs(const ViTOptions& options, int64_t height, int64_t width);

// The parts, for the Conformer encoder.
int64_t conformer_parameter_count(const ConformerEncoderOptions& options);
// One utterance of `input_frames` feature frames.
int64_t conformer_macs(const ConformerEncoderOptions& options, int64_t input_frames);

}  // namespace attnzoo
