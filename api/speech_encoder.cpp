#include <attnzoo/api/speech_encoder.h>

#include <attnzoo/api/frontend_options.h>
#include <attnzoo/api/model_setup.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/io/inflated_files.h>
#include <attnzoo/models/conformer_frontend.h>
#include <attnzoo/preprocess/audio/error.h>
#include <attnzoo/preprocess/audio/features.h>
#include <attnzoo/preprocess/audio/resample.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <chrono>
#include <iomanip>
#include <sstream>

namespace attnzoo {

struct SpeechEncoder::State {
  ModelConfig config;
  SpeechEncoderOptions options;
  ZooModel model;
  ConformerEncoder conformer{nullptr};  // the module when it streams (a Conformer), else empty
  std::unique_ptr<FeatureExtractor> extractor;
  torch::Device device{torch::kCPU};
  torch::Dtype dtype = torch::kFloat;
  std::string weights;
  int64_t min_frames = 1;
  double frame_ms = 0.0;
};

namespace {

std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(3) << seconds << " s";
  return out.str();
}

void fill_error(EncodedSpeech& out, const std::string& source, const std::exception& e) {
  out = {};
  out.audio = source;
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  out.error = c10_error ? c10_error->what_without_backtrace() : e.what();
}

// "encoded" [1, T', D] of a chunk-by-chunk pass, with the CTC and classification heads' outputs.
NamedTensors streamed_outputs(ConformerEncoder conformer, const torch::Tensor& encoded) {
  const auto lengths = torch::full({1}, encoded.size(1), torch::kLong).to(encoded.device());
  NamedTensors outputs{{"encoded", encoded}};
  if (conformer->ctc) outputs.emplace_back("logits", conformer->ctc_log_probs(encoded));
  if (conformer->classifier) {
    outputs.emplace_back("class_logits", conformer->classify(encoded, lengths));
  }
  return outputs;
}

// The first utterance of `outputs` (ModelFamily::forward's names) into `out`, with its mean.
void fill_outputs(EncodedSpeech& out, const NamedTensors& outputs) {
  for (const auto& [name, value] : outputs) {
    const auto first = value[0].to(torch::kCPU, torch::kFloat);
    if (name == "encoded") out.encoded = first;
    if (name == "logits") out.log_probs = first;
    if (name == "class_logits") out.logits = first;
  }
  out.embedding = out.encoded.mean(0);
}

}  // namespace

// "a.wav: too short: 0.040 s gives 2 feature frames; conformer_s needs at least 7 ..."
static void check_long_enough(const ModelConfig& config, int64_t min_frames,
                              const std::string& source, double seconds, int64_t frames) {
  if (frames >= min_frames) return;
  const double shift = config.frame_shift_ms() / 1000.0;
  throw AudioError(source + ": too short: " + seconds_text(seconds) + " gives " +
                   std::to_string(frames) + " feature frames; " + config.name + " needs at least " +
                   std::to_string(min_frames) + " (about " +
                   seconds_text(static_cast<double>(min_frames) * shift) + ")");
}

SpeechEncoder::SpeechEncoder(const std::string& model, SpeechEncoderOptions options)
    : state_(std::make_unique<State>()) {
  const io::InflationScope inflation;  // a gzipped .nemo is inflated once for the whole load
  auto& s = *state_;
  TORCH_CHECK_VALUE(options.stream_chunk >= 0, "SpeechEncoder: stream_chunk must be >= 0, got ",
                    options.stream_chunk);
  TORCH_CHECK_VALUE(options.batch_size >= 1, "SpeechEncoder: batch_size must be >= 1, got ",
                    options.batch_size);
  auto setup = detail::model_setup("SpeechEncoder", model, options, InputKind::kAudioFeatures,
                                   "a speech encoder needs audio");
  s.device = setup.device;
  s.dtype = setup.dtype;
  s.config = setup.config;
  const auto& family = *setup.family;
  TORCH_CHECK_VALUE(s.config.features.has_value(), "SpeechEncoder: ", s.config.source,
                    " has no features section: the model takes features made elsewhere (use "
                    "ConformerEncoder directly)");
  s.extractor = std::make_unique<FeatureExtractor>(audio_feature_options(s.config.features));
  s.min_frames = family.min_frames(s.config);
  s.frame_ms = family.frame_ms(s.config);
  s.model = detail::setup_model(setup, options, s.weights);
  s.conformer = s.model.as<ConformerEncoder>();
  TORCH_CHECK_VALUE(options.stream_chunk == 0 || !s.conformer.is_empty(),
                    "SpeechEncoder: ", s.config.source, " is a ", s.config.family,
                    " model, which does not stream; stream_chunk must be 0");
  s.options = std::move(options);
}

