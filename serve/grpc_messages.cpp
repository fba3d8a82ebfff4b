#include <attnzoo/serve/grpc_messages.h>

#include "kserve_v2.pb.h"

#include <cstring>
#include <set>

namespace attnzoo::serve {
namespace {

[[noreturn]] void fail(const std::string& message) { throw ProtocolError(message); }

std::string quoted(const std::string& name) { return "'" + name + "'"; }

template <class T>
void append_le(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts
  out.append(bytes, sizeof(T));
}

// A tensor's typed contents as raw little-endian bytes; `budget`: the bytes it may still take.
std::string contents_bytes(const inference::InferTensorContents& contents, DataType type,
                           const std::string& where, size_t budget) {
  std::string out;
  const auto reserve = [&](size_t count, size_t width) {
    if (count > budget / std::max<size_t>(width, 1))
      fail(where + ": more data than the server accepts");
    out.reserve(count * width);
  };
  // Each datatype reads one field; a value that does not fit the datatype is refused.
  const auto narrow = [&](const auto& values, auto tag, int64_t low, int64_t high) {
    using T = decltype(tag);
    reserve(static_cast<size_t>(values.size()), sizeof(T));
    for (const auto value : values) {
      const auto wide = static_cast<int64_t>(value);
      if (wide < low || wide > high) {
        fail(where + ": " + std::to_string(wide) + " does not fit " + to_string(type));
      }
      append_le(out, static_cast<T>(value));
    }
  };
  switch (type) {
    case DataType::kBool:
      reserve(static_cast<size_t>(contents.bool_contents_size()), 1);
      for (const bool value : contents.bool_contents()) out.push_back(value ? 1 : 0);
      break;
    case DataType::kInt8:
      narrow(contents.int_contents(), int8_t{}, INT8_MIN, INT8_MAX);
      break;
    case DataType::kInt16:
      narrow(contents.int_contents(), int16_t{}, INT16_MIN, INT16_MAX);
      break;
    case DataType::kInt32:
      narrow(contents.int_contents(), int32_t{}, INT32_MIN, INT32_MAX);
      break;
    case DataType::kInt64:
      reserve(static_cast<size_t>(contents.int64_contents_size()), 8);
      for (const auto value : contents.int64_contents())
        append_le(out, static_cast<int64_t>(value));
      break;
    case DataType::kUint8:
      narrow(contents.uint_contents(), uint8_t{}, 0, UINT8_MAX);
      break;
    case DataType::kUint16:
      narrow(contents.uint_contents(), uint16_t{}, 0, UINT16_MAX);
      break;
    case DataType::kUint32:
      reserve(static_cast<size_t>(contents.uint_contents_size()), 4);
      for (const auto value : contents.uint_contents())
        append_le(out, static_cast<uint32_t>(value));
      break;
    case DataType::kUint64:
      reserve(static_cast<size_t>(contents.uint64_contents_size()), 8);
      for (const auto value : contents.uint64_contents()) {
        append_le(out, static_cast<uint64_t>(value));
      }
      break;
    case DataType::kFp32:
      reserve(static_cast<size_t>(contents.fp32_contents_size()), 4);
      for (const float value : contents.fp32_contents()) append_le(out, value);
      break;
    case DataType::kFp64:
      reserve(static_cast<size_t>(contents.fp64_contents_size()), 8);
      for (const double value : contents.fp64_contents()) append_le(out, value);
      break;
    case DataType::kBytes: {
      size_t total = 0;
      for (const auto& element : contents.bytes_contents()) {
        total += 4 + element.size();
        if (total > budget) fail(where + ": more data than the server accepts");
      }
      out.reserve(total);
      for (const auto& element : contents.bytes_contents()) {
        append_le(out, static_cast<uint32_t>(element.size()));
        out.append(element);
      }
      break;
    }
    case DataType::kFp16:
    case DataType::kBf16:
      fail(where + ": " + to_string(type) + " data travels only in raw_input_contents");
  }
  return out;
}

// The int64 value of a parameter (int64 or uint64 within range); ProtocolError otherwise.
int64_t integer_value(const inference::InferParameter& value, const std::string& where) {
  if (value.parameter_choice_case() == inference::InferParameter::kInt64Param) {
    return value.int64_param();
  }
  if (value.parameter_choice_case() == inference::InferParameter::kUint64Param &&
      value.uint64_param() <= static_cast<uint64_t>(INT64_MAX)) {
    return static_cast<int64_t>(value.uint64_param());
  }
  fail(where + " must be an integer");
}

bool bool_value(const inference::InferParameter& value, const std::string& where) {
  if (value.parameter_choice_case() != inference::InferParameter::kBoolParam) {
    fail(where + " must be a boolean");
  }
  return value.bool_param();
}

}  // namespace

InferRequest infer_request_from_proto(const inference::ModelInferRequest& request,
                                      const RequestLimits& limits) {
  InferRequest out;
  out.id = request.id();
  if (const auto it = request.parameters().find("timeout"); it != request.parameters().end()) {
    const auto timeout = integer_value(it->second, "parameter 'timeout'");
    if (timeout < 0) fail("parameter 'timeout' must be >= 0 (µs)");
    out.timeout_us = timeout;
  }
  if (request.inputs_size() == 0) fail("the request has no inputs");
  if (static_cast<size_t>(request.inputs_size()) > limits.max_inputs) {
    fail("the request has " + std::to_string(request.inputs_size()) + " inputs, more than " +
         std::to_string(limits.max_inputs));
  }
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size()) {
    fail("raw_input_contents has " + std::to_string(request.raw_input_contents_size()) +
         " entries for " + std::to_string(request.inputs_size()) +
         " inputs: all inputs or none travel as raw bytes");
  }
  size_t total_bytes = 0;
  std::set<std::string> names;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    if (input.name().empty()) fail("inputs[" + std::to_string(i) + "] has no name");
    const std::string where = "input " + quoted(input.name());
    if (!names.insert(input.name()).second) fail(where + " is given twice");
    Tensor tensor;
    tensor.name = input.name();
    const auto type = parse_datatype(input.datatype());
    if (!type) fail(where + ": unknown datatype " + quoted(input.datatype()));
    tensor.datatype = *type;
    if (static_cast<size_t>(input.shape_size()) > limits.max_rank) {
      fail(where + ": rank " + std::to_string(input.shape_size()) + " is more than " +
           std::to_string(limits.max_rank));
    }
    tensor.shape.assign(input.shape().begin(), input.shape().end());
    for (const auto d : tensor.shape) {
      if (d < 0) fail(where + ": the shape's dimensions must be non-negative");
    }
    const auto count = element_count(tensor.shape, limits.max_tensor_bytes);
    if (!count) fail(where + ": its shape is larger than the server accepts");
    const size_t budget = limits.max_tensor_bytes - total_bytes;
    if (raw) {
      const auto& bytes = request.raw_input_contents(i);
      if (bytes.size() > budget) fail(where + ": more data than the server accepts");
      tensor.data = bytes;
    } else {
      tensor.data = contents_bytes(input.contents(), tensor.datatype, where, budget);
    }
    total_bytes += tensor.data.size();
    check_tensor_data(tensor, *count);
    out.inputs.push_back(std::move(tensor));
  }
  if (static_cast<size_t>(request.outputs_size()) > limits.max_outputs) {
    fail("the request asks for " + std::to_string(request.outputs_size()) + " outputs, more than " +
         std::to_string(limits.max_outputs));
  }
  for (const auto& output : request.outputs()) {
    RequestedOutput asked;
    asked.name = output.name();
    if (asked.name.empty()) fail("a requested output has no name");
    if (const auto it = output.parameters().find("classification");
        it != output.parameters().end()) {
      asked.class_count = integer_value(
          it->second, "output " + quoted(asked.name) + ": parameter 'classification'");
      if (asked.class_count < 1) {
        fail("output " + quoted(asked.name) + ": parameter 'classification' must be >= 1");
      }
    }
    asked.binary_data = true;  // gRPC's outputs are raw bytes
    out.outputs.push_back(std::move(asked));
  }
  out.binary_data_output = true;
  return out;
}

