#include <attnzoo/serve/v2_protocol.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace attnzoo::serve {
namespace {

using nlohmann::json;

// JSON deeper than this is refused while parsing: a request nests four levels, plus a tensor's
// rank for nested data.
constexpr int kMaxJsonDepth = 32;

struct TypeInfo {
  DataType type;
  const char* name;
  size_t size;
};
constexpr TypeInfo kTypes[] = {
    {DataType::kBool, "BOOL", 1},     {DataType::kUint8, "UINT8", 1},
    {DataType::kUint16, "UINT16", 2}, {DataType::kUint32, "UINT32", 4},
    {DataType::kUint64, "UINT64", 8}, {DataType::kInt8, "INT8", 1},
    {DataType::kInt16, "INT16", 2},   {DataType::kInt32, "INT32", 4},
    {DataType::kInt64, "INT64", 8},   {DataType::kFp16, "FP16", 2},
    {DataType::kBf16, "BF16", 2},     {DataType::kFp32, "FP32", 4},
    {DataType::kFp64, "FP64", 8},     {DataType::kBytes, "BYTES", 0},
};

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// IEEE binary16 and bfloat16 from float32, rounding to nearest even.
uint16_t to_bf16(float value) {
  const uint32_t bits = float_bits(value);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

uint16_t to_fp16(float value) {
  const uint32_t bits = float_bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000) return sign | 0x7e00;   // NaN
  if (magnitude >= 0x477ff000) return sign | 0x7c00;  // rounds past 65504: infinity
  if (magnitude < 0x38800000) {                       // below 2^-14: a subnormal half or zero
    // Adding 0.5 makes the float unit handle the rounding: the half's mantissa lands in the low
    // bits of the sum.
    const float shifted = bits_float(magnitude) + 0.5f;
    return sign | static_cast<uint16_t>(float_bits(shifted) - float_bits(0.5f));
  }
  const uint32_t odd = (magnitude >> 13) & 1;
  return sign | static_cast<uint16_t>((magnitude - 0x38000000 + 0xfff + odd) >> 13);
}

float from_fp16(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000) << 16;
  const uint32_t exponent = (half >> 10) & 0x1f;
  const uint32_t mantissa = half & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float value = std::ldexp(static_cast<float>(mantissa), -24);
    return bits_float(float_bits(value) | sign);
  }
  if (exponent == 31) return bits_float(sign | 0x7f800000 | (mantissa << 13));
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

template <typename T>
void append_raw(std::string& out, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(bytes, sizeof(T));
}