SpeechEncoder::~SpeechEncoder() = default;
SpeechEncoder::SpeechEncoder(SpeechEncoder&&) noexcept = default;
SpeechEncoder& SpeechEncoder::operator=(SpeechEncoder&&) noexcept = default;

const ModelConfig& SpeechEncoder::config() const { return state_->config; }
c10::ScalarType SpeechEncoder::dtype() const { return state_->dtype; }
const std::string& SpeechEncoder::weights_description() const { return state_->weights; }
int64_t SpeechEncoder::min_feature_frames() const { return state_->min_frames; }
double SpeechEncoder::frame_period_ms() const { return state_->frame_ms; }

torch::Tensor SpeechEncoder::ctc_log_probs(const torch::Tensor& encoded) const {
  auto& s = *state_;
  TORCH_CHECK_VALUE(!s.conformer.is_empty() && s.conformer->ctc,
                    "SpeechEncoder::ctc_log_probs: ", s.config.source,
                    " has no CTC head (architecture.vocab_size is 0)");
  const int64_t width = s.conformer->options.blocks().input_dim();
  TORCH_CHECK_VALUE(encoded.defined() && encoded.dim() == 2 && encoded.size(1) == width,
                    "SpeechEncoder::ctc_log_probs: encoded must be [k, ", width, "], got ",
                    encoded.defined() ? encoded.sizes() : c10::IntArrayRef{});
  torch::InferenceMode inference;
  const auto x = encoded.unsqueeze(0).to(s.device, s.dtype);
  return s.conformer->ctc_log_probs(x)[0].to(torch::kCPU, torch::kFloat).contiguous();
}

TransducerImpl* SpeechEncoder::transducer() const {
  auto& conformer = state_->conformer;
  return conformer.is_empty() || conformer->transducer.is_empty() ? nullptr
                                                                  : conformer->transducer.get();
}

bool SpeechEncoder::has_attention_decoder() const {
  return !state_->conformer.is_empty() && !state_->conformer->decoder.is_empty();
}

bool SpeechEncoder::has_right_to_left_decoder() const {
  return has_attention_decoder() && state_->conformer->decoder->bidirectional();
}

DecoderScores SpeechEncoder::attention_scores(const torch::Tensor& encoded,
                                              const std::vector<std::vector<int64_t>>& hypotheses,
                                              double reverse_weight) const {
  auto& s = *state_;
  TORCH_CHECK_VALUE(has_attention_decoder(), "SpeechEncoder::attention_scores: ", s.config.source,
                    " has no attention decoder (architecture.decoder)");
  const int64_t width = s.conformer->options.blocks().input_dim();
  TORCH_CHECK_VALUE(
      encoded.defined() && encoded.dim() == 2 && encoded.size(1) == width && encoded.size(0) > 0,
      "SpeechEncoder::attention_scores: encoded must be [T' > 0, ", width, "], got ",
      encoded.defined() ? encoded.sizes() : c10::IntArrayRef{});
  torch::InferenceMode inference;
  return s.conformer->decoder->score(encoded.to(s.device, s.dtype), hypotheses, reverse_weight);
}

EncodedSpeech SpeechEncoder::encode_one(const SpeechFeatures& utterance) const {
  auto& s = *state_;
  EncodedSpeech out;
  out.audio = utterance.source;
  out.seconds = utterance.seconds;
  out.frame_ms = s.frame_ms;
  out.feature_frames = utterance.features.size(0);
  torch::InferenceMode inference;
  const auto input = utterance.features.unsqueeze(0).to(s.device, s.dtype);
  if (s.options.stream_chunk > 0) {
    fill_outputs(out, streamed_outputs(s.conformer, std::get<0>(s.conformer->forward_chunk_by_chunk(
                                                        input, s.options.stream_chunk,
                                                        s.config.streaming.num_left_chunks))));
  } else {
    fill_outputs(out, s.model.forward({input}));
  }
  return out;
}