void infer_response_to_proto(const InferResponse& response, inference::ModelInferResponse& out) {
  out.Clear();
  out.set_model_name(response.model_name);
  out.set_model_version(response.model_version);
  out.set_id(response.id);
  for (const auto& output : response.outputs) {
    auto* tensor = out.add_outputs();
    tensor->set_name(output.tensor.name);
    tensor->set_datatype(to_string(output.tensor.datatype));
    for (const auto d : output.tensor.shape) tensor->add_shape(d);
    out.add_raw_output_contents(output.tensor.data);
  }
}

SequenceControl sequence_control(const inference::ModelInferRequest& request) {
  SequenceControl control;
  const auto& parameters = request.parameters();
  if (const auto it = parameters.find("sequence_id"); it != parameters.end()) {
    const auto& value = it->second;
    if (value.parameter_choice_case() == inference::InferParameter::kStringParam) {
      control.id = value.string_param();
      if (control.id.empty()) fail("parameter 'sequence_id' is an empty string");
    } else {
      const auto id = integer_value(value, "parameter 'sequence_id'");
      if (id < 0) fail("parameter 'sequence_id' must be >= 0");
      if (id > 0) control.id = std::to_string(id);  // 0: no sequence, as Triton reads it
    }
  }
  if (const auto it = parameters.find("sequence_start"); it != parameters.end()) {
    control.start = bool_value(it->second, "parameter 'sequence_start'");
  }
  if (const auto it = parameters.find("sequence_end"); it != parameters.end()) {
    control.end = bool_value(it->second, "parameter 'sequence_end'");
  }
  if (const auto it = parameters.find("sample_rate"); it != parameters.end()) {
    control.sample_rate = integer_value(it->second, "parameter 'sample_rate'");
    if (control.sample_rate < 1000 || control.sample_rate > 768000) {
      fail("parameter 'sample_rate' must be from 1000 to 768000 (Hz)");
    }
    if (!control.start) fail("parameter 'sample_rate' belongs to a sequence's start");
  }
  if (control.id.empty() && (control.start || control.end)) {
    fail("sequence_start and sequence_end need a 'sequence_id'");
  }
  return control;
}

