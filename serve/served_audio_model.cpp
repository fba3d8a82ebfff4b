#include <attnzoo/serve/served_audio_model.h>

#include <attnzoo/serve/model_job.h>

#include <torch/torch.h>

#include <cmath>

namespace attnzoo::serve {
namespace {

struct AudioJob : ModelJob {
  using ModelJob::ModelJob;
  std::vector<SpeechFeatures> utterances;
};

}  // namespace

ServedAudioModel::ServedAudioModel(std::string name, std::shared_ptr<const SpeechEncoder> encoder,
                                   AudioServing serving, std::vector<TensorSpec> outputs,
                                   std::set<std::string> classifiable,
                                   std::set<std::string> one_utterance)
    : ServedModel(std::move(name), "1"),
      encoder_(std::move(encoder)),
      serving_(serving),
      inputs_{{"audio", DataType::kBytes, {1}}, {"waveform", DataType::kFp32, {-1}}},
      outputs_(std::move(outputs)),
      classifiable_(std::move(classifiable)),
      one_utterance_(std::move(one_utterance)) {
  try {
    encoder_->stream(encoder_->config().features->sample_rate, serving_.stream_chunk);
  } catch (const c10::Error& e) {
    no_stream_reason_ = e.what_without_backtrace();
  }
}

std::shared_ptr<BatchJob> ServedAudioModel::prepare(const InferRequest& request,
                                                    Completion done) const {
  const Tensor* audio = request.input("audio");
  const Tensor* waveform = request.input("waveform");
  const int64_t rate = encoder_->config().features->sample_rate;
  if ((audio == nullptr) == (waveform == nullptr) || request.inputs.size() != 1) {
    throw ProtocolError("model '" + name() +
                        "' takes one input: 'audio' (BYTES [N, 1], audio files) or 'waveform' "
                        "(FP32 [N, samples], mono in [-1, 1] at " +
                        std::to_string(rate) + " Hz)");
  }
  // The outputs first: a request asking for one the model does not give is refused before its
  // audio is decoded.
  auto outputs = resolve_outputs(request, outputs_, classifiable_);
  std::vector<SpeechFeatures> utterances;
  const auto featurise = [&](const std::string& source, const auto& make) {
    try {
      utterances.push_back(make());
    } catch (const Error& e) {
      throw ProtocolError(e.what());
    } catch (const c10::Error& e) {
      throw ProtocolError(source + ": " + e.what_without_backtrace());
    }
  };
  if (audio != nullptr) {
    if (audio->datatype != DataType::kBytes || audio->shape.empty() || audio->shape[0] < 1 ||
        audio->elements() != audio->shape[0]) {
      throw ProtocolError("input 'audio' must be BYTES [N] or [N, 1] with N >= 1, got " +
                          std::string(to_string(audio->datatype)) + " " + shape_text(audio->shape));
    }
    const auto files = audio->byte_elements();
    for (size_t i = 0; i < files.size(); ++i) {
      const std::string source = "input 'audio'[" + std::to_string(i) + "]";
      featurise(source, [&] {
        return encoder_->features_from_memory(files[i].data(), files[i].size(), source);
      });
    }
  } else {
    if (waveform->datatype != DataType::kFp32 || waveform->shape.size() != 2 ||
        waveform->shape[0] < 1 || waveform->shape[1] < 1) {
      throw ProtocolError("input 'waveform' must be FP32 [N, samples] with N, samples >= 1, got " +
                          std::string(to_string(waveform->datatype)) + " " +
                          shape_text(waveform->shape));
    }
    const double seconds = static_cast<double>(waveform->shape[1]) / static_cast<double>(rate);
    if (seconds > serving_.max_audio_seconds) {
      throw ProtocolError("input 'waveform': " + std::to_string(waveform->shape[1]) +
                          " samples are " + std::to_string(seconds) + " s at " +
                          std::to_string(rate) + " Hz, more than max_audio_seconds " +
                          std::to_string(serving_.max_audio_seconds));
    }
    const auto rows = fp32_input(*waveform);
    for (int64_t i = 0; i < rows.size(0); ++i) {
      const std::string source = "input 'waveform'[" + std::to_string(i) + "]";
      featurise(source, [&] { return encoder_->waveform_features(rows[i], rate, source); });
    }
  }
  if (utterances.size() > 1) {
    for (const auto& asked : outputs) {
      if (one_utterance_.count(asked.name) != 0) {
        throw ProtocolError("output '" + asked.name +
                            "' differs in length from one utterance to the next: a request "
                            "asking for it holds one utterance, this one holds " +
                            std::to_string(utterances.size()));
      }
    }
  }
  auto job = std::make_shared<AudioJob>(std::move(outputs), std::move(done),
                                        static_cast<int64_t>(utterances.size()));
  job->utterances = std::move(utterances);
  return job;
}

BatchTiming ServedAudioModel::run(std::vector<std::shared_ptr<BatchJob>>& jobs) const {
  BatchTiming timing;
  try {
    auto start = Clock::now();
    std::vector<SpeechFeatures> all;
    for (auto& job : jobs) {
      for (auto& u : static_cast<AudioJob&>(*job).utterances) all.push_back(std::move(u));
    }
    timing.input_us = microseconds_between(start, Clock::now());
    start = Clock::now();
    const auto encoded = encoder_->encode_features(all);
    timing.infer_us = microseconds_between(start, Clock::now());
    start = Clock::now();
    size_t first = 0;
    for (auto& job : jobs) {
      auto& audio_job = static_cast<AudioJob&>(*job);
      const auto count = static_cast<size_t>(audio_job.rows());
      InferOutcome outcome;
      try {
        outcome.outputs = outputs_of(audio_job.outputs, encoded.data() + first, count);
      } catch (const std::exception& e) {
        outcome.status = 500;
        outcome.reason = FailureReason::kBackend;
        outcome.error = e.what();
      }
      first += count;
      audio_job.complete(std::move(outcome));
    }
    timing.output_us = microseconds_between(start, Clock::now());
  } catch (const std::exception& e) {
    for (auto& job : jobs) job->fail(FailureReason::kBackend, e.what());
  }
  return timing;
}

}  // namespace attnzoo::serve