EncodedSpeech SpeechEncoder::encode_file_streaming(const std::string& path) const {
  const auto& s = *state_;
  torch::InferenceMode inference;
  auto reader = AudioReader::open(path, s.options.read);
  ConformerStream stream(s.conformer, s.options.stream_chunk, s.config.streaming.num_left_chunks);
  std::vector<torch::Tensor> encoded;
  int64_t feature_frames = 0;
  const auto audio = stream_audio_features(reader, *s.extractor, [&](const torch::Tensor& frames) {
    feature_frames += frames.size(0);
    encoded.push_back(stream.push(frames.unsqueeze(0).to(s.device, s.dtype)));
  });
  const double seconds =
      static_cast<double>(audio.samples) / static_cast<double>(s.config.features->sample_rate);
  check_long_enough(s.config, s.min_frames, path, seconds, feature_frames);
  encoded.push_back(stream.finish());
  EncodedSpeech out;
  out.audio = path;
  out.seconds = seconds;
  out.frame_ms = s.frame_ms;
  out.feature_frames = feature_frames;
  fill_outputs(out, streamed_outputs(s.conformer, torch::cat(encoded, 1)));
  return out;
}

std::vector<EncodedSpeech> SpeechEncoder::encode_features(
    const std::vector<SpeechFeatures>& utterances) const {
  auto& s = *state_;
  std::vector<EncodedSpeech> results;
  results.reserve(utterances.size());
  if (utterances.empty()) return results;
  for (const auto& u : utterances) {
    TORCH_CHECK_VALUE(u.features.defined() && u.features.dim() == 2 &&
                          u.features.size(1) == s.extractor->options().num_mel_bins,
                      "SpeechEncoder::encode_features: ", u.source, ": features must be [frames, ",
                      s.extractor->options().num_mel_bins, "], got ",
                      u.features.defined() ? u.features.sizes() : c10::IntArrayRef{});
    check_long_enough(s.config, s.min_frames, u.source, u.seconds, u.features.size(0));
  }
  if (s.options.stream_chunk > 0 || utterances.size() == 1) {
    for (const auto& u : utterances) {
      const auto start = std::chrono::steady_clock::now();
      results.push_back(encode_one(u));
      results.back().encode_ms = u.features_ms + detail::ms_since(start);
    }
    return results;
  }
  const auto start = std::chrono::steady_clock::now();
  torch::InferenceMode inference;
  std::vector<torch::Tensor> features;
  for (const auto& u : utterances) features.push_back(u.features);
  const auto padded = pad_features(features);
  torch::Tensor encoded, lengths, log_probs, logits;
  for (const auto& [name, value] :
       s.model.forward({padded.features.to(s.device, s.dtype), padded.lengths.to(s.device)})) {
    if (name == "encoded") encoded = value.to(torch::kCPU, torch::kFloat);
    if (name == "lengths") lengths = value.to(torch::kCPU);
    if (name == "logits") log_probs = value.to(torch::kCPU, torch::kFloat);
    if (name == "class_logits") logits = value.to(torch::kCPU, torch::kFloat);
  }
  // Without lengths every output row is whole (AST's tokens of a fixed-length clip).
  if (!lengths.defined()) lengths = torch::full({encoded.size(0)}, encoded.size(1), torch::kLong);
  const auto valid = lengths.accessor<int64_t, 1>();
  const double batch_ms = detail::ms_since(start);
  const double total_frames = static_cast<double>(padded.lengths.sum().item<int64_t>());
  for (size_t i = 0; i < utterances.size(); ++i) {
    const auto& u = utterances[i];
    const auto index = static_cast<int64_t>(i);
    EncodedSpeech out;
    out.audio = u.source;
    out.seconds = u.seconds;
    out.frame_ms = s.frame_ms;
    out.feature_frames = u.features.size(0);
    out.encoded = encoded[index].narrow(0, 0, valid[index]).contiguous();
    out.embedding = out.encoded.mean(0);
    if (log_probs.defined())
      out.log_probs = log_probs[index].narrow(0, 0, valid[index]).contiguous();
    if (logits.defined()) out.logits = logits[index].contiguous();
    out.encode_ms = u.features_ms + batch_ms * static_cast<double>(out.feature_frames) /
                                        std::max(total_frames, 1.0);
    results.push_back(std::move(out));
  }
  return results;
}

SpeechFeatures SpeechEncoder::checked_features(const std::string& source, torch::Tensor features,
                                               double seconds,
                                               std::chrono::steady_clock::time_point start) const {
  const auto& s = *state_;
  check_long_enough(s.config, s.min_frames, source, seconds, features.size(0));
  return {source, std::move(features), seconds, detail::ms_since(start)};
}

