// A model config's `features:` section (configs/model_config.h, AudioFeaturesConfig) as the
// options of the audio frontend. Header-only, like preprocess/from_config.h for images: the
// audio library does not depend on configs/; the targets that read configs include this.
#pragma once

#include <attnzoo/configs/model_config.h>
#include <attnzoo/preprocess/fbank.h>

#include <c10/util/Exception.h>

namespace attnzoo {

inline AudioFeatureOptions audio_feature_options(const AudioFeaturesConfig& config) {
  TORCH_CHECK_VALUE(config.kind != "none",
                    "the config has no features section (features: kind none); the model takes ",
                    "features made elsewhere");
  AudioFeatureOptions options;
  options.kind = parse_audio_feature_kind(config.kind);
  options.sample_rate = config.sample_rate;
  options.num_mel_bins = config.num_mel_bins;
  options.frame_length_ms = config.frame_length_ms;
  options.frame_shift_ms = config.frame_shift_ms;
  options.dither = config.dither;
  options.preemphasis = config.preemphasis;
  options.remove_dc_offset = config.remove_dc_offset;
  options.window = parse_frame_window(config.window);
  options.snip_edges = config.snip_edges;
  options.energy_floor = config.energy_floor;
  options.low_freq = config.low_freq;
  options.high_freq = config.high_freq;
  options.int16_scale = config.int16_scale;
  options.allow_empty_mel_bins = config.allow_empty_mel_bins;
  options.fixed_frames = config.frames;
  options.normalize_mean = config.mean;
  options.normalize_std = config.std;
  return options;
}

}  // namespace attnzoo
