// A SpeechRecognizer behind the server: audio in, the best text and the whole transcript (tokens
// with times and confidences, the n-best; api/transcript_json.h) out, the CTC search run on each
// utterance of a batch after one forward pass; the /transcribe route (served_model.h has the
// tensors).
#pragma once

#include <attnzoo/api/speech_recognizer.h>
#include <attnzoo/serve/served_audio_model.h>

#include <memory>
#include <string>

namespace attnzoo::serve {

class ServedSpeechRecognizer : public ServedAudioModel {
 public:
  ServedSpeechRecognizer(std::string name, std::shared_ptr<const SpeechRecognizer> recognizer,
                         AudioServing serving);

  const char* kind() const override { return "speech_recognizer"; }
  const char* file_route() const override { return "transcribe"; }
  // /transcribe: {"model", "text", "score", "confidence", "seconds", "tokens": [...], "nbest"}.
  FileCall file_call(std::string file, const std::string& query) const override;
  std::string why_no_stream() const override { return no_stream_reason_; }
  std::shared_ptr<StreamHandler> open_stream(TaskPool& pool,
                                             std::shared_ptr<void> ticket) const override;
  std::unique_ptr<SpeechSequence> open_sequence(int64_t sample_rate,
                                                std::shared_ptr<void> ticket) const override;

  const SpeechRecognizer& recognizer() const { return *recognizer_; }

 private:
  std::vector<OutputTensor> outputs_of(const std::vector<RequestedOutput>& asked,
                                       const EncodedSpeech* utterances,
                                       size_t count) const override;
  std::shared_ptr<const SpeechRecognizer> recognizer_;
};

}  // namespace attnzoo::serve
