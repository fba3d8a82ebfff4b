// Shared by the image frontend's tests: the reference files written by
// make_preprocess_reference.py (a CTest fixture), and comparison helpers.
#pragma once

#include "common/reference_files.h"
#include "common/test_util.h"

#include <attnzoo/preprocess/image/transform.h>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo::testing {

// The folder make_preprocess_reference.py writes (the fixture preprocess.make_reference).
inline const ReferenceFiles& reference() {
  static const ReferenceFiles files(ATTNZOO_PREPROCESS_REFERENCE_DIR, "preprocess");
  return files;
}

inline std::string image_file(const std::string& name) {
  return reference().path(reference().manifest()["images"][name]["file"].get<std::string>());
}

inline ImageTransformOptions options_from_json(const nlohmann::json& c) {
  ImageTransformOptions o;
  o.height = c["height"].get<int64_t>();
  o.width = c["width"].get<int64_t>();
  o.crop_pct = c["crop_pct"].get<double>();
  o.interpolation = parse_interpolation(c["interpolation"].get<std::string>());
  o.mean = c["mean"].get<std::vector<double>>();
  o.std = c["std"].get<std::vector<double>>();
  return o;
}

struct Difference {
  double max = 0.0;
  double mean = 0.0;
};

inline Difference difference(const torch::Tensor& a, const torch::Tensor& b) {
  const auto d = (a.to(torch::kDouble) - b.to(torch::kDouble)).abs();
  return {d.max().item<double>(), d.mean().item<double>()};
}

}  // namespace attnzoo::testing
