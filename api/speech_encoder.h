// Speech encoding in one object: a model of audio of the zoo (a Conformer, an AST; or any YAML
// config) with its weights and the audio frontend its `features:` section describes (preprocess/:
// libsndfile, libsoxr, Kaldi fbank or Whisper log-mel). The model runs through its family
// (configs/model_family.h); streaming needs a Conformer.
//
//   attnzoo::SpeechEncoderOptions options;
//   options.weights = "wenet_final.safetensors";
//   attnzoo::SpeechEncoder encoder("wenet_conformer_librispeech", options);
//   auto u = encoder.encode("speech.flac");  // u.encoded [T', D], u.embedding [D], u.log_probs
//   auto live = encoder.stream(48000);       // live audio: push blocks, get the new frames
//   auto frames = live.push(block);          // [k, D]; live.finish() at the end
//
// Inference runs under torch::InferenceMode on a model in eval mode: one encoder may be used from
// several threads at once (each Stream by one thread at a time). Errors name the file, option or
// key.
#pragma once

#include <attnzoo/configs/model_config.h>
#include <attnzoo/configs/model_options.h>
#include <attnzoo/models/attention_decoder.h>
#include <attnzoo/models/transducer.h>
#include <attnzoo/preprocess/audio/read.h>

#include <torch/types.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace attnzoo {

// The model's weights, overrides, device, dtype and threads (api/model_options.h), and:
struct SpeechEncoderOptions : ModelOptions {
  AudioReadOptions read;  // channel choice, length limit
  // > 0: encode chunk by chunk through the streaming caches (ConformerStream) in chunks of this
  // many encoder frames, with the config's streaming.num_left_chunks; the model must stream.
  // 0: the offline forward (with the config's streaming chunk mask, if any).
  int64_t stream_chunk = 0;
  // Utterances per forward pass in encode(paths): padded to the longest, with the padding masked
  // (equal to one at a time on the valid frames). Streaming (stream_chunk > 0) encodes one at a
  // time.
  int64_t batch_size = 8;
};

// One utterance: its encoder frames and what follows from them, or the error that stopped it.
struct EncodedSpeech {
  std::string audio;        // the file (or source name)
  torch::Tensor encoded;    // [T', D] float32 on the CPU
  torch::Tensor embedding;  // [D]: the mean over the frames
  torch::Tensor log_probs;  // [T', vocab] CTC log-probabilities; undefined without a CTC head
  // [classes] float32: the classification head's logits (architecture.num_classes > 0), over the
  // valid frames; undefined without one. AudioClassifier turns them into labelled predictions.
  torch::Tensor logits;
  double seconds = 0.0;   // the audio's duration
  double frame_ms = 0.0;  // the period of the encoded frames (feature shift × subsampling)
  int64_t feature_frames = 0;
  double encode_ms = 0.0;  // features and encoder, wall time
  std::string error;       // empty on success
  bool ok() const { return error.empty(); }
};

// An utterance's features, ready for the encoder: what encode() computes before the model runs.
struct SpeechFeatures {
  std::string source;        // the file (or source name)
  torch::Tensor features;    // [frames, bins] float32 on the CPU
  double seconds = 0.0;      // the audio's duration
  double features_ms = 0.0;  // reading and featurising, wall time
};

class SpeechEncoder {
 public:
  // `model`: a registered name or a YAML file of a family of audio (conformer, ast) with a
  // features section.
  explicit SpeechEncoder(const std::string& model, SpeechEncoderOptions options = {});
  ~SpeechEncoder();
  SpeechEncoder(SpeechEncoder&&) noexcept;
  SpeechEncoder& operator=(SpeechEncoder&&) noexcept;

  // Throws AudioError naming the file (unreadable, too short for the subsampling, ...). With
  // options.stream_chunk > 0 the file is read, featurised and encoded block by block: memory
  // holds the encoder's output and a block, not the audio or its features, whatever its length.
  EncodedSpeech encode(const std::string& path) const;
  // A mono waveform in [-1, 1] at `sample_rate` (resampled to the model's rate).
  EncodedSpeech encode_waveform(const torch::Tensor& samples, int64_t sample_rate,
                                const std::string& source = "<waveform>") const;
  // Every file, in batches of options.batch_size; a file that fails gets its error and the
  // others are still encoded. encode_ms: the file's features plus its share (by frames) of its
  // batch's encoder time.
  std::vector<EncodedSpeech> encode(const std::vector<std::string>& paths) const;

