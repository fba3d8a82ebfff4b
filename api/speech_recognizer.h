// Speech to text in one object: a SpeechEncoder (api/speech_encoder.h) whose model has a CTC
// head or a transducer, the model's token table and a search (decoding/'s CTC searches, or the
// transducer's greedy search: api/transducer_search.h), as the model YAML's `decoding:` section
// says (configs/README.md), each setting overridable.
//
//   attnzoo::SpeechRecognizerOptions options;
//   options.encoder.weights = "final.safetensors";  // e.g. a WeNet checkpoint, converted
//   options.units = "units.txt";                    // else the YAML's decoding.units
//   attnzoo::SpeechRecognizer recognizer("wenet_u2pp_conformer_librispeech", options);
//   auto t = recognizer.transcribe("speech.wav");
//   std::cout << t.best().text << "\n";              // tokens with times and confidences too
//
//   auto live = recognizer.stream(16000);            // live audio, chunk by chunk
//   for (const auto& block : blocks) show(live.push(block).stable.text);  // only grows
//   auto final_result = live.finish();
//
// With decoding.mode attention_rescoring (a model with an attention decoder: WeNet's U2 and U2++),
// prefix beam search's whole beam is ranked again by the decoder (decoding/attention_rescoring.h):
// offline for each utterance, and live once, at finish(), over all the stream's frames (the
// partial results stay the CTC search's), as WeNet's runtime does.
//
// Offline, the model runs as SpeechEncoder runs it: the whole utterance, under the config's
// streaming chunk mask when it has one (so a chunk-trained model decodes as it streams), batched
// (options.encoder.batch_size). Live, the encoder's streaming path and the search advance chunk
// by chunk; the final result equals the offline decode of the same audio under the same chunk
// mask. Inference runs under torch::InferenceMode: one recognizer may be used from several
// threads at once (each Stream by one thread at a time). Errors name the file, option or key:
// AudioError for audio, UnitsError for a token table, ConfigError for configs, CheckpointError
// for weights, c10::Error for options.
#pragma once

