// A model config's frontend sections as the options of the frontends: the YAML's `preprocess:`
// (configs' ImagePreprocessConfig) for the image library, its `features:` (AudioFeaturesConfig)
// for the audio library. Here, in api/, because api links configs and both frontends, while
// neither frontend knows configs/ (nor, through it, models/ and yaml-cpp).
//
//   auto config = attnzoo::model_config("vit_base_patch16_224");
//   attnzoo::EvalImageTransform transform(attnzoo::image_transform_options(config.image));
#pragma once

#include <attnzoo/configs/model_config.h>
#include <attnzoo/preprocess/audio/fbank.h>
#include <attnzoo/preprocess/image/transform.h>

namespace attnzoo {

// Throws c10::ValueError when the config asks for other than 3 (RGB) channels.
ImageTransformOptions image_transform_options(const ImagePreprocessConfig& config);

// Throws c10::ValueError for a config without features (`features: kind none`).
AudioFeatureOptions audio_feature_options(const AudioFeaturesConfig& config);

}  // namespace attnzoo
