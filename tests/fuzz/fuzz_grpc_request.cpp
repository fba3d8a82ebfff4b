// libFuzzer target: a gRPC ModelInferRequest as the server reads it (serve/grpc_messages.h), from
// arbitrary wire bytes: protobuf's parser, the tensors from raw or typed contents against their
// shapes and limits, the sequence parameters and a sequence's samples. Whatever it accepts must
// be consistent (each input's bytes are its shape's elements of its datatype; BYTES elements
// exactly as many as the shape holds; a sequence's samples whole float32s; start or end only
// with an id) and must encode back into a response; whatever it refuses must be a
// ProtocolError.
#include <attnzoo/serve/grpc_messages.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnzoo::serve;
  RequestLimits limits;
  limits.max_tensor_bytes = 1 << 20;
  StreamRequest read;
  try {
    read = read_stream_request(std::string_view(reinterpret_cast<const char*>(data), size), limits);
  } catch (const ProtocolError&) {
    return 0;
  }
  if (read.control.id.empty() && (read.control.start || read.control.end)) __builtin_trap();
  size_t total = 0;
  InferResponse response{"m", "1", read.request.id, {}};
  for (const auto& input : read.request.inputs) {
    total += input.data.size();
    if (input.datatype == DataType::kBytes) {
      if (static_cast<int64_t>(input.byte_elements().size()) != input.elements()) __builtin_trap();
    } else if (input.data.size() !=
               static_cast<size_t>(input.elements()) * element_size(input.datatype)) {
      __builtin_trap();
    }
    response.outputs.push_back({input, true});
  }
  if (total > limits.max_tensor_bytes) __builtin_trap();
  if (!read.control.id.empty()) {
    size_t waveform = 0;
    for (const auto& input : read.request.inputs) waveform += input.data.size() / sizeof(float);
    if (read.samples.size() != waveform) __builtin_trap();
  }
  encode_infer_response(response);
  return 0;
}