SpeechFeatures SpeechEncoder::features(const std::string& path) const {
  const auto& s = *state_;
  const auto start = std::chrono::steady_clock::now();
  auto audio = audio_file_features(path, *s.extractor, s.options.read);
  return checked_features(
      path, std::move(audio.features),
      static_cast<double>(audio.samples) / static_cast<double>(s.config.features->sample_rate),
      start);
}

SpeechFeatures SpeechEncoder::features_from_memory(const void* data, size_t size,
                                                   const std::string& source) const {
  const auto& s = *state_;
  const auto start = std::chrono::steady_clock::now();
  auto audio = audio_memory_features(data, size, source, *s.extractor, s.options.read);
  return checked_features(
      source, std::move(audio.features),
      static_cast<double>(audio.samples) / static_cast<double>(s.config.features->sample_rate),
      start);
}

SpeechFeatures SpeechEncoder::waveform_features(const torch::Tensor& samples, int64_t sample_rate,
                                                const std::string& source) const {
  const auto& s = *state_;
  const auto start = std::chrono::steady_clock::now();
  TORCH_CHECK_VALUE(
      samples.defined() && samples.dim() == 1 && sample_rate > 0, "SpeechEncoder: ", source,
      ": samples must be [N] (mono) with sample_rate > 0, got ",
      samples.defined() ? samples.sizes() : c10::IntArrayRef{}, " at ", sample_rate, " Hz");
  return checked_features(
      source, attnzoo::waveform_features(samples, sample_rate, *s.extractor, source),
      static_cast<double>(samples.size(0)) / static_cast<double>(sample_rate), start);
}

EncodedSpeech SpeechEncoder::encode(const std::string& path) const {
  if (state_->options.stream_chunk > 0) {
    const auto start = std::chrono::steady_clock::now();
    auto out = encode_file_streaming(path);
    out.encode_ms = detail::ms_since(start);
    return out;
  }
  return encode_features({features(path)}).front();
}

EncodedSpeech SpeechEncoder::encode_waveform(const torch::Tensor& samples, int64_t sample_rate,
                                             const std::string& source) const {
  return encode_features({waveform_features(samples, sample_rate, source)}).front();
}

std::vector<EncodedSpeech> SpeechEncoder::encode(const std::vector<std::string>& paths) const {
  const auto& s = *state_;
  std::vector<EncodedSpeech> results(paths.size());
  if (s.options.stream_chunk > 0 || s.options.batch_size == 1) {
    for (size_t i = 0; i < paths.size(); ++i) {
      try {
        results[i] = encode(paths[i]);
      } catch (const std::exception& e) {
        fill_error(results[i], paths[i], e);
      }
    }
    return results;
  }
  // Features file by file (a bad file gets its error), the encoder batch by batch.
  std::vector<size_t> batch;
  std::vector<SpeechFeatures> features_of_batch;
  const auto flush = [&] {
    if (batch.empty()) return;
    try {
      auto encoded = encode_features(features_of_batch);
      for (size_t j = 0; j < batch.size(); ++j) results[batch[j]] = std::move(encoded[j]);
    } catch (const std::exception& e) {  // the encoder failed (out of memory, ...): all of them
      for (size_t j : batch) fill_error(results[j], paths[j], e);
    }
    batch.clear();
    features_of_batch.clear();
  };
  for (size_t i = 0; i < paths.size(); ++i) {
    try {
      features_of_batch.push_back(features(paths[i]));
      batch.push_back(i);
    } catch (const std::exception& e) {
      fill_error(results[i], paths[i], e);
    }
    if (static_cast<int64_t>(batch.size()) == s.options.batch_size) flush();
  }
  flush();
  return results;
}

// Copies what it needs of the encoder (the model is shared): a Stream may outlive its encoder.
struct SpeechEncoder::Stream::Impl {
  ModelConfig config;
  int64_t min_frames = 1;
  torch::Device device{torch::kCPU};
  torch::Dtype dtype = torch::kFloat;
  std::string source;
  int64_t sample_rate = 0;
  std::unique_ptr<Resampler> resampler;  // when the stream's rate is not the model's
  std::unique_ptr<FeatureStream> features;
  std::unique_ptr<ConformerStream> conformer;
  int64_t chunk = 0;
  int64_t samples = 0, feature_frames = 0, emitted = 0;
  bool finished = false;