std::vector<float> sequence_samples(const InferRequest& request) {
  std::vector<float> samples;
  for (const auto& input : request.inputs) {
    if (input.name != "waveform") {
      fail("input " + quoted(input.name) +
           ": a sequence's requests carry one input, 'waveform' (FP32 [n] or [1, n])");
    }
    if (input.datatype != DataType::kFp32) fail("input 'waveform' must be FP32");
    if (input.shape.empty() || input.shape.size() > 2 ||
        (input.shape.size() == 2 && input.shape[0] != 1)) {
      fail("input 'waveform' must have shape [n] or [1, n]");
    }
    samples.resize(input.data.size() / sizeof(float));
    if (!samples.empty()) std::memcpy(samples.data(), input.data.data(), input.data.size());
  }
  return samples;
}

StreamRequest read_stream_request(const inference::ModelInferRequest& request,
                                  const RequestLimits& limits) {
  StreamRequest out;
  out.control = sequence_control(request);
  if (out.control.id.empty() || request.inputs_size() > 0) {
    out.request = infer_request_from_proto(request, limits);
  } else {
    out.request.id = request.id();
  }
  if (!out.control.id.empty()) out.samples = sequence_samples(out.request);
  return out;
}

StreamRequest read_stream_request(std::string_view wire, const RequestLimits& limits) {
  inference::ModelInferRequest request;
  if (wire.size() > static_cast<size_t>(INT32_MAX) ||
      !request.ParseFromArray(wire.data(), static_cast<int>(wire.size()))) {
    fail("not a ModelInferRequest message");
  }
  return read_stream_request(request, limits);
}

}  // namespace attnzoo::serve
