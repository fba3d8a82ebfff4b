// A model of the zoo as the server offers it: its v2 metadata (the input and output tensors, by
// name, datatype and shape), how one request becomes a job for the dynamic batcher (decoding and
// preprocessing, on the thread that received the request), and how a batch of jobs runs through
// the model in one forward pass, each job then completed with its own rows of the outputs.
//
// The tensors each kind of model takes and gives (shapes without the batch dimension, which every
// request puts first; -1: any length):
//
//   image classifier   in:  image BYTES [1] (an encoded image file: JPEG, PNG, ...) or
//                           pixels FP32 [3, H, W] (already transformed as the config says)
//                      out: logits FP32 [C], probabilities FP32 [C]
//   audio classifier   in:  audio BYTES [1] (an audio file: WAV, FLAC, ...) or
//                           waveform FP32 [-1] (mono samples in [-1, 1] at the model's rate)
//                      out: logits FP32 [C], probabilities FP32 [C]
//   speech encoder     in:  as the audio classifier
//                      out: encoded FP32 [-1, D], embedding FP32 [D], log_probs FP32 [-1, V]
//                           (with a CTC head)
//   speech recognizer  in:  as the audio classifier
//                      out: text BYTES [1], transcript BYTES [1] (JSON: tokens with times and
//                           confidence, the n-best; api/transcript_json.h)
//
// encoded and log_probs differ in length from one utterance to the next: a request asking for
// them holds one utterance (the dynamic batcher still runs many requests in one pass).
//
// An output asked for with Triton's classification parameter (class_count k) comes back as BYTES
// [k] of "value:index:label" strings, most probable first.
#pragma once

#include <attnzoo/serve/dynamic_batcher.h>
#include <attnzoo/serve/http_server.h>
#include <attnzoo/serve/task_pool.h>
#include <attnzoo/serve/v2_protocol.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attnzoo::serve {

struct TensorSpec {
  std::string name;
  DataType datatype;
  std::vector<int64_t> dims;  // without the batch dimension; -1 for any length
};

// How a request ended: its outputs, or why not. `status` is the HTTP status the v2 routes answer.
struct InferOutcome {
  int status = 200;
  std::string error;
  FailureReason reason = FailureReason::kBackend;  // when status != 200
  std::vector<OutputTensor> outputs;
  bool ok() const { return status == 200; }
};

using Completion = std::function<void(InferOutcome)>;

// What a file posted to a model's file route (/v2/models/{m}/classify, /encode, /transcribe)
// becomes: the inference request it makes, and the JSON body its outputs answer.
struct FileCall {
  InferRequest request;
  std::function<std::string(const std::vector<OutputTensor>& outputs)> answer;
};

// One utterance of live audio, pushed as it arrives (the gRPC service's sequences): what the
// model has to say after each piece, and at the end. Not thread-safe: one piece at a time.
class SpeechSequence {
 public:
  virtual ~SpeechSequence() = default;
  // Mono samples in [-1, 1] at the sequence's rate: the outputs they give now, none when nothing
  // changed (a recognizer: "text" and "stable" BYTES [1, 1] when the best text changed; an
  // encoder: "encoded" FP32 [1, k, D], the k new frames). ProtocolError past max_audio_seconds.
  virtual std::vector<OutputTensor> push(const float* samples, size_t count) = 0;
  // The end of the audio: a recognizer's "text" and "transcript" BYTES [1, 1], an encoder's last
  // "encoded" frames.
  virtual std::vector<OutputTensor> finish() = 0;
};

class ServedModel {
 public:
  virtual ~ServedModel() = default;

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  // "image_classifier", "audio_classifier", "speech_encoder", "speech_recognizer".
  virtual const char* kind() const = 0;
  virtual const std::vector<TensorSpec>& inputs() const = 0;
  virtual const std::vector<TensorSpec>& outputs() const = 0;
  // The route a person posts a file to: "classify", "encode" or "transcribe".
  virtual const char* file_route() const = 0;
  // The call a posted file makes; `query` is the URL's query string ("top=3"). ProtocolError for
  // a query parameter it does not take or a bad value.
  virtual FileCall file_call(std::string file, const std::string& query) const = 0;

  // A job of request's rows whose completion calls `done` (exactly once, from any thread).
  // ProtocolError when the request does not fit the model: no usable input, a wrong datatype or
  // shape, an unreadable image or audio file, an unknown output.
  virtual std::shared_ptr<BatchJob> prepare(const InferRequest& request, Completion done) const = 0;
  // Runs jobs that this model prepared, in one forward pass where it can, and completes each.
  virtual BatchTiming run(std::vector<std::shared_ptr<BatchJob>>& jobs) const = 0;

  // Live audio over a WebSocket (speech_stream.h): empty when the model streams, else why not.
  virtual std::string why_no_stream() const {
    return std::string("a ") + kind() + " does not stream";
  }
  // A new stream, its chunks run on `pool`; `ticket` is released with it. Null when
  // why_no_stream() is not empty.
  virtual std::shared_ptr<StreamHandler> open_stream(TaskPool& /*pool*/,
                                                     std::shared_ptr<void> /*ticket*/) const {
    return nullptr;
  }
  // A sequence of live audio at `sample_rate` Hz; `ticket` is released with it. Null when
  // why_no_stream() is not empty.
  virtual std::unique_ptr<SpeechSequence> open_sequence(int64_t /*sample_rate*/,
                                                        std::shared_ptr<void> /*ticket*/) const {
    return nullptr;
  }

 protected:
  ServedModel(std::string name, std::string version)
      : name_(std::move(name)), version_(std::move(version)) {}

 private:
  std::string name_;
  std::string version_;
};

}  // namespace attnzoo::serve
