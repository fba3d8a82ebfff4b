#include <attnzoo/api/speech_recognizer.h>

#include <attnzoo/api/ctc_search.h>
#include <attnzoo/api/model_setup.h>
#include <attnzoo/api/model_tokenizer.h>
#include <attnzoo/configs/registry.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <utility>

namespace attnzoo {

namespace {

// A path as a YAML double-quoted scalar, for an override.
std::string yaml_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The first `count` tokens of `h` (all of them when count is -1) with their text.
TranscriptHypothesis hypothesis_of(const decoding::CtcHypothesis& h,
                                   const decoding::Tokenizer& tokenizer, int64_t count = -1) {
  const size_t n =
      count < 0 ? h.tokens.size() : std::min(h.tokens.size(), static_cast<size_t>(count));
  TranscriptHypothesis out;
  out.score = h.score;
  const std::vector<int64_t> ids(h.tokens.begin(),
                                 h.tokens.begin() + static_cast<std::ptrdiff_t>(n));
  out.text = tokenizer.decode(ids);
  double confidence = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const auto& timing = h.timings[i];
    out.tokens.push_back({ids[i], tokenizer.token_text(ids[i]), timing.start_frame,
                          timing.end_frame, timing.start_seconds, timing.end_seconds,
                          timing.confidence});
    confidence += timing.confidence;
  }
  out.confidence = n == h.tokens.size()
                       ? h.confidence
                       : (n > 0 ? confidence / static_cast<double>(n) : h.confidence);
  return out;
}

std::vector<TranscriptHypothesis> hypotheses_of(const CtcSearcher& search,
                                                const decoding::Tokenizer& tokenizer) {
  std::vector<TranscriptHypothesis> out;
  for (const auto& h : search.hypotheses()) out.push_back(hypothesis_of(h, tokenizer));
  return out;
}

}  // namespace

struct SpeechRecognizer::State {
  State(SpeechEncoder encoder, decoding::Tokenizer tokenizer)
      : encoder(std::move(encoder)), tokenizer(std::move(tokenizer)) {}
  SpeechEncoder encoder;
  decoding::Tokenizer tokenizer;
  CtcSearchSettings search;
};

const TranscriptHypothesis& Transcript::best() const {
  TORCH_CHECK(ok() && !hypotheses.empty(), "Transcript::best: ", audio, " has no result: ", error);
  return hypotheses.front();
}

std::vector<std::string> recognizer_overrides(const SpeechRecognizerOptions& options) {
  auto overrides = options.encoder.overrides;
  if (!options.units.empty()) {
    const auto units = std::filesystem::absolute(options.units).lexically_normal().string();
    overrides.insert(overrides.begin(), "decoding.units=" + yaml_quoted(units));
  }
  return overrides;
}

SpeechRecognizer::SpeechRecognizer(const std::string& model, SpeechRecognizerOptions options) {
  auto& encoder_options = options.encoder;
  encoder_options.overrides = recognizer_overrides(options);
  // The token table first: a bad one is refused before the model is built.
  auto tokenizer = model_tokenizer(resolve_model_config(model, encoder_options.overrides));
  auto state = std::make_shared<State>(SpeechEncoder(model, encoder_options), std::move(tokenizer));
  const auto& config = state->encoder.config();
  TORCH_CHECK_VALUE(model_family(config.family).ctc_vocab(config) > 0,
                    "SpeechRecognizer: ", config.source,
                    " has no CTC head (architecture.vocab_size is 0)");
  state->search = ctc_search_settings(config, state->tokenizer.units());
  state_ = std::move(state);
}

SpeechRecognizer::~SpeechRecognizer() = default;
SpeechRecognizer::SpeechRecognizer(SpeechRecognizer&&) noexcept = default;
SpeechRecognizer& SpeechRecognizer::operator=(SpeechRecognizer&&) noexcept = default;

const ModelConfig& SpeechRecognizer::config() const { return state_->encoder.config(); }
const decoding::Tokenizer& SpeechRecognizer::tokenizer() const { return state_->tokenizer; }
const SpeechEncoder& SpeechRecognizer::encoder() const { return state_->encoder; }

Transcript SpeechRecognizer::decode(const EncodedSpeech& encoded) const {
  Transcript out;
  out.audio = encoded.audio;
  out.seconds = encoded.seconds;
  out.encode_ms = encoded.encode_ms;
  out.error = encoded.error;
  if (!encoded.ok()) return out;
  const auto start = std::chrono::steady_clock::now();
  try {
    CtcSearcher search(state_->search);
    search.advance(encoded.log_probs);
    out.hypotheses = hypotheses_of(search, state_->tokenizer);
  } catch (const std::exception& e) {
    out.hypotheses.clear();
    out.error = encoded.audio + ": " + e.what();
  }
  out.decode_ms = detail::ms_since(start);
  return out;
}

