// The KServe v2 infer messages: JSON and binary tensors in, every malformed request refused with
// the input or key at fault, responses as the protocol and Triton's binary extension lay them
// out. Float16/bfloat16 conversion is checked against LibTorch's c10::Half and c10::BFloat16.
#include <attnzoo/serve/v2_protocol.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace attnzoo::serve {
namespace test_v2_protocol {

using nlohmann::json;

template <typename T>
std::vector<T> values_of(const Tensor& tensor) {
  std::vector<T> values(tensor.data.size() / sizeof(T));
  std::memcpy(values.data(), tensor.data.data(), tensor.data.size());
  return values;
}

template <typename T>
std::string raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

void expect_refused(const std::string& body, const std::string& fragment,
                    std::optional<size_t> json_length = std::nullopt,
                    const RequestLimits& limits = {}) {
  try {
    parse_infer_request(body, json_length, limits);
    ADD_FAILURE() << "accepted: " << body.substr(0, 200);
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << fragment;
  }
}

TEST(V2Protocol, ParsesJsonTensorsOfEveryNumericDatatype) {
  const auto request = parse_infer_request(R"({
    "id": "r1",
    "parameters": {"timeout": 5000, "binary_data_output": true},
    "inputs": [
      {"name": "f32", "datatype": "FP32", "shape": [2, 2], "data": [[1.5, -2], [3, 4.25]]},
      {"name": "f64", "datatype": "FP64", "shape": [1], "data": [0.1]},
      {"name": "i8", "datatype": "INT8", "shape": [3], "data": [-128, 0, 127]},
      {"name": "u16", "datatype": "UINT16", "shape": [2], "data": [0, 65535]},
      {"name": "i64", "datatype": "INT64", "shape": [2], "data": [-9223372036854775808, 9223372036854775807]},
      {"name": "u64", "datatype": "UINT64", "shape": [1], "data": [18446744073709551615]},
      {"name": "b", "datatype": "BOOL", "shape": [2], "data": [true, false]},
      {"name": "s", "datatype": "BYTES", "shape": [2], "data": ["ab", ""]}
    ],
    "outputs": [{"name": "logits", "parameters": {"binary_data": false, "classification": 3}}]
  })",
                                           std::nullopt);
  EXPECT_EQ(request.id, "r1");
  EXPECT_EQ(request.timeout_us, 5000);
  EXPECT_TRUE(request.binary_data_output);
  ASSERT_EQ(request.inputs.size(), 8u);
  EXPECT_EQ(values_of<float>(*request.input("f32")), (std::vector<float>{1.5f, -2, 3, 4.25f}));
  EXPECT_EQ(request.input("f32")->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(values_of<double>(*request.input("f64")), std::vector<double>{0.1});
  EXPECT_EQ(values_of<int8_t>(*request.input("i8")), (std::vector<int8_t>{-128, 0, 127}));
  EXPECT_EQ(values_of<uint16_t>(*request.input("u16")), (std::vector<uint16_t>{0, 65535}));
  EXPECT_EQ(values_of<int64_t>(*request.input("i64")),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(values_of<uint64_t>(*request.input("u64")),
            std::vector<uint64_t>{std::numeric_limits<uint64_t>::max()});
  EXPECT_EQ(values_of<uint8_t>(*request.input("b")), (std::vector<uint8_t>{1, 0}));
  const auto strings = request.input("s")->byte_elements();
  ASSERT_EQ(strings.size(), 2u);
  EXPECT_EQ(strings[0], "ab");
  EXPECT_EQ(strings[1], "");
  ASSERT_EQ(request.outputs.size(), 1u);
  EXPECT_EQ(request.outputs[0].name, "logits");
  EXPECT_EQ(request.outputs[0].binary_data, false);
  EXPECT_EQ(request.outputs[0].class_count, 3);
}

TEST(V2Protocol, HalfAndBfloat16FromJsonRoundAsLibTorch) {
  // Normal, subnormal, overflowing and tie values: the bits must be c10::Half's and
  // c10::BFloat16's (round to nearest even) for every one.
  std::vector<float> values = {0.0f,        -0.0f,       1.0f,     -2.5f,     65504.0f, 65520.0f,
                               1e6f,        6.1e-5f,     5.96e-8f, 2.98e-8f,  1e-10f,   0.333333f,
                               1.00048828f, 1.00146484f, 3.4e38f,  -1.17e-38f};
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> exponent(-30.0f, 20.0f);
  for (int i = 0; i < 2000; ++i) {
    values.push_back((i % 2 ? -1.0f : 1.0f) * std::pow(2.0f, exponent(rng)));
  }
  json data = json::array();
  for (const float v : values) data.push_back(v);
  const json body = {
      {"inputs",
       {{{"name", "h"}, {"datatype", "FP16"}, {"shape", {values.size()}}, {"data", data}},
        {{"name", "b"}, {"datatype", "BF16"}, {"shape", {values.size()}}, {"data", data}}}}};
  const auto request = parse_infer_request(body.dump(), std::nullopt);
  const auto half = values_of<uint16_t>(*request.input("h"));
  const auto bf16 = values_of<uint16_t>(*request.input("b"));
  for (size_t i = 0; i < values.size(); ++i) {
    // JSON carries the float as a double; both sides convert the float nearest to it.
    const float v = static_cast<float>(data[i].get<double>());
    EXPECT_EQ(half[i], c10::Half(v).x) << "FP16 of " << v;
    EXPECT_EQ(bf16[i], c10::BFloat16(v).x) << "BF16 of " << v;
  }
}

TEST(V2Protocol, ParsesBinaryTensorDataInOrder) {
  const std::vector<float> first = {1.0f, 2.0f, 3.0f};
  const std::string second = pack_bytes({"hello", "x"});
  const json header = {{"inputs",
                        {{{"name", "a"},
                          {"datatype", "FP32"},
                          {"shape", {1, 3}},
                          {"parameters", {{"binary_data_size", 12}}}},
                         {{"name", "s"},
                          {"datatype", "BYTES"},
                          {"shape", {2}},
                          {"parameters", {{"binary_data_size", second.size()}}}}}}};
  const std::string text = header.dump();
  const auto request = parse_infer_request(text + raw(first) + second, text.size());
  EXPECT_EQ(values_of<float>(*request.input("a")), first);
  const auto strings = request.input("s")->byte_elements();
  ASSERT_EQ(strings.size(), 2u);
  EXPECT_EQ(strings[0], "hello");
  EXPECT_EQ(strings[1], "x");
}

TEST(V2Protocol, RefusesMalformedRequestsNamingWhatIsWrong) {
  expect_refused("{\"inputs\": [", "malformed request JSON");
  expect_refused("[1, 2]", "must be a JSON object");
  expect_refused("{}", "'inputs' must be an array");
  expect_refused(R"({"inputs": []})", "'inputs' is empty");
  expect_refused(R"({"inputs": [{"datatype": "FP32", "shape": [1], "data": [1]}]})",
                 "inputs[0]: 'name' is missing");
  expect_refused(R"({"inputs": [{"name": "x", "datatype": "FP31", "shape": [1], "data": [1]}]})",
                 "input 'x': unknown datatype 'FP31'");
  expect_refused(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1]}]})",
                 "input 'x': shape [2] holds 2 elements, 'data' has 1");
  expect_refused(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1], "data": [1]}]})",
                 "non-negative integers");
  expect_refused(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": ["a"]}]})",
                 "expected a number, got string");
  expect_refused(R"({"inputs": [{"name": "x", "datatype": "INT8", "shape": [1], "data": [128]}]})",
                 "128 does not fit the datatype");
  expect_refused(R"({"inputs": [{"name": "x", "datatype": "UINT8", "shape": [1], "data": [-1]}]})",
                 "-1 does not fit the datatype");
  expect_refused(R"({"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [1.5]}]})",
                 "expected an integer");
  expect_refused(R"({"inputs": [{"name": "x", "datatype": "BOOL", "shape": [1], "data": [1]}]})",
                 "expected true or false");
  expect_refused(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]},
                                {"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]})",
                 "input 'x' given twice");
  expect_refused(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1]}]})",
                 "has neither 'data' nor parameter 'binary_data_size'");
  expect_refused(
      R"({"id": 3, "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]})",
      "'id' must be a string");
  expect_refused(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}],
                     "outputs": [{"name": "y"}, {"name": "y"}]})",
                 "output 'y' asked for twice");
  // Nesting past the limit is refused while parsing.
  expect_refused("{\"inputs\": " + std::string(100, '[') + std::string(100, ']') + "}",
                 "nests deeper than");
}

