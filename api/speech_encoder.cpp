#include "api/speech_encoder.h"

#include "api/inference.h"
#include "configs/registry.h"
#include "models/conformer_frontend.h"
#include "preprocess/audio_error.h"
#include "preprocess/audio_features.h"
#include "preprocess/audio_from_config.h"

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <chrono>
#include <iomanip>
#include <sstream>

namespace attnzoo {

struct SpeechEncoder::State {
  ModelConfig config;
  SpeechEncoderOptions options;
  ConformerEncoder model{nullptr};
  std::unique_ptr<FeatureExtractor> extractor;
  torch::Device device{torch::kCPU};
  torch::Dtype dtype = torch::kFloat;
  std::string weights;
  int64_t min_frames = 1;
};

namespace {

std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(3) << seconds << " s";
  return out.str();
}

}  // namespace

SpeechEncoder::SpeechEncoder(const std::string& model, SpeechEncoderOptions options)
    : state_(std::make_unique<State>()) {
  auto& s = *state_;
  TORCH_CHECK_VALUE(options.threads >= 0, "SpeechEncoder: threads must be >= 0, got ",
                    options.threads);
  TORCH_CHECK_VALUE(options.stream_chunk >= 0, "SpeechEncoder: stream_chunk must be >= 0, got ",
                    options.stream_chunk);
  s.device = api_detail::parse_device("SpeechEncoder", options.device);
  s.dtype = api_detail::parse_dtype("SpeechEncoder", options.dtype);
  s.config = resolve_model_config(model, options.overrides);
  TORCH_CHECK_VALUE(s.config.family == ModelFamily::kConformer, "SpeechEncoder: ", s.config.source,
                    " is a ", model_family_name(s.config.family),
                    " model; a speech encoder needs family conformer");
  TORCH_CHECK_VALUE(s.config.features.kind != "none", "SpeechEncoder: ", s.config.source,
                    " has no features section: the model takes features made elsewhere (use "
                    "ConformerEncoder directly)");
  s.extractor = std::make_unique<FeatureExtractor>(audio_feature_options(s.config.features));
  const auto& o = s.config.conformer;
  if (o.subsampling() != "none") {
    const auto steps = conformer_subsampling_steps(o.subsampling());
    while (subsampled_length(steps, s.min_frames) < 1) ++s.min_frames;
  }
  if (options.threads > 0) torch::set_num_threads(options.threads);
  s.model = api_detail::inference_model(s.config, options.weights, options.format, s.device,
                                        s.dtype, s.weights)
                .conformer;
  s.options = std::move(options);
}

SpeechEncoder::~SpeechEncoder() = default;
SpeechEncoder::SpeechEncoder(SpeechEncoder&&) noexcept = default;
SpeechEncoder& SpeechEncoder::operator=(SpeechEncoder&&) noexcept = default;

const ModelConfig& SpeechEncoder::config() const { return state_->config; }
const std::string& SpeechEncoder::weights_description() const { return state_->weights; }
int64_t SpeechEncoder::min_feature_frames() const { return state_->min_frames; }

EncodedSpeech SpeechEncoder::encode_features(torch::Tensor features, const std::string& source,
                                             double seconds) const {
  auto& s = *state_;
  const int64_t frames = features.size(0);
  if (frames < s.min_frames) {
    const double shift = s.config.features.frame_shift_ms / 1000.0;
    throw AudioError(source + ": too short: " + seconds_text(seconds) + " gives " +
                     std::to_string(frames) + " feature frames; subsampling " +
                     s.config.conformer.subsampling() + " needs at least " +
                     std::to_string(s.min_frames) + " (about " +
                     seconds_text(static_cast<double>(s.min_frames) * shift) + ")");
  }
  EncodedSpeech out;
  out.audio = source;
  out.seconds = seconds;
  out.feature_frames = frames;
  const auto& streaming = s.config.streaming;
  torch::InferenceMode inference;
  const auto input = features.unsqueeze(0).to(s.device, s.dtype);
  const auto encoded =
      s.options.stream_chunk > 0
          ? std::get<0>(s.model->forward_chunk_by_chunk(input, s.options.stream_chunk,
                                                        streaming.num_left_chunks))
          : std::get<0>(s.model->forward(input, torch::Tensor(), streaming.chunk_size,
                                         streaming.num_left_chunks));
  out.encoded = encoded[0].to(torch::kCPU, torch::kFloat);
  out.embedding = out.encoded.mean(0);
  if (s.config.conformer.vocab_size() > 0) {
    out.log_probs = s.model->ctc_log_probs(encoded)[0].to(torch::kCPU, torch::kFloat);
  }
  return out;
}

EncodedSpeech SpeechEncoder::encode(const std::string& path) const {
  const auto start = std::chrono::steady_clock::now();
  const auto audio = audio_file_features(path, *state_->extractor, state_->options.read);
  const double seconds =
      static_cast<double>(audio.samples) / static_cast<double>(state_->config.features.sample_rate);
  auto out = encode_features(audio.features, path, seconds);
  out.encode_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

EncodedSpeech SpeechEncoder::encode_waveform(const torch::Tensor& samples, int64_t sample_rate,
                                             const std::string& source) const {
  const auto start = std::chrono::steady_clock::now();
  TORCH_CHECK_VALUE(samples.dim() == 1 && sample_rate > 0,
                    "SpeechEncoder: samples must be [N] (mono) with sample_rate > 0, got ",
                    samples.sizes(), " at ", sample_rate, " Hz");
  const auto features = waveform_features(samples, sample_rate, *state_->extractor, source);
  auto out = encode_features(
      features, source, static_cast<double>(samples.size(0)) / static_cast<double>(sample_rate));
  out.encode_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::vector<EncodedSpeech> SpeechEncoder::encode(const std::vector<std::string>& paths) const {
  std::vector<EncodedSpeech> results;
  results.reserve(paths.size());
  for (const auto& path : paths) {
    try {
      results.push_back(encode(path));
    } catch (const c10::Error& e) {
      results.push_back({});
      results.back().audio = path;
      results.back().error = e.what_without_backtrace();
    } catch (const std::exception& e) {
      results.push_back({});
      results.back().audio = path;
      results.back().error = e.what();
    }
  }
  return results;
}

}  // namespace attnzoo
