// A model config's preprocessing (configs/model_config.h, the YAML's `preprocess:` section) as
// the options of the image transforms. Header-only: preprocess/ itself does not depend on
// configs/ (nor, through it, on models/ and yaml-cpp); the targets that read configs (the CLI,
// the classifier) include this and already link both.
#pragma once

#include <attnzoo/configs/model_config.h>
#include <attnzoo/preprocess/image_transform.h>

#include <c10/util/Exception.h>

namespace attnzoo {

inline ImageTransformOptions image_transform_options(const ImagePreprocessConfig& config) {
  TORCH_CHECK_VALUE(config.input_size[0] == 3, "preprocess.input_size: the image frontend makes ",
                    "RGB images (3 channels); the config asks for ", config.input_size[0]);
  ImageTransformOptions options;
  options.height = config.input_size[1];
  options.width = config.input_size[2];
  options.crop_pct = config.crop_pct;
  options.interpolation = parse_interpolation(config.interpolation);
  options.mean = config.mean;
  options.std = config.std;
  return options;
}

}  // namespace attnzoo
