#include <attnzoo/serve/speech_sequence.h>

#include <attnzoo/api/transcript_json.h>

#include <torch/torch.h>

#include <cstring>
#include <optional>

namespace attnzoo::serve {
namespace {

OutputTensor bytes_output(const std::string& name, const std::string& value) {
  OutputTensor out;
  out.tensor.name = name;
  out.tensor.datatype = DataType::kBytes;
  out.tensor.shape = {1, 1};
  out.tensor.data = pack_bytes({value});
  return out;
}

// Encoder frames [k, D] as "encoded" FP32 [1, k, D].
OutputTensor frames_output(const torch::Tensor& frames) {
  const auto values = frames.to(torch::kFloat).contiguous();
  OutputTensor out;
  out.tensor.name = "encoded";
  out.tensor.datatype = DataType::kFp32;
  out.tensor.shape = {1, values.size(0), values.size(1)};
  out.tensor.data.assign(reinterpret_cast<const char*>(values.data_ptr<float>()),
                         static_cast<size_t>(values.numel()) * sizeof(float));
  return out;
}

// What both sequences share: the audio's length against its bound, and the samples as a tensor.
class AudioBudget {
 public:
  AudioBudget(int64_t sample_rate, double max_audio_seconds)
      : sample_rate_(sample_rate), max_audio_seconds_(max_audio_seconds) {}

  torch::Tensor take(const float* samples, size_t count) {
    samples_ += static_cast<int64_t>(count);
    if (static_cast<double>(samples_) / static_cast<double>(sample_rate_) > max_audio_seconds_) {
      throw ProtocolError("the sequence is longer than max_audio_seconds (" +
                          std::to_string(max_audio_seconds_) + " s)");
    }
    auto tensor = torch::empty({static_cast<int64_t>(count)}, torch::kFloat);
    if (count > 0) std::memcpy(tensor.data_ptr<float>(), samples, count * sizeof(float));
    return tensor;
  }

 private:
  int64_t sample_rate_;
  double max_audio_seconds_;
  int64_t samples_ = 0;
};

class RecognizerSequence : public SpeechSequence {
 public:
  RecognizerSequence(std::shared_ptr<const SpeechRecognizer> recognizer, int64_t sample_rate,
                     double max_audio_seconds, int64_t chunk, std::shared_ptr<void> ticket)
      : recognizer_(std::move(recognizer)),
        rate_(sample_rate > 0 ? sample_rate : recognizer_->config().features->sample_rate),
        budget_(rate_, max_audio_seconds),
        stream_(recognizer_->stream(rate_, chunk, "sequence")),
        ticket_(std::move(ticket)) {}

  std::vector<OutputTensor> push(const float* samples, size_t count) override {
    const auto partial = stream_->push(budget_.take(samples, count));
    if (partial.best.text.empty() || partial.best.text == last_text_) return {};
    last_text_ = partial.best.text;
    return {bytes_output("text", partial.best.text), bytes_output("stable", partial.stable.text)};
  }

  std::vector<OutputTensor> finish() override {
    const auto transcript = stream_->finish();
    if (!transcript.ok()) throw std::runtime_error(transcript.error);
    return {bytes_output("text", transcript.best().text),
            bytes_output("transcript", transcript_json(transcript))};
  }

 private:
  std::shared_ptr<const SpeechRecognizer> recognizer_;
  int64_t rate_;
  AudioBudget budget_;
  std::optional<SpeechRecognizer::Stream> stream_;
  std::shared_ptr<void> ticket_;
  std::string last_text_;
};

class EncoderSequence : public SpeechSequence {
 public:
  EncoderSequence(std::shared_ptr<const SpeechEncoder> encoder, int64_t sample_rate,
                  double max_audio_seconds, int64_t chunk, std::shared_ptr<void> ticket)
      : encoder_(std::move(encoder)),
        rate_(sample_rate > 0 ? sample_rate : encoder_->config().features->sample_rate),
        budget_(rate_, max_audio_seconds),
        stream_(encoder_->stream(rate_, chunk, "sequence")),
        ticket_(std::move(ticket)) {}

  std::vector<OutputTensor> push(const float* samples, size_t count) override {
    const auto frames = stream_->push(budget_.take(samples, count));
    if (frames.size(0) == 0) return {};
    return {frames_output(frames)};
  }

  std::vector<OutputTensor> finish() override { return {frames_output(stream_->finish())}; }

 private:
  std::shared_ptr<const SpeechEncoder> encoder_;
  int64_t rate_;
  AudioBudget budget_;
  std::optional<SpeechEncoder::Stream> stream_;
  std::shared_ptr<void> ticket_;
};

}  // namespace

std::unique_ptr<SpeechSequence> recognizer_sequence(
    std::shared_ptr<const SpeechRecognizer> recognizer, int64_t sample_rate,
    double max_audio_seconds, int64_t chunk, std::shared_ptr<void> ticket) {
  return std::make_unique<RecognizerSequence>(std::move(recognizer), sample_rate, max_audio_seconds,
                                              chunk, std::move(ticket));
}

std::unique_ptr<SpeechSequence> encoder_sequence(std::shared_ptr<const SpeechEncoder> encoder,
                                                 int64_t sample_rate, double max_audio_seconds,
                                                 int64_t chunk, std::shared_ptr<void> ticket) {
  return std::make_unique<EncoderSequence>(std::move(encoder), sample_rate, max_audio_seconds,
                                           chunk, std::move(ticket));
}

}  // namespace attnzoo::serve