Transcript SpeechRecognizer::transcribe(const std::string& path) const {
  auto out = decode(state_->encoder.encode(path));
  if (!out.ok()) throw Error(out.error);
  return out;
}

Transcript SpeechRecognizer::transcribe_waveform(const torch::Tensor& samples, int64_t sample_rate,
                                                 const std::string& source) const {
  auto out = decode(state_->encoder.encode_waveform(samples, sample_rate, source));
  if (!out.ok()) throw Error(out.error);
  return out;
}

std::vector<Transcript> SpeechRecognizer::transcribe(const std::vector<std::string>& paths) const {
  std::vector<Transcript> out;
  out.reserve(paths.size());
  for (const auto& encoded : state_->encoder.encode(paths)) out.push_back(decode(encoded));
  return out;
}

struct SpeechRecognizer::Stream::Impl {
  Impl(std::shared_ptr<const State> state, SpeechEncoder::Stream encoder, std::string source)
      : state(std::move(state)),
        encoder(std::move(encoder)),
        search(this->state->search),
        source(std::move(source)) {}

  // Encoder frames [k, D] through the CTC head into the search.
  void advance(const torch::Tensor& frames) {
    auto start = std::chrono::steady_clock::now();
    const auto log_probs = state->encoder.ctc_log_probs(frames);
    encode_ms += detail::ms_since(start);
    start = std::chrono::steady_clock::now();
    search.advance(log_probs);
    decode_ms += detail::ms_since(start);
  }

  std::shared_ptr<const State> state;
  SpeechEncoder::Stream encoder;
  CtcSearcher search;
  std::string source;
  double encode_ms = 0.0, decode_ms = 0.0;
  bool finished = false;
};

SpeechRecognizer::Stream::Stream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SpeechRecognizer::Stream::Stream(Stream&&) noexcept = default;
SpeechRecognizer::Stream& SpeechRecognizer::Stream::operator=(Stream&&) noexcept = default;
SpeechRecognizer::Stream::~Stream() = default;

int64_t SpeechRecognizer::Stream::chunk_size() const { return impl_->encoder.chunk_size(); }
double SpeechRecognizer::Stream::seconds_received() const {
  return impl_->encoder.seconds_received();
}

PartialTranscript SpeechRecognizer::Stream::push(const torch::Tensor& samples) {
  auto& m = *impl_;
  TORCH_CHECK_VALUE(!m.finished, "SpeechRecognizer::Stream(", m.source, "): push after finish()");
  const auto start = std::chrono::steady_clock::now();
  const auto frames = m.encoder.push(samples);
  m.encode_ms += detail::ms_since(start);
  m.advance(frames);
  PartialTranscript out;
  // First the stable tokens (which may drop hypotheses that disagree with them), then the best
  // hypothesis, which begins with them as all do.
  const auto stable = static_cast<int64_t>(m.search.stable_tokens().size());
  const auto best = m.search.hypotheses().front();
  out.best = hypothesis_of(best, m.state->tokenizer);
  out.stable = hypothesis_of(best, m.state->tokenizer, stable);
  out.seconds = seconds_received();
  return out;
}

Transcript SpeechRecognizer::Stream::finish() {
  auto& m = *impl_;
  TORCH_CHECK_VALUE(!m.finished, "SpeechRecognizer::Stream(", m.source, "): finish() called twice");
  m.finished = true;
  const auto start = std::chrono::steady_clock::now();
  const auto frames = m.encoder.finish();
  m.encode_ms += detail::ms_since(start);
  m.advance(frames);
  Transcript out;
  out.audio = m.source;
  out.seconds = seconds_received();
  out.hypotheses = hypotheses_of(m.search, m.state->tokenizer);
  out.encode_ms = m.encode_ms;
  out.decode_ms = m.decode_ms;
  return out;
}

SpeechRecognizer::Stream SpeechRecognizer::stream(int64_t sample_rate, int64_t chunk,
                                                  const std::string& source) const {
  auto encoder = state_->encoder.stream(sample_rate, chunk, source);
  return Stream(std::make_unique<Stream::Impl>(state_, std::move(encoder), source));
}

}  // namespace attnzoo
