// Audio files to model features, in bounded memory: AudioReader's blocks (mono), a Resampler to
// the features' rate (libsoxr, high quality), and a FeatureStream, block after block. A 1-hour
// file takes the memory of one block at each stage; only the features themselves grow.
//
//   attnzoo::FeatureExtractor fbank(attnzoo::audio_feature_options(config.features));
//   auto utterance = attnzoo::audio_file_features("speech.flac", fbank);  // [T, 80] float32
//   auto batch = attnzoo::pad_features({a.features, b.features});       // [2, T, 80], lengths
#pragma once

#include <attnzoo/preprocess/audio/fbank.h>
#include <attnzoo/preprocess/audio/read.h>

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace attnzoo {

// Receives the frames of a stream in order, [k, F] float32 with k >= 1.
using FeatureSink = std::function<void(const torch::Tensor& frames)>;

struct AudioFeatures {
  torch::Tensor features;  // [T, F] float32
  AudioInfo info;          // the file as its header describes it
  int64_t samples = 0;     // mono samples at the features' rate, after resampling
};

// Reads `reader` to its end, resampling to the extractor's rate and featurising block by block;
// `sink` gets the frames as they are complete. Returns the info and counts (features empty).
// Errors are AudioErrors naming the reader's source (a too-short file counts its samples at the
// features' rate).
AudioFeatures stream_audio_features(AudioReader& reader, const FeatureExtractor& extractor,
                                    const FeatureSink& sink);

// The same, collecting the frames.
AudioFeatures audio_file_features(const std::string& path, const FeatureExtractor& extractor,
                                  const AudioReadOptions& options = {});
AudioFeatures audio_memory_features(const void* data, size_t size, const std::string& source,
                                    const FeatureExtractor& extractor,
                                    const AudioReadOptions& options = {});

// A mono waveform in memory at `sample_rate`: resampled to the extractor's rate when it differs,
// then featurised: [T, F] float32.
torch::Tensor waveform_features(const torch::Tensor& samples, int64_t sample_rate,
                                const FeatureExtractor& extractor,
                                const std::string& source = "<waveform>");

// Utterances [T_i, F] as one batch: features [B, max T_i, F] float32 padded with zeros, lengths
// [B] int64 (the input of ConformerEncoder's forward).
struct FeatureBatch {
  torch::Tensor features;
  torch::Tensor lengths;
};
FeatureBatch pad_features(const std::vector<torch::Tensor>& utterances);

}  // namespace attnzoo