  // The two halves of encode(), for callers that featurise and encode on different threads (a
  // server featurises each request as it arrives and encodes many in one forward pass).
  // Features of a file, of an encoded audio file in memory (`data` read during the call), or of a
  // mono waveform in [-1, 1] at `sample_rate`; AudioError naming the source when it is unreadable
  // or too short for the subsampling.
  SpeechFeatures features(const std::string& path) const;
  SpeechFeatures features_from_memory(const void* data, size_t size,
                                      const std::string& source) const;
  SpeechFeatures waveform_features(const torch::Tensor& samples, int64_t sample_rate,
                                   const std::string& source = "<waveform>") const;
  // Utterances in one forward pass, padded to the longest with the padding masked: each result
  // equals encode()'s of its audio (within rounding), in order. With options.stream_chunk > 0, one
  // at a time through the streaming path. Throws what the model throws (out of memory, ...);
  // encode_ms: the utterance's features_ms plus its share, by frames, of the pass.
  std::vector<EncodedSpeech> encode_features(const std::vector<SpeechFeatures>& utterances) const;

  // Live audio through the encoder's streaming path: a Resampler (when `sample_rate` is not the
  // model's), a FeatureStream and a ConformerStream. The frames it returns, concatenated, equal
  // encode()'s with options.stream_chunk = chunk, which equal the offline forward under the same
  // chunk mask (within rounding). A Stream is used by one thread at a time; many Streams may
  // share one encoder.
  class Stream {
   public:
    Stream(Stream&&) noexcept;
    Stream& operator=(Stream&&) noexcept;
    ~Stream();
    // samples: [n] float in [-1, 1], mono at the stream's rate (n may be 0) -> the encoder
    // frames they complete, [k, D] float32 on the CPU (k may be 0). AudioError for NaN or
    // infinite samples.
    torch::Tensor push(const torch::Tensor& samples);
    // The remaining frames. AudioError ("too short", with the numbers) when the whole stream
    // gave fewer feature frames than the subsampling needs. The stream is then done.
    torch::Tensor finish();
    int64_t chunk_size() const;      // encoder frames per chunk
    int64_t frames_emitted() const;  // encoder frames returned so far
    double seconds_received() const;

   private:
    friend class SpeechEncoder;
    struct Impl;
    explicit Stream(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
  };
  // A Stream keeps the model alive and may outlive the encoder.
  // chunk: encoder frames per chunk; 0: options.stream_chunk, else the config's
  // streaming.chunk_size (c10::ValueError when neither is set, the model cannot stream, or the
  // features are Whisper's, normalised over the whole utterance). History: the config's
  // streaming.num_left_chunks. `source` names the stream in errors.
  Stream stream(int64_t sample_rate, int64_t chunk = 0,
                const std::string& source = "<stream>") const;

  // The CTC head applied to encoder frames [k, D] as a Stream returns them (k may be 0) ->
  // log-probabilities [k, vocab] float32 on the CPU: what encode() gives as log_probs, for live
  // audio. c10::ValueError when the model has no CTC head or is not a Conformer.
  torch::Tensor ctc_log_probs(const torch::Tensor& encoded) const;

  // The model's transducer head (architecture.transducer), for a transducer search; nullptr
  // without one.
  TransducerImpl* transducer() const;

  // Whether the model has an attention decoder (architecture.decoder), and with a right-to-left
  // one.
  bool has_attention_decoder() const;
  bool has_right_to_left_decoder() const;
  // The attention decoder's log-probabilities of each hypothesis (token ids, without <sos/eos>)
  // given one utterance's encoder frames [T', D] (EncodedSpeech::encoded, or a Stream's frames
  // concatenated), as attention rescoring weighs them (AttentionDecoderImpl::score; the right
  // direction when reverse_weight > 0). c10::ValueError without a decoder, for frames of another
  // width or none, or a token outside the vocabulary.
  DecoderScores attention_scores(const torch::Tensor& encoded,
                                 const std::vector<std::vector<int64_t>>& hypotheses,
                                 double reverse_weight) const;

  const ModelConfig& config() const;
  // The dtype the model runs in: the options' dtype, else the config's inference.dtype resolved
  // (api/inference_dtype.h).
  c10::ScalarType dtype() const;
  const std::string& weights_description() const;
  // The fewest feature frames the subsampling turns into one encoder frame.
  int64_t min_feature_frames() const;
  // The period of the encoded frames in ms: the feature shift times the subsampling rate.
  double frame_period_ms() const;

 private:
  // `features` as SpeechFeatures, checked long enough; features_ms counted from `start`.
  SpeechFeatures checked_features(const std::string& source, torch::Tensor features, double seconds,
                                  std::chrono::steady_clock::time_point start) const;
  // One utterance, whose features are known to be long enough, alone.
  EncodedSpeech encode_one(const SpeechFeatures& utterance) const;
  EncodedSpeech encode_file_streaming(const std::string& path) const;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace attnzoo
