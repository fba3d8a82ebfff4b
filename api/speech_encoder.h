// Speech encoding in one object: a Conformer of the zoo (or any YAML config) with its weights and
// the audio frontend its `features:` section describes (preprocess/: libsndfile, libsoxr, Kaldi
// fbank or Whisper log-mel).
//
//   attnzoo::SpeechEncoderOptions options;
//   options.weights = "wenet_final.safetensors";
//   attnzoo::SpeechEncoder encoder("wenet_conformer_librispeech", options);
//   auto u = encoder.encode("speech.flac");  // u.encoded [T', D], u.embedding [D], u.log_probs
//
// Inference runs under torch::InferenceMode on a model in eval mode: one encoder may be used from
// several threads at once. Errors name the file, option or key.
#pragma once

#include "configs/model_config.h"
#include "preprocess/audio_read.h"

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

namespace attnzoo {

struct SpeechEncoderOptions {
  std::string weights;                 // safetensors checkpoint; empty: random weights (seed 0)
  std::string format;                  // checkpoint layout; empty: the config's, else detected
  std::vector<std::string> overrides;  // key.path=value, as the CLI's --set
  std::string device = "cpu";          // cpu | cuda | cuda:N
  std::string dtype = "fp32";          // fp32 | bf16 | fp16
  int threads = 0;                     // LibTorch intra-op threads, process-wide; 0: unchanged
  AudioReadOptions read;               // channel choice, length limit
  // > 0: encode chunk by chunk through the streaming caches (ConformerStream) in chunks of this
  // many encoder frames, with the config's streaming.num_left_chunks; the model must stream.
  // 0: the offline forward (with the config's streaming chunk mask, if any).
  int64_t stream_chunk = 0;
};

// One utterance: its encoder frames and what follows from them, or the error that stopped it.
struct EncodedSpeech {
  std::string audio;        // the file (or source name)
  torch::Tensor encoded;    // [T', D] float32 on the CPU
  torch::Tensor embedding;  // [D]: the mean over the frames
  torch::Tensor log_probs;  // [T', vocab] CTC log-probabilities; undefined without a CTC head
  double seconds = 0.0;     // the audio's duration
  int64_t feature_frames = 0;
  double encode_ms = 0.0;  // features and encoder, wall time
  std::string error;       // empty on success
  bool ok() const { return error.empty(); }
};

class SpeechEncoder {
 public:
  // `model`: a registered name or a YAML file of family conformer with a features section.
  explicit SpeechEncoder(const std::string& model, SpeechEncoderOptions options = {});
  ~SpeechEncoder();
  SpeechEncoder(SpeechEncoder&&) noexcept;
  SpeechEncoder& operator=(SpeechEncoder&&) noexcept;

  // Throws AudioError naming the file (unreadable, too short for the subsampling, ...).
  EncodedSpeech encode(const std::string& path) const;
  // A mono waveform in [-1, 1] at `sample_rate` (resampled to the model's rate).
  EncodedSpeech encode_waveform(const torch::Tensor& samples, int64_t sample_rate,
                                const std::string& source = "<waveform>") const;
  // Every file; a file that fails gets its error and the others are still encoded.
  std::vector<EncodedSpeech> encode(const std::vector<std::string>& paths) const;

  const ModelConfig& config() const;
  const std::string& weights_description() const;
  // The fewest feature frames the subsampling turns into one encoder frame.
  int64_t min_feature_frames() const;

 private:
  EncodedSpeech encode_features(torch::Tensor features, const std::string& source,
                                double seconds) const;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace attnzoo
