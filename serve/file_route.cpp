#include <attnzoo/serve/file_route.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace attnzoo::serve {

std::optional<std::string> query_value(const std::string& query, const std::string& key) {
  std::istringstream in(query);
  std::string pair;
  while (std::getline(in, pair, '&')) {
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) == key) return eq == std::string::npos ? "" : pair.substr(eq + 1);
  }
  return std::nullopt;
}

void check_query_keys(const std::string& query, const std::vector<std::string>& allowed) {
  std::istringstream in(query);
  std::string pair;
  while (std::getline(in, pair, '&')) {
    if (pair.empty()) continue;
    const auto key = pair.substr(0, pair.find('='));
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string names;
    for (const auto& name : allowed) names += (names.empty() ? "'" : ", '") + name + "'";
    throw ProtocolError(
        "unknown query parameter '" + key + "'" +
        (names.empty() ? ": this route takes none" : "; this route takes " + names));
  }
}

int64_t query_integer(const std::string& query, const std::string& key, int64_t fallback,
                      int64_t min, int64_t max) {
  const auto value = query_value(query, key);
  if (!value) return fallback;
  char* end = nullptr;
  const long long number = std::strtoll(value->c_str(), &end, 10);
  if (value->empty() || *end != '\0' || number < min || number > max) {
    throw ProtocolError("query '" + key + "' must be an integer from " + std::to_string(min) +
                        " to " + std::to_string(max) + ", got '" + *value + "'");
  }
  return number;
}

InferRequest file_request(const std::string& input, std::string file,
                          std::vector<RequestedOutput> outputs) {
  if (file.empty()) throw ProtocolError("the request body is empty: post the file as the body");
  InferRequest request;
  Tensor tensor;
  tensor.name = input;
  tensor.datatype = DataType::kBytes;
  tensor.shape = {1, 1};
  tensor.data = pack_bytes({file});
  request.inputs.push_back(std::move(tensor));
  request.outputs = std::move(outputs);
  return request;
}

FileCall classify_call(const std::string& model, const std::string& input, std::string file,
                       const std::string& query) {
  check_query_keys(query, {"top"});
  const int64_t top = query_integer(query, "top", 5, 1, 1000);
  FileCall call;
  call.request = file_request(input, std::move(file), {{"probabilities", false, top}});
  call.answer = [model](const std::vector<OutputTensor>& outputs) {
    auto predictions = nlohmann::json::array();
    for (const auto element : outputs.front().tensor.byte_elements()) {
      // "value:index:label"; the label may itself hold colons.
      const std::string text(element);
      const auto first = text.find(':');
      const auto second = text.find(':', first + 1);
      const auto index = std::stoll(text.substr(first + 1, second - first - 1));
      predictions.push_back(
          {{"index", index},
           {"label", second != std::string::npos ? text.substr(second + 1)
                                                 : "class " + std::to_string(index)},
           {"prob", std::stod(text.substr(0, first))}});
    }
    return nlohmann::json{{"model", model}, {"predictions", predictions}}.dump(
        -1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  return call;
}

}  // namespace attnzoo::serve
