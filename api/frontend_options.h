// A model config's frontend sections, checked for the frontends: its `preprocess:` (configs'
// ImagePreprocessConfig, which holds the image frontend's own ImageTransformOptions) for the image
// library, its `features:` (the audio frontend's own AudioFeatureOptions, when the section is
// there) for the audio library. Here, in api/, because the checks are the tasks' (an image
// classifier takes RGB; a speech encoder needs a features section), not the config's.
//
//   auto config = attnzoo::model_config("vit_base_patch16_224");
//   attnzoo::EvalImageTransform transform(attnzoo::image_transform_options(config.image));
#pragma once

#include <attnzoo/configs/model_config.h>
#include <attnzoo/preprocess/audio/fbank.h>
#include <attnzoo/preprocess/image/transform.h>

#include <optional>

namespace attnzoo {

// config.transform; c10::ValueError when the config asks for other than 3 (RGB) channels.
const ImageTransformOptions& image_transform_options(const ImagePreprocessConfig& config);

// *features; c10::ValueError for a config without a features section (the model takes
// features made elsewhere).
const AudioFeatureOptions& audio_feature_options(
    const std::optional<AudioFeatureOptions>& features);

}  // namespace attnzoo
