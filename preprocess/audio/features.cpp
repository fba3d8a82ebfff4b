#include <attnzoo/preprocess/audio/features.h>

#include <attnzoo/preprocess/audio/finite_samples.h>
#include <attnzoo/preprocess/audio/resample.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <sstream>

namespace attnzoo {

AudioFeatures stream_audio_features(AudioReader& reader, const FeatureExtractor& extractor,
                                    const FeatureSink& sink) {
  Resampler resampler(double(reader.info().sample_rate), double(extractor.options().sample_rate));
  FeatureStream stream(extractor, reader.source());
  const auto deliver = [&](const torch::Tensor& frames) {
    if (frames.size(0) > 0) sink(frames);
  };
  for (auto block = reader.read(); block.numel() > 0; block = reader.read()) {
    deliver(stream.push(resampler.process(block)));
  }
  deliver(stream.push(resampler.flush()));
  deliver(stream.finish());
  AudioFeatures result;
  result.info = reader.info();
  result.info.frames = reader.frames_read();
  result.samples = stream.samples_received();
  return result;
}

namespace {

AudioFeatures collect(AudioReader reader, const FeatureExtractor& extractor) {
  std::vector<torch::Tensor> frames;
  auto result = stream_audio_features(reader, extractor,
                                      [&](const torch::Tensor& f) { frames.push_back(f); });
  result.features = frames.size() == 1 ? frames[0] : torch::cat(frames);
  return result;
}

}  // namespace

AudioFeatures audio_file_features(const std::string& path, const FeatureExtractor& extractor,
                                  const AudioReadOptions& options) {
  return collect(AudioReader::open(path, options), extractor);
}

AudioFeatures audio_memory_features(const void* data, size_t size, const std::string& source,
                                    const FeatureExtractor& extractor,
                                    const AudioReadOptions& options) {
  return collect(AudioReader::from_memory(data, size, source, options), extractor);
}

torch::Tensor waveform_features(const torch::Tensor& samples, int64_t sample_rate,
                                const FeatureExtractor& extractor, const std::string& source) {
  TORCH_CHECK_VALUE(samples.dim() == 1 && samples.is_floating_point(),
                    "waveform_features: samples must be a 1-D floating-point tensor, got ",
                    samples.scalar_type(), " ", samples.sizes());
  if (sample_rate == extractor.options().sample_rate) return extractor(samples, source);
  // soxr would spread a NaN over the filter's length: it is reported at the input's rate.
  check_finite_samples(samples, 0, double(sample_rate), source);
  return extractor(resample(samples.to(torch::kFloat), double(sample_rate),
                            double(extractor.options().sample_rate)),
                   source);
}

FeatureBatch pad_features(const std::vector<torch::Tensor>& utterances) {
  TORCH_CHECK_VALUE(!utterances.empty(), "pad_features: no utterances");
  const int64_t bins = utterances[0].size(-1);
  int64_t longest = 0;
  for (size_t i = 0; i < utterances.size(); ++i) {
    const auto& u = utterances[i];
    TORCH_CHECK_VALUE(u.dim() == 2 && u.size(1) == bins, "pad_features: utterance ", i, " is ",
                      u.sizes(), ", expected [T, ", bins, "]");
    longest = std::max(longest, u.size(0));
  }
  FeatureBatch batch;
  batch.features = torch::zeros({int64_t(utterances.size()), longest, bins}, torch::kFloat);
  batch.lengths = torch::empty({int64_t(utterances.size())}, torch::kLong);
  for (size_t i = 0; i < utterances.size(); ++i) {
    batch.features[int64_t(i)].narrow(0, 0, utterances[i].size(0)).copy_(utterances[i]);
    batch.lengths[int64_t(i)] = utterances[i].size(0);
  }
  return batch;
}

}  // namespace attnzoo