TEST(V2Protocol, RefusesBinaryLayoutsThatDoNotAddUp) {
  const auto header = [](size_t size) {
    return json{{"inputs",
                 {{{"name", "a"},
                   {"datatype", "FP32"},
                   {"shape", {2}},
                   {"parameters", {{"binary_data_size", size}}}}}}}
        .dump();
  };
  const std::string eight(8, '\0');
  expect_refused(header(8) + eight, "is more than the body's", header(8).size() + 100);
  expect_refused(header(16) + eight, "binary_data_size 16 runs past the body", header(16).size());
  expect_refused(header(4) + eight, "needs 8 bytes, got 4", header(4).size());
  expect_refused(header(8) + eight + "xx", "2 bytes of binary data that no input",
                 header(8).size());
  // BYTES elements whose lengths run past the data.
  const json bytes = {{"inputs",
                       {{{"name", "s"},
                         {"datatype", "BYTES"},
                         {"shape", {1}},
                         {"parameters", {{"binary_data_size", 6}}}}}}};
  std::string broken = bytes.dump();
  const uint32_t length = 100;
  expect_refused(broken + std::string(reinterpret_cast<const char*>(&length), 4) + "ab",
                 "runs past the data", broken.size());
}

TEST(V2Protocol, BoundsWhatARequestMayMakeTheServerAllocate) {
  RequestLimits limits;
  limits.max_tensor_bytes = 1000;
  expect_refused(
      R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1000000000000, 1000000000000], "data": [1]}]})",
      "larger than the server accepts", std::nullopt, limits);
  json data = json::array();
  for (int i = 0; i < 300; ++i) data.push_back(1.0);
  const json big = {
      {"inputs", {{{"name", "x"}, {"datatype", "FP32"}, {"shape", {300}}, {"data", data}}}}};
  expect_refused(big.dump(), "more data than the server accepts", std::nullopt, limits);
  limits.max_rank = 2;
  expect_refused(
      R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1, 1], "data": [1]}]})",
      "rank 3 is more than 2", std::nullopt, limits);
}