#include <attnzoo/api/speech_encoder.h>
#include <attnzoo/decoding/tokenizer.h>

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnzoo {

struct SpeechRecognizerOptions {
  // The model's weights, device, dtype, threads, overrides (`decoding.beam_size=4`, ...), batch
  // size, and stream_chunk (> 0: offline files through the streaming path).
  SpeechEncoderOptions encoder;
  // A token table to use instead of the config's decoding.units (a path as given, not relative
  // to the YAML); its layout, text joining and search are the config's decoding section's, or
  // its defaults (wenet, characters, prefix_beam), overridable with `decoding.*` overrides.
  std::string units;
};

// The config overrides a recognizer applies: options.encoder.overrides, with options.units as
// decoding.units (first, so that an override may still change it). For reading the config as the
// recognizer will: resolve_model_config(model, recognizer_overrides(options)).
std::vector<std::string> recognizer_overrides(const SpeechRecognizerOptions& options);

// One token of a hypothesis: its id and text, and where its best alignment put it. Tokens that
// make no text (<sos/eos>) are not listed (api/ctc_search.h).
struct TranscribedToken {
  int64_t id = 0;
  std::string text;  // Tokenizer::token_text: the token, a space token as " "
  int64_t start_frame = 0;
  int64_t end_frame = 0;  // inclusive, encoder frames
  double start_seconds = 0.0;
  double end_seconds = 0.0;
  double confidence = 0.0;  // the token's peak posterior
};

struct TranscriptHypothesis {
  std::string text;
  std::vector<TranscribedToken> tokens;
  // log-probability of all its tokens (decoding/ctc_decoder.h); with decoding.mode
  // attention_rescoring, the rescoring score (decoding/attention_rescoring.h)
  double score = 0.0;
  double confidence = 0.0;  // the mean of its tokens' confidences
};

// One utterance's result, or the error that stopped it.
struct Transcript {
  std::string audio;  // the file (or source name)
  // Best first: decoding.nbest of them (fewer when fewer distinct ones survive the beam, or when
  // some differ only by <sos/eos> and are merged, api/ctc_search.h; one for greedy search).
  // Never empty on success.
  std::vector<TranscriptHypothesis> hypotheses;
  double seconds = 0.0;    // the audio's duration
  double encode_ms = 0.0;  // features and encoder (a batch's shared by frames)
  double decode_ms = 0.0;  // the CTC search (and the attention rescoring)
  std::string error;       // empty on success
  bool ok() const { return error.empty(); }
  const TranscriptHypothesis& best() const;  // hypotheses.front(); c10::Error when failed
};

// What live audio has given so far.
struct PartialTranscript {
  // The tokens the hypotheses of the search agree on: no later audio changes them, so its text
  // only grows from one push to the next (times and confidences are the best hypothesis's
  // alignment of them, and may be refined). With decoding.stable_margin 0 every hypothesis of
  // the beam must agree; with a margin, those within a factor e^margin of the best, and the
  // others are dropped once the stable text passes them (configs/model_config.h).
  TranscriptHypothesis stable;
  // The best hypothesis so far: it begins with `stable`, and its end may still change.
  TranscriptHypothesis best;
  double seconds = 0.0;  // audio received
};

class SpeechRecognizer {
 public:
  // `model`: a registered name, a YAML file or a model source (a .nemo file, ...) of a model of
  // audio with a CTC or transducer head (architecture.vocab_size > 0) and a features section;
  // decoding.head says which decodes (api/transducer_search.h for the transducer's greedy
  // search).
  explicit SpeechRecognizer(const std::string& model, SpeechRecognizerOptions options = {});
  ~SpeechRecognizer();
  SpeechRecognizer(SpeechRecognizer&&) noexcept;
  SpeechRecognizer& operator=(SpeechRecognizer&&) noexcept;

  // Throws AudioError naming the file (unreadable, too short), as SpeechEncoder::encode.
  Transcript transcribe(const std::string& path) const;
  // A mono waveform in [-1, 1] at `sample_rate` (resampled to the model's rate).
  Transcript transcribe_waveform(const torch::Tensor& samples, int64_t sample_rate,
                                 const std::string& source = "<waveform>") const;
  // Every file, encoded in batches of options.encoder.batch_size; a file that fails gets its
  // error and the others are still transcribed.
  std::vector<Transcript> transcribe(const std::vector<std::string>& paths) const;
  // The search over an encoder's output (its log_probs, or its frames through the transducer);
  // `encoded.error` is passed on.
  Transcript decode(const EncodedSpeech& encoded) const;

  // Live audio: push blocks of samples, get what they give so far; finish() gives the final
  // result, equal to transcribe()'s of the same audio under the same chunk mask (within the
  // rounding of the encoder's two paths) with decoding.stable_margin 0; with a margin, unless a
  // hypothesis dropped for being e^margin less likely than the best would have become the best. A
  // Stream is used by one thread at a time and keeps the model alive; it may outlive the
  // recognizer.
  class Stream {
   public:
    Stream(Stream&&) noexcept;
    Stream& operator=(Stream&&) noexcept;
    ~Stream();
    // samples: [n] float in [-1, 1], mono at the stream's rate (n may be 0). AudioError for
    // NaN or infinite samples.
    PartialTranscript push(const torch::Tensor& samples);
    // The final result (its audio is the stream's source). AudioError ("too short") when the
    // whole stream gave fewer feature frames than the subsampling needs. The stream is then
    // done.
    Transcript finish();
    int64_t chunk_size() const;  // encoder frames per chunk
    double seconds_received() const;

   private:
    friend class SpeechRecognizer;
    struct Impl;
    explicit Stream(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
  };
  // chunk: encoder frames per chunk; 0: options.encoder.stream_chunk, else the config's
  // streaming.chunk_size (SpeechEncoder::stream's rules and errors).
  Stream stream(int64_t sample_rate, int64_t chunk = 0,
                const std::string& source = "<stream>") const;

  const ModelConfig& config() const;
  const decoding::Tokenizer& tokenizer() const;
  const SpeechEncoder& encoder() const;

 private:
  struct State;
  std::shared_ptr<const State> state_;
};

}  // namespace attnzoo
