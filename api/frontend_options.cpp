#include <attnzoo/api/frontend_options.h>

#include <c10/util/Exception.h>

namespace attnzoo {

const ImageTransformOptions& image_transform_options(const ImagePreprocessConfig& config) {
  TORCH_CHECK_VALUE(config.channels == 3, "preprocess.input_size: the image frontend makes ",
                    "RGB images (3 channels); the config asks for ", config.channels);
  return config.transform;
}

const AudioFeatureOptions& audio_feature_options(
    const std::optional<AudioFeatureOptions>& features) {
  TORCH_CHECK_VALUE(features.has_value(),
                    "the config has no features section (features: kind none); the model takes ",
                    "features made elsewhere");
  return *features;
}

}  // namespace attnzoo