TEST(V2Protocol, EncodesResponsesAsJsonOrBinary) {
  InferResponse response;
  response.model_name = "m";
  response.model_version = "1";
  response.id = "7";
  const std::vector<float> logits = {0.5f, -1.0f};
  OutputTensor json_output{{"logits", DataType::kFp32, {1, 2}, raw(logits)}, false};
  OutputTensor binary_output{{"probs", DataType::kFp32, {1, 2}, raw(logits)}, true};
  OutputTensor text_output{{"top", DataType::kBytes, {1, 1}, pack_bytes({"0.9:3:cat"})}, false};
  response.outputs = {json_output, text_output};
  auto encoded = encode_infer_response(response);
  EXPECT_FALSE(encoded.json_length.has_value());
  const auto parsed = json::parse(encoded.body);
  EXPECT_EQ(parsed["model_name"], "m");
  EXPECT_EQ(parsed["id"], "7");
  EXPECT_EQ(parsed["outputs"][0]["datatype"], "FP32");
  EXPECT_EQ(parsed["outputs"][0]["shape"], json({1, 2}));
  EXPECT_EQ(parsed["outputs"][0]["data"], json({0.5, -1.0}));
  EXPECT_EQ(parsed["outputs"][1]["data"], json({"0.9:3:cat"}));

  response.outputs = {json_output, binary_output};
  encoded = encode_infer_response(response);
  ASSERT_TRUE(encoded.json_length.has_value());
  const auto header = json::parse(encoded.body.substr(0, *encoded.json_length));
  EXPECT_EQ(header["outputs"][1]["parameters"]["binary_data_size"], 8);
  EXPECT_FALSE(header["outputs"][1].contains("data"));
  EXPECT_EQ(encoded.body.substr(*encoded.json_length), raw(logits));
}

TEST(V2Protocol, ErrorBodiesAreJsonEvenForInvalidUtf8) {
  const auto body = json::parse(error_body("bad \xff input \"x\""));
  EXPECT_NE(body["error"].get<std::string>().find("input \"x\""), std::string::npos);
}

}  // namespace test_v2_protocol
}  // namespace attnzoo::serve
