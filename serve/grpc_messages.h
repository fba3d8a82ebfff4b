// The gRPC service's messages (proto/kserve_v2.proto) to and from the server's own: an infer
// request with its tensors (raw_input_contents or typed contents) becomes an InferRequest,
// validated as the HTTP side validates JSON (v2_protocol.h: names, datatypes, shapes against the
// data, sizes), before anything is allocated from it; a response becomes a ModelInferResponse
// with its outputs as raw bytes. Torch-free: a fuzz target feeds it arbitrary messages.
//
// The requests of a ModelStreamInfer stream may form sequences of live audio (Triton's sequence
// parameters): "sequence_id" (int64 > 0 or a non-empty string) names the sequence,
// "sequence_start" opens it (with an optional "sample_rate", Hz; the model's rate otherwise),
// "sequence_end" closes it; each carries audio as a "waveform" FP32 input of shape [n] or
// [1, n] (mono samples in [-1, 1]). grpc_server.h has what the server answers.
#pragma once

#include <attnzoo/serve/v2_protocol.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace inference {
class ModelInferRequest;
class ModelInferResponse;
}  // namespace inference

namespace attnzoo::serve {

// ProtocolError for anything malformed or past `limits`, naming the input, parameter or size.
// The model's name and version are the caller's to read.
InferRequest infer_request_from_proto(const inference::ModelInferRequest& request,
                                      const RequestLimits& limits = {});

// Fills `out` (cleared first) with `response`: every output as raw bytes, in order.
void infer_response_to_proto(const InferResponse& response, inference::ModelInferResponse& out);

struct SequenceControl {
  std::string id;  // empty: the request belongs to no sequence
  bool start = false;
  bool end = false;
  int64_t sample_rate = 0;  // 0: the model's
};
// The request's sequence parameters; ProtocolError for a wrong type or value, for start or end
// without an id, or for a sample_rate outside 1000 to 768000 or away from a start.
SequenceControl sequence_control(const inference::ModelInferRequest& request);

// The samples of a sequence request's "waveform" input (FP32, [n] or [1, n]); ProtocolError
// naming what is wrong. An empty request (no input) is no samples.
std::vector<float> sequence_samples(const InferRequest& request);

// One request of a ModelStreamInfer stream as the server reads it: its sequence parameters, its
// tensors (a sequence's request may have none: the end of the audio), and a sequence's samples.
struct StreamRequest {
  SequenceControl control;
  InferRequest request;
  std::vector<float> samples;  // a sequence's requests only
};
StreamRequest read_stream_request(const inference::ModelInferRequest& request,
                                  const RequestLimits& limits = {});
// The same from the message's wire bytes (what a client sends; the fuzz target's entry):
// ProtocolError when they are not a ModelInferRequest.
StreamRequest read_stream_request(std::string_view wire, const RequestLimits& limits = {});

}  // namespace attnzoo::serve
