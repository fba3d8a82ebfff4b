// The linear layers the CPU linear benchmarks time: the shapes of ViT-Ti, ViT-S and ViT-B at batch
// 1 and 8 (197 and 1576 rows) and of conformer_s and conformer_m on 60 s of audio (1500 rows).
#pragma once

#include <attnzoo/layers/activation.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attnzoo::bench {

struct LinearLayer {
  std::string name;
  int64_t rows, in_features, out_features;
  attnzoo::Activation activation;
};

inline std::vector<LinearLayer> linear_layers() {
  using attnzoo::Activation;
  std::vector<LinearLayer> out;
  for (const auto& [model, width] : std::vector<std::pair<std::string, int64_t>>{
           {"vit_tiny", 192}, {"vit_small", 384}, {"vit_base", 768}}) {
    for (const int64_t batch : {1, 8}) {
      const std::string at = model + " b" + std::to_string(batch) + " ";
      const int64_t rows = 197 * batch;
      out.push_back({at + "qkv", rows, width, 3 * width, Activation::kNone});
      out.push_back({at + "proj", rows, width, width, Activation::kNone});
      out.push_back({at + "fc1", rows, width, 4 * width, Activation::kGelu});
      out.push_back({at + "fc2", rows, 4 * width, width, Activation::kNone});
    }
  }
  for (const auto& [model, width] :
       std::vector<std::pair<std::string, int64_t>>{{"conformer_s", 144}, {"conformer_m", 256}}) {
    const std::string at = model + " 60 s ";
    out.push_back({at + "qkv", 1500, width, 3 * width, Activation::kNone});
    out.push_back({at + "ff1", 1500, width, 4 * width, Activation::kSilu});
    out.push_back({at + "ff2", 1500, 4 * width, width, Activation::kNone});
  }
  return out;
}

}  // namespace attnzoo::bench
