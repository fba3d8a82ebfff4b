// An AudioClassifier behind the server: audio in, logits and probabilities out, with Triton's
// classification extension and the /classify route (served_model.h has the tensors).
#pragma once

#include <attnzoo/api/audio_classifier.h>
#include <attnzoo/serve/served_audio_model.h>

#include <memory>
#include <string>

namespace attnzoo::serve {

class ServedAudioClassifier : public ServedAudioModel {
 public:
  ServedAudioClassifier(std::string name, std::shared_ptr<const AudioClassifier> classifier,
                        AudioServing serving);

  const char* kind() const override { return "audio_classifier"; }
  const char* file_route() const override { return "classify"; }
  FileCall file_call(std::string file, const std::string& query) const override;

 private:
  std::vector<OutputTensor> outputs_of(const std::vector<RequestedOutput>& asked,
                                       const EncodedSpeech* utterances,
                                       size_t count) const override;
  std::shared_ptr<const AudioClassifier> classifier_;
};

}  // namespace attnzoo::serve
