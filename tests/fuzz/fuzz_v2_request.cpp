// libFuzzer target: the server's KServe v2 infer request parser (serve/v2_protocol.h) on arbitrary
// bytes. The first byte chooses whether the rest is a JSON body alone or a JSON header of the
// length in the next two bytes followed by binary tensor data (the binary extension). Whatever it
// accepts must be consistent (each input's bytes are its shape's elements of its datatype, BYTES
// elements exactly as many as the shape holds) and must encode back into a response whose JSON
// parses; whatever it refuses must be a ProtocolError.
#include <attnzoo/serve/v2_protocol.h>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnzoo::serve;
  if (size < 3) return 0;
  std::optional<size_t> json_length;
  if (data[0] & 1) json_length = static_cast<size_t>(data[1]) | (static_cast<size_t>(data[2]) << 8);
  const std::string_view body(reinterpret_cast<const char*>(data) + 3, size - 3);
  RequestLimits limits;
  limits.max_tensor_bytes = 1 << 20;
  InferRequest request;
  try {
    request = parse_infer_request(body, json_length, limits);
  } catch (const ProtocolError&) {
    return 0;
  }
  InferResponse response{"m", "1", request.id, {}};
  for (const auto& input : request.inputs) {
    if (input.datatype == DataType::kBytes) {
      if (static_cast<int64_t>(input.byte_elements().size()) != input.elements()) __builtin_trap();
    } else if (input.data.size() !=
               static_cast<size_t>(input.elements()) * element_size(input.datatype)) {
      __builtin_trap();
    }
    response.outputs.push_back({input, false});
    response.outputs.push_back({input, true});
  }
  const auto encoded = encode_infer_response(response);
  const auto header =
      encoded.json_length ? encoded.body.substr(0, *encoded.json_length) : encoded.body;
  if (!nlohmann::json::accept(header)) __builtin_trap();
  return 0;
}
