#include <attnzoo/api/audio_classifier.h>

#include <attnzoo/configs/registry.h>

#include <c10/util/Exception.h>

namespace attnzoo {

struct AudioClassifier::State {
  SpeechEncoder encoder;
  std::vector<std::string> labels;
};

bool is_audio_classifier(const ModelConfig& config) {
  const auto& family = model_family(config.family);
  return family.input_kind() == InputKind::kAudioFeatures && config.features.has_value() &&
         family.num_classes(config) > 0;
}

namespace {

SpeechEncoder checked_encoder(const std::string& model, AudioClassifierOptions options) {
  // Checked before the weights load, so that a wrong config fails fast and says why.
  const auto config = resolve_model_config(model, options.overrides);
  const auto& family = model_family(config.family);
  TORCH_CHECK_VALUE(family.input_kind() == InputKind::kAudioFeatures,
                    "AudioClassifier: ", config.source, " is a ", config.family,
                    " model, which takes ", input_kind_name(family.input_kind()),
                    "; an audio classifier needs audio");
  TORCH_CHECK_VALUE(family.num_classes(config) > 0, "AudioClassifier: ", config.source,
                    " has no classification head (architecture.num_classes is 0)");
  return SpeechEncoder(model, std::move(options));
}

}  // namespace

AudioClassifier::AudioClassifier(const std::string& model, AudioClassifierOptions options)
    : state_(std::make_unique<State>(State{checked_encoder(model, std::move(options)), {}})) {
  const auto& config = state_->encoder.config();
  state_->labels = load_labels(config.labels, model_family(config.family).num_classes(config));
}

AudioClassifier::~AudioClassifier() = default;
AudioClassifier::AudioClassifier(AudioClassifier&&) noexcept = default;
AudioClassifier& AudioClassifier::operator=(AudioClassifier&&) noexcept = default;

const ModelConfig& AudioClassifier::config() const { return state_->encoder.config(); }
const std::vector<std::string>& AudioClassifier::labels() const { return state_->labels; }
const std::string& AudioClassifier::weights_description() const {
  return state_->encoder.weights_description();
}
const SpeechEncoder& AudioClassifier::encoder() const { return state_->encoder; }

std::vector<Prediction> AudioClassifier::classify(const std::string& path, int64_t topk) const {
  check_topk("AudioClassifier", topk);
  return top_predictions(state_->encoder.encode(path).logits, topk, state_->labels);
}

std::vector<Prediction> AudioClassifier::classify(const torch::Tensor& samples, int64_t sample_rate,
                                                  int64_t topk) const {
  check_topk("AudioClassifier", topk);
  return top_predictions(state_->encoder.encode_waveform(samples, sample_rate).logits, topk,
                         state_->labels);
}

std::vector<AudioResult> AudioClassifier::classify(const std::vector<std::string>& paths,
                                                   int64_t topk) const {
  check_topk("AudioClassifier", topk);
  const auto encoded = state_->encoder.encode(paths);
  std::vector<AudioResult> results(encoded.size());
  for (size_t i = 0; i < encoded.size(); ++i) {
    auto& r = results[i];
    const auto& e = encoded[i];
    r.audio = e.audio.empty() ? paths[i] : e.audio;
    r.error = e.error;
    if (!e.ok()) continue;
    r.seconds = e.seconds;
    r.encode_ms = e.encode_ms;
    r.top = top_predictions(e.logits, topk, state_->labels);
  }
  return results;
}

}  // namespace attnzoo