template <typename T>
T read_raw(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

[[noreturn]] void fail(const std::string& message) { throw ProtocolError(message); }

std::string in_quotes(const std::string& name) { return "'" + name + "'"; }

// A JSON element of a numeric input as the tensor's datatype.
template <typename T>
void append_integer(std::string& out, const json& element, const std::string& where) {
  if (element.is_number_unsigned()) {
    const auto value = element.get<uint64_t>();
    if (value > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      fail(where + ": " + std::to_string(value) + " does not fit the datatype");
    }
    append_raw(out, static_cast<T>(value));
  } else if (element.is_number_integer()) {
    const auto value = element.get<int64_t>();
    if (value < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        (value > 0 &&
         static_cast<uint64_t>(value) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
      fail(where + ": " + std::to_string(value) + " does not fit the datatype");
    }
    append_raw(out, static_cast<T>(value));
  } else {
    fail(where + ": expected an integer, got " + std::string(element.type_name()));
  }
}

void append_element(std::string& out, DataType type, const json& element,
                    const std::string& where) {
  switch (type) {
    case DataType::kBool:
      if (!element.is_boolean()) fail(where + ": expected true or false");
      out.push_back(element.get<bool>() ? 1 : 0);
      return;
    case DataType::kUint8:
      return append_integer<uint8_t>(out, element, where);
    case DataType::kUint16:
      return append_integer<uint16_t>(out, element, where);
    case DataType::kUint32:
      return append_integer<uint32_t>(out, element, where);
    case DataType::kUint64:
      return append_integer<uint64_t>(out, element, where);
    case DataType::kInt8:
      return append_integer<int8_t>(out, element, where);
    case DataType::kInt16:
      return append_integer<int16_t>(out, element, where);
    case DataType::kInt32:
      return append_integer<int32_t>(out, element, where);
    case DataType::kInt64:
      return append_integer<int64_t>(out, element, where);
    case DataType::kFp16:
    case DataType::kBf16:
    case DataType::kFp32:
    case DataType::kFp64: {
      if (!element.is_number()) {
        fail(where + ": expected a number, got " + std::string(element.type_name()));
      }
      const double value = element.get<double>();
      if (type == DataType::kFp64) return append_raw(out, value);
      const float single = static_cast<float>(value);
      if (type == DataType::kFp32) return append_raw(out, single);
      return append_raw(out, type == DataType::kFp16 ? to_fp16(single) : to_bf16(single));
    }
    case DataType::kBytes: {
      if (!element.is_string()) {
        fail(where + ": expected a string, got " + std::string(element.type_name()));
      }
      const auto& text = element.get_ref<const std::string&>();
      append_raw(out, static_cast<uint32_t>(text.size()));
      out.append(text);
      return;
    }
  }
}

// The elements of `data` (nested arrays flattened, row-major) into `out`; counts them.
void flatten(const json& data, DataType type, const std::string& where, std::string& out,
             int64_t& count, size_t max_bytes) {
  if (!data.is_array()) {
    append_element(out, type, data, where);
    ++count;
    if (out.size() > max_bytes) fail(where + ": more data than the server accepts");
    return;
  }
  for (const auto& element : data) flatten(element, type, where, out, count, max_bytes);
}

std::vector<int64_t> read_shape(const json& value, const std::string& where, size_t max_rank) {
  if (!value.is_array()) fail(where + ": 'shape' must be an array of non-negative integers");
  if (value.size() > max_rank) {
    fail(where + ": rank " + std::to_string(value.size()) + " is more than " +
         std::to_string(max_rank));
  }
  std::vector<int64_t> shape;
  for (const auto& d : value) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      fail(where + ": 'shape' must be an array of non-negative integers, got " + value.dump());
    }
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

const json* member(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string string_member(const json& object, const char* key, const std::string& where,
                          bool required) {
  const json* value = member(object, key);
  if (value == nullptr) {
    if (required) fail(where + ": '" + key + "' is missing");
    return {};
  }
  if (!value->is_string()) fail(where + ": '" + key + "' must be a string");
  return value->get<std::string>();
}

const json* parameters_of(const json& object, const std::string& where) {
  const json* parameters = member(object, "parameters");
  if (parameters != nullptr && !parameters->is_object()) {
    fail(where + ": 'parameters' must be an object");
  }
  return parameters;
}

std::optional<bool> bool_parameter(const json* parameters, const char* key,
                                   const std::string& where) {
  if (parameters == nullptr) return std::nullopt;
  const json* value = member(*parameters, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) fail(where + ": parameter '" + key + "' must be true or false");
  return value->get<bool>();
}

std::optional<int64_t> integer_parameter(const json* parameters, const char* key,
                                         const std::string& where) {
  if (parameters == nullptr) return std::nullopt;
  const json* value = member(*parameters, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number_integer() || value->get<int64_t>() < 0) {
    fail(where + ": parameter '" + key + "' must be a non-negative integer");
  }
  return value->get<int64_t>();
}

json parse_json(std::string_view text) {
  const json::parser_callback_t depth_limit = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) {
      fail("request JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), depth_limit);
  } catch (const json::exception& e) {
    fail(std::string("malformed request JSON: ") + e.what());
  }
}

Tensor read_input(const json& entry, size_t index, std::string_view binary, size_t& binary_used,
                  size_t& total_bytes, const RequestLimits& limits) {
  std::string where = "inputs[" + std::to_string(index) + "]";
  if (!entry.is_object()) fail(where + ": expected an object");
  Tensor tensor;
  tensor.name = string_member(entry, "name", where, true);
  where = "input " + in_quotes(tensor.name);
  const auto type_name = string_member(entry, "datatype", where, true);
  const auto type = parse_datatype(type_name);
  if (!type) fail(where + ": unknown datatype " + in_quotes(type_name));
  tensor.datatype = *type;
  const json* shape = member(entry, "shape");
  if (shape == nullptr) fail(where + ": 'shape' is missing");
  tensor.shape = read_shape(*shape, where, limits.max_rank);
  const auto count = element_count(tensor.shape, limits.max_tensor_bytes);
  if (!count) fail(where + ": shape " + shape->dump() + " is larger than the server accepts");
  const size_t budget = limits.max_tensor_bytes - total_bytes;

  const json* parameters = parameters_of(entry, where);
  const auto binary_size = integer_parameter(parameters, "binary_data_size", where);
  const json* data = member(entry, "data");
  if (binary_size) {
    if (data != nullptr) fail(where + ": has both 'data' and parameter 'binary_data_size'");
    const auto size = static_cast<uint64_t>(*binary_size);
    if (size > binary.size() - binary_used) {
      fail(where + ": binary_data_size " + std::to_string(size) + " runs past the body (" +
           std::to_string(binary.size() - binary_used) + " bytes left)");
    }
    if (size > budget) fail(where + ": more data than the server accepts");
    tensor.data.assign(binary.substr(binary_used, size));
    binary_used += size;
  } else {
    if (data == nullptr) fail(where + ": has neither 'data' nor parameter 'binary_data_size'");
    int64_t found = 0;
    flatten(*data, tensor.datatype, where, tensor.data, found, budget);
    if (found != *count) {
      fail(where + ": shape " + shape->dump() + " holds " + std::to_string(*count) +
           " elements, 'data' has " + std::to_string(found));
    }
  }
  total_bytes += tensor.data.size();
  check_tensor_data(tensor, *count);
  return tensor;
}

// JSON data of an output, nested as its shape (the protocol's "data" is flat row-major; Triton
// sends it flat too).
json output_data(const Tensor& tensor) {
  json data = json::array();
  const char* p = tensor.data.data();
  const size_t n = tensor.datatype == DataType::kBytes
                       ? 0
                       : tensor.data.size() / std::max<size_t>(1, element_size(tensor.datatype));
  auto& array = data.get_ref<json::array_t&>();
  array.reserve(n);
  switch (tensor.datatype) {
    case DataType::kBool:
      for (size_t i = 0; i < n; ++i) array.emplace_back(p[i] != 0);
      break;
    case DataType::kUint8:
      for (size_t i = 0; i < n; ++i) array.emplace_back(read_raw<uint8_t>(p + i));
      break;
    case DataType::kUint16:
      for (size_t i = 0; i < n; ++i) array.emplace_back(read_raw<uint16_t>(p + 2 * i));
      break;
    case DataType::kUint32:
      for (size_t i = 0; i < n; ++i) array.emplace_back(read_raw<uint32_t>(p + 4 * i));
      break;
    case DataType::kUint64:
      for (size_t i = 0; i < n; ++i) array.emplace_back(read_raw<uint64_t>(p + 8 * i));
      break;
    case DataType::kInt8:
      for (size_t i = 0; i < n; ++i) array.emplace_back(read_raw<int8_t>(p + i));
      break;
    case DataType::kInt16:
      for (size_t i = 0; i < n; ++i) array.emplace_back(read_raw<int16_t>(p + 2 * i));
      break;
    case DataType::kInt32:
      for (size_t i = 0; i < n; ++i) array.emplace_back(read_raw<int32_t>(p + 4 * i));
      break;
    case DataType::kInt64:
      for (size_t i = 0; i < n; ++i) array.emplace_back(read_raw<int64_t>(p + 8 * i));
      break;
    case DataType::kFp16:
      for (size_t i = 0; i < n; ++i) array.emplace_back(from_fp16(read_raw<uint16_t>(p + 2 * i)));
      break;
    case DataType::kBf16:
      for (size_t i = 0; i < n; ++i) {
        array.emplace_back(bits_float(static_cast<uint32_t>(read_raw<uint16_t>(p + 2 * i)) << 16));
      }
      break;
    case DataType::kFp32:
      for (size_t i = 0; i < n; ++i) array.emplace_back(read_raw<float>(p + 4 * i));
      break;
    case DataType::kFp64:
      for (size_t i = 0; i < n; ++i) array.emplace_back(read_raw<double>(p + 8 * i));
      break;
    case DataType::kBytes:
      for (const auto element : tensor.byte_elements()) array.emplace_back(std::string(element));
      break;
  }
  return data;
}

}  // namespace

const char* to_string(DataType type) {
  for (const auto& info : kTypes) {
    if (info.type == type) return info.name;
  }
  return "?";
}

std::optional<DataType> parse_datatype(std::string_view name) {
  for (const auto& info : kTypes) {
    if (name == info.name) return info.type;
  }
  return std::nullopt;
}

size_t element_size(DataType type) {
  for (const auto& info : kTypes) {
    if (info.type == type) return info.size;
  }
  return 0;
}

int64_t Tensor::elements() const {
  int64_t count = 1;
  for (const auto d : shape) count *= d;
  return count;
}

std::vector<std::string_view> Tensor::byte_elements() const {
  std::vector<std::string_view> elements;
  size_t at = 0;
  while (at < data.size()) {
    if (data.size() - at < 4)
      fail("input " + in_quotes(name) + ": BYTES data ends inside a length");
    const auto length = read_raw<uint32_t>(data.data() + at);
    at += 4;
    if (length > data.size() - at) {
      fail("input " + in_quotes(name) + ": a BYTES element of " + std::to_string(length) +
           " bytes runs past the data");
    }
    elements.emplace_back(data.data() + at, length);
    at += length;
  }
  return elements;
}

std::string pack_bytes(const std::vector<std::string>& elements) {
  std::string out;
  for (const auto& element : elements) {
    append_raw(out, static_cast<uint32_t>(element.size()));
    out.append(element);
  }
  return out;
}

std::optional<int64_t> element_count(const std::vector<int64_t>& shape, size_t max_bytes) {
  int64_t count = 1;
  for (const auto d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && count > static_cast<int64_t>(max_bytes) / d) return std::nullopt;
    count *= d;
  }
  return count;
}

void check_tensor_data(const Tensor& tensor, int64_t count) {
  const auto where = "input " + in_quotes(tensor.name);
  const auto shape = json(tensor.shape).dump();
  if (tensor.datatype == DataType::kBytes) {
    const auto elements = tensor.byte_elements();  // checks the layout
    if (static_cast<int64_t>(elements.size()) != count) {
      fail(where + ": shape " + shape + " holds " + std::to_string(count) +
           " elements, the data has " + std::to_string(elements.size()));
    }
  } else if (tensor.data.size() != static_cast<size_t>(count) * element_size(tensor.datatype)) {
    fail(where + ": shape " + shape + " of " + to_string(tensor.datatype) + " needs " +
         std::to_string(static_cast<size_t>(count) * element_size(tensor.datatype)) +
         " bytes, got " + std::to_string(tensor.data.size()));
  }
}

const Tensor* InferRequest::input(std::string_view name) const {
  for (const auto& tensor : inputs) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

InferRequest parse_infer_request(std::string_view body, std::optional<size_t> json_length,
                                 const RequestLimits& limits) {
  if (json_length && *json_length > body.size()) {
    fail("Inference-Header-Content-Length " + std::to_string(*json_length) +
         " is more than the body's " + std::to_string(body.size()) + " bytes");
  }
  const size_t header_size = json_length ? *json_length : body.size();
  const std::string_view binary = body.substr(header_size);
  const json root = parse_json(body.substr(0, header_size));
  if (!root.is_object()) fail("the request must be a JSON object");

  InferRequest request;
  const json* id = member(root, "id");
  if (id != nullptr) {
    if (!id->is_string()) fail("'id' must be a string");
    request.id = id->get<std::string>();
  }
  const json* parameters = parameters_of(root, "the request");
  request.binary_data_output =
      bool_parameter(parameters, "binary_data_output", "the request").value_or(false);
  request.timeout_us = integer_parameter(parameters, "timeout", "the request");

  const json* inputs = member(root, "inputs");
  if (inputs == nullptr || !inputs->is_array()) fail("'inputs' must be an array");
  if (inputs->empty()) fail("'inputs' is empty");
  if (inputs->size() > limits.max_inputs) {
    fail("'inputs' has " + std::to_string(inputs->size()) + " entries, more than " +
         std::to_string(limits.max_inputs));
  }
  size_t binary_used = 0;
  size_t total_bytes = 0;
  for (size_t i = 0; i < inputs->size(); ++i) {
    auto tensor = read_input((*inputs)[i], i, binary, binary_used, total_bytes, limits);
    if (request.input(tensor.name) != nullptr)
      fail("input " + in_quotes(tensor.name) + " given twice");
    request.inputs.push_back(std::move(tensor));
  }
  if (binary_used != binary.size()) {
    fail("the body has " + std::to_string(binary.size() - binary_used) +
         " bytes of binary data that no input's binary_data_size claims");
  }

  const json* outputs = member(root, "outputs");
  if (outputs != nullptr) {
    if (!outputs->is_array()) fail("'outputs' must be an array");
    if (outputs->size() > limits.max_outputs) fail("'outputs' has too many entries");
    for (size_t i = 0; i < outputs->size(); ++i) {
      const json& entry = (*outputs)[i];
      std::string where = "outputs[" + std::to_string(i) + "]";
      if (!entry.is_object()) fail(where + ": expected an object");
      RequestedOutput output;
      output.name = string_member(entry, "name", where, true);
      where = "output " + in_quotes(output.name);
      const json* output_parameters = parameters_of(entry, where);
      output.binary_data = bool_parameter(output_parameters, "binary_data", where);
      output.class_count =
          integer_parameter(output_parameters, "classification", where).value_or(0);
      for (const auto& other : request.outputs) {
        if (other.name == output.name) fail(where + " asked for twice");
      }
      request.outputs.push_back(std::move(output));
    }
  }
  return request;
}

EncodedResponse encode_infer_response(const InferResponse& response) {
  json root = {{"model_name", response.model_name}, {"model_version", response.model_version}};
  if (!response.id.empty()) root["id"] = response.id;
  json outputs = json::array();
  std::string binary;
  for (const auto& output : response.outputs) {
    const auto& tensor = output.tensor;
    json entry = {
        {"name", tensor.name}, {"datatype", to_string(tensor.datatype)}, {"shape", tensor.shape}};
    if (output.binary) {
      entry["parameters"] = {{"binary_data_size", tensor.data.size()}};
      binary += tensor.data;
    } else {
      entry["data"] = output_data(tensor);
    }
    outputs.push_back(std::move(entry));
  }
  root["outputs"] = std::move(outputs);
  EncodedResponse encoded;
  // Non-finite floats have no JSON spelling; dump writes them as null, which clients reject
  // loudly rather than misread.
  encoded.body = root.dump(-1, ' ', false, json::error_handler_t::replace);
  if (!binary.empty() || std::any_of(response.outputs.begin(), response.outputs.end(),
                                     [](const OutputTensor& o) { return o.binary; })) {
    encoded.json_length = encoded.body.size();
    encoded.body += binary;
  }
  return encoded;
}

std::string error_body(std::string_view message) {
  return json{{"error", std::string(message)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace attnzoo::serve
