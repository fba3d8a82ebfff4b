// The KServe v2 inference protocol's infer messages (the protocol Triton Inference Server, KServe,
// Seldon and TorchServe speak: https://kserve.github.io/website/docs/concepts/architecture/
// data-plane/v2-protocol), with Triton's binary tensor data extension:
//
//   POST /v2/models/{name}/infer
//   {"id": "42", "inputs": [{"name": "pixels", "datatype": "FP32", "shape": [1, 3, 28, 28],
//                            "data": [0.1, ...]}],
//    "outputs": [{"name": "logits", "parameters": {"binary_data": true}}]}
//
// With the binary extension the body is the JSON header (its length in the request's
// Inference-Header-Content-Length) followed by the raw bytes of the inputs whose parameters give
// "binary_data_size", in the order they are listed; a response puts the outputs asked for in
// binary the same way. Raw bytes are little-endian, row-major; a BYTES element is a 4-byte
// little-endian length followed by that many bytes.
//
// This unit is torch-free (a fuzz target parses requests with it): it turns a body into typed
// tensors of raw bytes and validates everything a client controls (names, datatypes, shapes against
// the data, sizes, the binary layout) before anything is allocated from it. What a tensor means to
// a model is served_model.h's business.
#pragma once

#include <attnzoo/core/error.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attnzoo::serve {

// A request that breaks the protocol or a model's contract: answered 400 with the message as
// {"error": "..."}.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

enum class DataType {
  kBool,
  kUint8,
  kUint16,
  kUint32,
  kUint64,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFp16,
  kBf16,
  kFp32,
  kFp64,
  kBytes
};

const char* to_string(DataType type);  // "FP32", ...
std::optional<DataType> parse_datatype(std::string_view name);
// Bytes per element; 0 for BYTES (variable length).
size_t element_size(DataType type);

// A tensor as it travels: its elements' raw bytes (little-endian, row-major; BYTES elements each
// a 4-byte little-endian length and the bytes).
struct Tensor {
  std::string name;
  DataType datatype = DataType::kFp32;
  std::vector<int64_t> shape;
  std::string data;

  int64_t elements() const;  // the product of the shape
  // The BYTES elements; ProtocolError naming the tensor when the layout is broken.
  std::vector<std::string_view> byte_elements() const;
};

// The element count of `shape`, or nullopt for a negative dimension or a count past `max_bytes`
// (what the server would ever allocate).
std::optional<int64_t> element_count(const std::vector<int64_t>& shape, size_t max_bytes);
// ProtocolError naming the tensor unless its data holds exactly `count` elements of its
// datatype (BYTES: in a valid layout).
void check_tensor_data(const Tensor& tensor, int64_t count);

// The elements of a BYTES tensor in the wire layout.
std::string pack_bytes(const std::vector<std::string>& elements);

struct RequestedOutput {
  std::string name;
  std::optional<bool> binary_data;  // the output's "binary_data" parameter
  int64_t class_count = 0;          // Triton's classification extension: the top class_count
};

struct InferRequest {
  std::string id;
  std::vector<Tensor> inputs;
  std::vector<RequestedOutput> outputs;  // empty: every output of the model
  bool binary_data_output = false;       // the request's "binary_data_output" parameter
  std::optional<int64_t> timeout_us;     // the request's "timeout" parameter (Triton's), in µs

  const Tensor* input(std::string_view name) const;  // nullptr when absent
};

// Bounds on what a request may make the server allocate, beyond its body's own size.
struct RequestLimits {
  size_t max_inputs = 64;
  size_t max_outputs = 64;
  size_t max_rank = 8;
  // The decoded tensor data of all inputs together (JSON numbers become 1 to 8 bytes each).
  size_t max_tensor_bytes = 256u << 20;
};

// Parses an infer request body. `json_length`: the Inference-Header-Content-Length header when
// present (the JSON is then the body's first json_length bytes and the rest is binary data).
// ProtocolError for anything malformed, naming the input, key or size at fault.
InferRequest parse_infer_request(std::string_view body, std::optional<size_t> json_length,
                                 const RequestLimits& limits = {});

// One output of a response, and whether it travels as binary data.
struct OutputTensor {
  Tensor tensor;
  bool binary = false;
};

struct InferResponse {
  std::string model_name;
  std::string model_version;
  std::string id;
  std::vector<OutputTensor> outputs;
};

// The body of a response, and the length of its JSON part when binary data follows it (the value
// of the response's Inference-Header-Content-Length header).
struct EncodedResponse {
  std::string body;
  std::optional<size_t> json_length;
};
EncodedResponse encode_infer_response(const InferResponse& response);

// {"error": "<message>"}, the body of every failed request.
std::string error_body(std::string_view message);

}  // namespace attnzoo::serve