  torch::Tensor encode(const torch::Tensor& frames) {
    feature_frames += frames.size(0);
    auto out = conformer->push(frames.unsqueeze(0).to(device, dtype));
    return out[0].to(torch::kCPU, torch::kFloat);
  }
};

SpeechEncoder::Stream::Stream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SpeechEncoder::Stream::Stream(Stream&&) noexcept = default;
SpeechEncoder::Stream& SpeechEncoder::Stream::operator=(Stream&&) noexcept = default;
SpeechEncoder::Stream::~Stream() = default;

int64_t SpeechEncoder::Stream::chunk_size() const { return impl_->chunk; }
int64_t SpeechEncoder::Stream::frames_emitted() const { return impl_->emitted; }
double SpeechEncoder::Stream::seconds_received() const {
  return static_cast<double>(impl_->samples) / static_cast<double>(impl_->sample_rate);
}

torch::Tensor SpeechEncoder::Stream::push(const torch::Tensor& samples) {
  auto& m = *impl_;
  TORCH_CHECK_VALUE(!m.finished, "SpeechEncoder::Stream(", m.source, "): push after finish()");
  TORCH_CHECK_VALUE(samples.defined() && samples.dim() == 1, "SpeechEncoder::Stream(", m.source,
                    "): samples must be [n] (mono), got ",
                    samples.defined() ? samples.sizes() : c10::IntArrayRef{});
  torch::InferenceMode inference;
  auto x = samples.to(torch::kFloat).contiguous();
  m.samples += x.size(0);
  if (m.resampler) x = m.resampler->process(x);
  auto out = m.encode(m.features->push(x));
  m.emitted += out.size(0);
  return out;
}

torch::Tensor SpeechEncoder::Stream::finish() {
  auto& m = *impl_;
  TORCH_CHECK_VALUE(!m.finished, "SpeechEncoder::Stream(", m.source, "): finish() called twice");
  m.finished = true;
  torch::InferenceMode inference;
  std::vector<torch::Tensor> out;
  if (m.resampler) out.push_back(m.encode(m.features->push(m.resampler->flush())));
  out.push_back(m.encode(m.features->finish()));
  check_long_enough(m.config, m.min_frames, m.source, seconds_received(), m.feature_frames);
  out.push_back(m.conformer->finish()[0].to(torch::kCPU, torch::kFloat));
  auto all = torch::cat(out);
  m.emitted += all.size(0);
  return all;
}

SpeechEncoder::Stream SpeechEncoder::stream(int64_t sample_rate, int64_t chunk,
                                            const std::string& source) const {
  const auto& s = *state_;
  TORCH_CHECK_VALUE(sample_rate > 0, "SpeechEncoder::stream: sample_rate must be > 0, got ",
                    sample_rate);
  TORCH_CHECK_VALUE(chunk >= 0, "SpeechEncoder::stream: chunk must be >= 0, got ", chunk);
  if (chunk == 0) chunk = s.options.stream_chunk;
  if (chunk == 0) chunk = s.config.streaming.chunk_size;
  TORCH_CHECK_VALUE(!s.conformer.is_empty(), "SpeechEncoder::stream: ", s.config.source, " is a ",
                    s.config.family, " model, which does not stream");
  TORCH_CHECK_VALUE(s.extractor->streams(), "SpeechEncoder::stream: ", s.config.source, " uses ",
                    to_string(s.extractor->options().kind),
                    " features normalised over the whole utterance (", s.extractor->describe(),
                    "); they cannot stream");
  TORCH_CHECK_VALUE(chunk > 0, "SpeechEncoder::stream: ", s.config.source,
                    " has no streaming.chunk_size; pass a chunk (encoder frames)");
  auto impl = std::make_unique<Stream::Impl>();
  impl->config = s.config;
  impl->min_frames = s.min_frames;
  impl->device = s.device;
  impl->dtype = s.dtype;
  impl->source = source;
  impl->sample_rate = sample_rate;
  impl->chunk = chunk;
  if (sample_rate != s.extractor->options().sample_rate) {
    impl->resampler = std::make_unique<Resampler>(
        static_cast<double>(sample_rate), static_cast<double>(s.extractor->options().sample_rate));
  }
  impl->features = std::make_unique<FeatureStream>(*s.extractor, source);
  impl->conformer =
      std::make_unique<ConformerStream>(s.conformer, chunk, s.config.streaming.num_left_chunks);
  return Stream(std::move(impl));
}

}  // namespace attnzoo
