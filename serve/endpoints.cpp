#include <attnzoo/serve/endpoints.h>

#include <attnzoo/api/intra_op_threads.h>
#include <attnzoo/configs/model_family.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/core/usable_cores.h>
#include <attnzoo/serve/served_audio_classifier.h>
#include <attnzoo/serve/served_image_classifier.h>
#include <attnzoo/serve/served_speech_encoder.h>
#include <attnzoo/serve/served_speech_recognizer.h>

#include <c10/util/Exception.h>

#include <stdexcept>

namespace attnzoo::serve {
namespace {

// A task's options (ImageClassifierOptions, SpeechEncoderOptions) holding the entry's model
// options, the rest at the task's defaults.
template <class Options>
Options model_options(const ServedModelConfig& m) {
  Options options;
  static_cast<ModelOptions&>(options) = m.options;
  return options;
}

std::shared_ptr<const ServedModel> image_model(const ServedModelConfig& m,
                                               const ModelConfig& model_config,
                                               const std::string& who) {
  const auto& family = model_family(model_config.family);
  if (m.task && *m.task != ServedTask::kClassify) {
    throw std::invalid_argument(who + ": task '" + to_string(*m.task) +
                                "' needs a model of audio; this is a " + model_config.family +
                                " model taking " + input_kind_name(family.input_kind()));
  }
  if (family.num_classes(model_config) == 0) {
    throw std::invalid_argument(who +
                                ": a vision model is served as an image classifier, and this "
                                "one has no classification head (architecture.num_classes is 0)");
  }
  return std::make_shared<ServedImageClassifier>(
      m.name,
      std::make_shared<const ImageClassifier>(m.model, model_options<ImageClassifierOptions>(m)));
}

std::shared_ptr<const ServedModel> audio_model(const ServedModelConfig& m,
                                               const ModelConfig& model_config,
                                               const std::string& who) {
  const auto& family = model_family(model_config.family);
  ServedTask task = ServedTask::kEncode;
  if (m.task) {
    task = *m.task;
  } else if (family.num_classes(model_config) > 0) {
    task = ServedTask::kClassify;
  } else if (family.token_vocab(model_config) > 0 &&
             (!m.units.empty() || model_config.decoding.defined())) {
    task = ServedTask::kTranscribe;
  }
  auto options = model_options<SpeechEncoderOptions>(m);
  options.read.max_seconds = m.max_audio_seconds;
  const AudioServing serving{m.max_audio_seconds, m.stream_chunk};
  try {
    if (task == ServedTask::kClassify) {
      return std::make_shared<ServedAudioClassifier>(
          m.name, std::make_shared<const AudioClassifier>(m.model, options), serving);
    }
    if (task == ServedTask::kTranscribe) {
      SpeechRecognizerOptions recognizer;
      recognizer.encoder = options;
      recognizer.units = m.units;
      return std::make_shared<ServedSpeechRecognizer>(
          m.name, std::make_shared<const SpeechRecognizer>(m.model, recognizer), serving);
    }
    return std::make_shared<ServedSpeechEncoder>(
        m.name, std::make_shared<const SpeechEncoder>(m.model, options), serving);
  } catch (const c10::Error& e) {
    throw std::invalid_argument(who + ": task '" + to_string(task) +
                                "': " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw std::invalid_argument(who + ": task '" + to_string(task) + "': " + e.what());
  }
}

}  // namespace

ModelEndpoint load_endpoint(const ServedModelConfig& m, const ServeConfig& config) {
  const auto model_config = resolve_model_config(m.model, m.options.overrides);
  const std::string who = config.source + ": model '" + m.name + "' (" + m.model + ")";
  ModelEndpoint endpoint;
  endpoint.model = model_family(model_config.family).input_kind() == InputKind::kImages
                       ? image_model(m, model_config, who)
                       : audio_model(m, model_config, who);
  endpoint.batching.dynamic = m.dynamic_batching;
  endpoint.batching.max_batch_size = m.max_batch_size;
  endpoint.batching.max_queue_delay_us = m.max_queue_delay_us;
  endpoint.batching.max_queue_size = m.max_queue_size;
  // Each instance's thread runs its forward passes on `threads` LibTorch threads: a team of its
  // own, or none for one thread (api/intra_op_threads.h).
  const auto shape = instance_shape(m, config, usable_cores());
  endpoint.batching.instances = shape.instances;
  endpoint.batching.instance_start = [threads = static_cast<int>(shape.threads)] {
    use_intra_op_threads(threads);
  };
  endpoint.threads = shape.threads;
  endpoint.default_timeout_us = m.default_timeout_us;
  endpoint.max_streams = m.max_streams;
  return endpoint;
}

std::vector<ModelEndpoint> load_endpoints(const ServeConfig& config) {
  std::vector<ModelEndpoint> endpoints;
  for (const auto& m : config.models) endpoints.push_back(load_endpoint(m, config));
  return endpoints;
}

}  // namespace attnzoo::serve
