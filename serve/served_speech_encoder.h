// A SpeechEncoder behind the server: audio in; the encoder's frames, their mean (an utterance
// embedding) and, with a CTC head, the CTC log-probabilities out; the /encode route
// (served_model.h has the tensors).
#pragma once

#include <attnzoo/api/speech_encoder.h>
#include <attnzoo/serve/served_audio_model.h>

#include <memory>
#include <string>

namespace attnzoo::serve {

class ServedSpeechEncoder : public ServedAudioModel {
 public:
  ServedSpeechEncoder(std::string name, std::shared_ptr<const SpeechEncoder> encoder,
                      AudioServing serving);

  const char* kind() const override { return "speech_encoder"; }
  const char* file_route() const override { return "encode"; }
  // /encode[?encoded=1]: {"model", "seconds", "frames", "frame_ms", "embedding": [D]} and, with
  // encoded=1, "encoded": [frames][D].
  FileCall file_call(std::string file, const std::string& query) const override;
  std::string why_no_stream() const override { return no_stream_reason_; }
  std::shared_ptr<StreamHandler> open_stream(TaskPool& pool,
                                             std::shared_ptr<void> ticket) const override;
  std::unique_ptr<SpeechSequence> open_sequence(int64_t sample_rate,
                                                std::shared_ptr<void> ticket) const override;

 private:
  std::vector<OutputTensor> outputs_of(const std::vector<RequestedOutput>& asked,
                                       const EncodedSpeech* utterances,
                                       size_t count) const override;
};

}  // namespace attnzoo::serve
