// What the served models' file routes share: reading the query string, the request a posted file
// makes, and the classification answer. Internal to serve/.
#pragma once

#include <attnzoo/serve/served_model.h>

#include <optional>
#include <string>
#include <vector>

namespace attnzoo::serve {

// The value of `key` in a query string ("top=5&x=y"), if present.
std::optional<std::string> query_value(const std::string& query, const std::string& key);
// ProtocolError naming the first parameter of `query` not in `allowed`.
void check_query_keys(const std::string& query, const std::vector<std::string>& allowed);
// An integer parameter in [min, max]; `fallback` when absent. ProtocolError otherwise.
int64_t query_integer(const std::string& query, const std::string& key, int64_t fallback,
                      int64_t min, int64_t max);

// A request of one row: `file` as BYTES [1, 1] input `input`, asking for `outputs`.
InferRequest file_request(const std::string& input, std::string file,
                          std::vector<RequestedOutput> outputs);

// /classify?top=K: the file as `input`, the top K of `output` (probabilities) back as
// {"model": m, "predictions": [{"index", "label", "prob"}, ...]}, as `attnzoo classify --json`
// writes them (an unlabelled class is "class <index>").
FileCall classify_call(const std::string& model, const std::string& input, std::string file,
                       const std::string& query);

}  // namespace attnzoo::serve
