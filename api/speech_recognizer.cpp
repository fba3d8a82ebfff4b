#include <attnzoo/api/speech_recognizer.h>

#include <attnzoo/api/ctc_search.h>
#include <attnzoo/api/model_setup.h>
#include <attnzoo/api/model_tokenizer.h>
#include <attnzoo/api/transducer_search.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/io/inflated_files.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
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

}  // namespace

struct SpeechRecognizer::State {
  State(SpeechEncoder encoder, decoding::Tokenizer tokenizer)
      : encoder(std::move(encoder)), tokenizer(std::move(tokenizer)) {}
  bool rescoring() const {
    return encoder.config().decoding.mode == decoding::DecodingMode::kAttentionRescoring;
  }
  bool transducer() const {
    return encoder.config().decoding.head == decoding::DecodingHead::kTransducer;
  }
  // The transducer's search over one utterance.
  TransducerSearcher transducer_search() const {
    return TransducerSearcher(*encoder.transducer(), encoder.config());
  }

  // The search's hypotheses, best first. With attention rescoring, the whole beam ranked again
  // by the decoder over the utterance's encoder frames `encoded` [T', D], each scored with its
  // rescoring score, the first decoding.nbest of them kept.
  std::vector<TranscriptHypothesis> hypotheses(const CtcSearcher& search,
                                               const torch::Tensor& encoded) const {
    return ranked(search.hypotheses(), encoded);
  }
  std::vector<TranscriptHypothesis> ranked(std::vector<decoding::CtcHypothesis> found,
                                           const torch::Tensor& encoded) const {
    if (rescoring() && !found.empty()) {
      const auto& settings = encoder.config().decoding;
      std::vector<std::vector<int64_t>> tokens;
      for (const auto& h : found) tokens.push_back(h.tokens);
      const auto scores =
          encoder.attention_scores(encoded, tokens, settings.rescoring.reverse_weight);
      found = rank_by_rescoring(found, scores, settings.rescoring,
                                static_cast<size_t>(settings.beam.nbest));
    }
    std::vector<TranscriptHypothesis> out;
    for (const auto& h : found) out.push_back(hypothesis_of(h, tokenizer));
    return out;
  }

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
  const io::InflationScope inflation;  // a gzipped .nemo is inflated once for the whole load
  auto& encoder_options = options.encoder;
  encoder_options.overrides = recognizer_overrides(options);
  // The token table first: a bad one is refused before the model is built.
  auto tokenizer = model_tokenizer(resolve_model_config(model, encoder_options.overrides));
  auto state = std::make_shared<State>(SpeechEncoder(model, encoder_options), std::move(tokenizer));
  const auto& config = state->encoder.config();
  TORCH_CHECK_VALUE(model_family(config.family).token_vocab(config) > 0,
                    "SpeechRecognizer: ", config.source,
                    " has no CTC or transducer head (architecture.vocab_size is 0)");
  TORCH_CHECK_VALUE(!state->transducer() || state->encoder.transducer(),
                    "SpeechRecognizer: ", config.source,
                    ": decoding.head transducer needs architecture.transducer");
  state->search = ctc_search_settings(config, state->tokenizer.units());
  if (state->rescoring()) {
    TORCH_CHECK_VALUE(state->encoder.has_attention_decoder(), "SpeechRecognizer: ", config.source,
                      ": decoding.mode attention_rescoring needs an attention decoder "
                      "(architecture.decoder)");
    TORCH_CHECK_VALUE(
        config.decoding.rescoring.reverse_weight == 0.0 ||
            state->encoder.has_right_to_left_decoder(),
        "SpeechRecognizer: ", config.source,
        ": decoding.reverse_weight > 0 needs a right-to-left decoder (kind: bitransformer)");
    const auto sos_eos = state->tokenizer.units().sos_eos_id();
    const auto vocab = model_family(config.family).ctc_vocab(config);
    TORCH_CHECK_VALUE(sos_eos == vocab - 1, "SpeechRecognizer: ", config.source,
                      ": attention rescoring needs the token table's <sos/eos> as its last id (",
                      vocab - 1, "), as the decoder was trained; the table's is ", sos_eos);
  }
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
    if (state_->transducer()) {
      auto search = state_->transducer_search();
      search.advance(encoded.encoded);
      out.hypotheses = state_->ranked(search.hypotheses(), encoded.encoded);
    } else {
      CtcSearcher search(state_->search);
      search.advance(encoded.log_probs);
      out.hypotheses = state_->hypotheses(search, encoded.encoded);
    }
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
        source(std::move(source)) {
    if (this->state->transducer()) transducer.emplace(this->state->transducer_search());
  }

  // Encoder frames [k, D] through the CTC head into the search (and kept for the attention
  // rescoring at the end), or into the transducer's search, whose prediction network carries
  // its state from chunk to chunk.
  void advance(const torch::Tensor& frames) {
    if (state->rescoring() && frames.size(0) > 0) encoded.push_back(frames);
    auto start = std::chrono::steady_clock::now();
    if (transducer) {
      transducer->advance(frames);
      decode_ms += detail::ms_since(start);
      return;
    }
    const auto log_probs = state->encoder.ctc_log_probs(frames);
    encode_ms += detail::ms_since(start);
    start = std::chrono::steady_clock::now();
    search.advance(log_probs);
    decode_ms += detail::ms_since(start);
  }
  std::vector<decoding::CtcHypothesis> hypotheses() const {
    return transducer ? transducer->hypotheses() : search.hypotheses();
  }
  std::vector<int64_t> stable_tokens() {
    return transducer ? transducer->stable_tokens() : search.stable_tokens();
  }

  std::shared_ptr<const State> state;
  SpeechEncoder::Stream encoder;
  CtcSearcher search;
  std::optional<TransducerSearcher> transducer;  // decoding.head transducer
  std::vector<torch::Tensor> encoded;  // the encoder's frames so far, with attention rescoring
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
  const auto stable = static_cast<int64_t>(m.stable_tokens().size());
  const auto best = m.hypotheses().front();
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
  const auto rescoring_start = std::chrono::steady_clock::now();
  // Rescored once, over every frame of the stream, as WeNet's runtime does at the end.
  out.hypotheses = m.state->ranked(m.hypotheses(),
                                   m.encoded.empty() ? torch::Tensor() : torch::cat(m.encoded, 0));
  m.decode_ms += detail::ms_since(rescoring_start);
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
