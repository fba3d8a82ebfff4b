#include <attnzoo/api/frontend_options.h>

#include <c10/util/Exception.h>

namespace attnzoo {

ImageTransformOptions image_transform_options(const ImagePreprocessConfig& config) {
  TORCH_CHECK_VALUE(config.input_size[0] == 3, "preprocess.input_size: the image frontend makes ",
                    "RGB images (3 channels); the config asks for ", config.input_size[0]);
  ImageTransformOptions options;
  options.height = config.input_size[1];
  options.width = config.input_size[2];
  options.crop_pct = config.crop_pct;
  options.crop_mode = parse_crop_mode(config.crop_mode);
  options.interpolation = parse_interpolation(config.interpolation);
  options.mean = config.mean;
  options.std = config.std;
  return options;
}

AudioFeatureOptions audio_feature_options(const AudioFeaturesConfig& config) {
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
