// Audio classification in one object: a model of audio of the zoo (a Conformer, an AST; or any
// YAML config) whose architecture declares a classification head (num_classes > 0), its weights,
// the audio frontend of its `features:` section and its labels. ImageClassifier's counterpart for
// sound.
//
//   attnzoo::AudioClassifierOptions options;
//   options.weights = "assets/weights/conformer_kws.safetensors";
//   attnzoo::AudioClassifier classifier("conformer_kws", options);
//   for (const auto& p : classifier.classify("yes.wav", 3))
//     std::cout << p.label << " " << p.probability << "\n";
//
// Built on SpeechEncoder: the same audio reading (any libsndfile format, resampled to the
// model's rate), features and model; the head reads the model's outputs. Inference runs
// under torch::InferenceMode: one classifier may be used from several threads at once. Errors
// name the file, option or key: AudioError for audio, ConfigError for configs, CheckpointError
// for weights, c10::Error for options.
#pragma once

#include <attnzoo/api/prediction.h>
#include <attnzoo/api/speech_encoder.h>

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

namespace attnzoo {

// The encoder's options (weights, format, overrides, device, dtype, threads, audio reading,
// batch_size); stream_chunk > 0 classifies through the streaming path.
using AudioClassifierOptions = SpeechEncoderOptions;

// One file of classify(paths): its predictions, or the error that stopped it.
struct AudioResult {
  std::string audio;
  std::vector<Prediction> top;
  double seconds = 0.0;    // the audio's duration
  double encode_ms = 0.0;  // features, encoder and head, wall time (a batch's shared by frames)
  std::string error;       // empty on success
  bool ok() const { return error.empty(); }
};

class AudioClassifier {
 public:
  // `model`: a registered name or a YAML file of a family of audio (conformer, ast) with a
  // features section and architecture.num_classes > 0.
  explicit AudioClassifier(const std::string& model, AudioClassifierOptions options = {});
  ~AudioClassifier();
  AudioClassifier(AudioClassifier&&) noexcept;
  AudioClassifier& operator=(AudioClassifier&&) noexcept;

  // The top `topk` classes (>= 1; clamped to the classes), most probable first.
  std::vector<Prediction> classify(const std::string& path, int64_t topk = 5) const;
  // A mono waveform in [-1, 1] at `sample_rate` (resampled to the model's rate).
  std::vector<Prediction> classify(const torch::Tensor& samples, int64_t sample_rate,
                                   int64_t topk = 5) const;
  // Every file, in batches of options.batch_size (padded, masked: equal to one at a time); a
  // file that fails gets its error and the others are still classified.
  std::vector<AudioResult> classify(const std::vector<std::string>& paths, int64_t topk = 5) const;

  const ModelConfig& config() const;
  const std::vector<std::string>& labels() const;  // one per class; empty if none configured
  const std::string& weights_description() const;
  const SpeechEncoder& encoder() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Whether `config` is an audio classifier: a model of audio, a features section, num_classes > 0.
bool is_audio_classifier(const ModelConfig& config);

}  // namespace attnzoo
