// What the served models of audio share (audio classifiers, speech encoders, speech
// recognizers): their inputs, an audio file as BYTES or a waveform as FP32 at the model's rate,
// read and featurised on the thread that received the request; and a batch of requests'
// utterances encoded in one forward pass, padded to the longest with the padding masked, so that
// each utterance's result equals its own SpeechEncoder::encode(). Each kind says what an
// utterance's encoder output gives (served_model.h has the tensors).
#pragma once

#include <attnzoo/api/speech_encoder.h>
#include <attnzoo/serve/served_model.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace attnzoo::serve {

// A serve config's settings for a model of audio.
struct AudioServing {
  double max_audio_seconds = 60.0;  // the longest audio of a request or a stream
  int64_t stream_chunk = 0;         // encoder frames per chunk of a stream; 0: the config's
};

class ServedAudioModel : public ServedModel {
 public:
  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  std::shared_ptr<BatchJob> prepare(const InferRequest& request, Completion done) const override;
  BatchTiming run(std::vector<std::shared_ptr<BatchJob>>& jobs) const override;

  const SpeechEncoder& encoder() const { return *encoder_; }
  const std::shared_ptr<const SpeechEncoder>& encoder_ptr() const { return encoder_; }
  const AudioServing& serving() const { return serving_; }

 protected:
  // `encoder` may share ownership with the object holding it (AudioClassifier::encoder()).
  ServedAudioModel(std::string name, std::shared_ptr<const SpeechEncoder> encoder,
                   AudioServing serving, std::vector<TensorSpec> outputs,
                   std::set<std::string> classifiable, std::set<std::string> one_utterance);

  // The outputs `asked` for `count` utterances of one request, in order.
  virtual std::vector<OutputTensor> outputs_of(const std::vector<RequestedOutput>& asked,
                                               const EncodedSpeech* utterances,
                                               size_t count) const = 0;

 private:
  std::shared_ptr<const SpeechEncoder> encoder_;
  AudioServing serving_;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
  std::set<std::string> classifiable_;   // outputs Triton's classification extension applies to
  std::set<std::string> one_utterance_;  // outputs whose length varies by utterance

 protected:
  std::string no_stream_reason_;  // why the encoder cannot stream; empty when it can
};

}  // namespace attnzoo::serve
