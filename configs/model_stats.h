// Size and cost of a model, computed from its config without building it (ViT-H has 632 M
// parameters: building it only to count them takes seconds and gigabytes).
//
// Cost convention (as timm's and fvcore's tables): multiply-accumulates (MACs) of one forward pass
// of one image at the config's preprocess.input_size, counting the patch embedding, the qkv
// projection, q·kᵀ, attention·v, the output projection, the MLP and the classifier. Norms,
// softmax, activations, additions and the position embedding are not counted. FLOPs = 2 × MACs.
#pragma once

#include "configs/model_config.h"

#include <cstdint>

namespace attnzoo {

struct ModelStats {
  int64_t parameters = 0;  // exactly what the built module holds (parameters, not buffers)
  int64_t macs = 0;        // per image, at config.image.input_size
  double gflops() const { return 2.0 * static_cast<double>(macs) / 1e9; }
};

ModelStats model_stats(const ModelConfig& config);

// The parts, for ViT.
int64_t vit_parameter_count(const ViTOptions& options);
// images of height × width (multiples of the patch size).
int64_t vit_macs(const ViTOptions& options, int64_t height, int64_t width);

}  // namespace attnzoo
