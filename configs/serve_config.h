// What `attnzoo serve --config serve.yaml` serves and how: the HTTP listener and its limits, and
// the models, each a name of the zoo or a model YAML with its weights and Triton's batching knobs.
// Read with the model configs' reader: every error names the file, key path, line and column;
// unknown keys are refused; paths are relative to the file.
//
//   http: {host: 127.0.0.1, port: 8000, threads: 2, max_body_mb: 64, request_timeout_s: 30}
//   threads: 2                        # LibTorch's intra-op threads (0: LibTorch's default)
//   models:
//     - name: digits                  # the route's name (default: the model's)
//       model: vit_digits             # a registered name, or a model YAML
//       weights: ../assets/weights/vit_digits.safetensors
//       max_batch_size: 8             # rows per execution
//       dynamic_batching: {max_queue_delay_us: 2000}   # absent: each request runs alone
//       max_queue_size: 64            # waiting requests; past it 503 with Retry-After
//       default_timeout_us: 0         # a deadline for requests that set none (0: none)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo {

struct ServeHttpConfig {
  std::string host = "127.0.0.1";
  int64_t port = 8000;  // 0: a free port, printed at start
  int64_t threads = 2;  // I/O threads, which also decode and preprocess inputs
  int64_t max_body_mb = 64;
  int64_t max_header_kb = 16;
  double request_timeout_s = 30.0;  // to receive a whole request, header and body
  double write_timeout_s = 30.0;
  int64_t max_connections = 1024;
};

struct ServedModelConfig {
  std::string name;     // the route's name
  std::string model;    // a registered name, or a model YAML resolved against the serve config
  std::string weights;  // empty: random weights (seed 0)
  std::string format;
  std::vector<std::string> overrides;  // `set:`, as --set
  std::string device = "cpu";
  std::string dtype = "fp32";
  int64_t max_batch_size = 8;
  bool dynamic_batching = false;
  int64_t max_queue_delay_us = 0;
  int64_t max_queue_size = 64;
  int64_t instances = 1;
  int64_t default_timeout_us = 0;
};

struct ServeConfig {
  std::string source;
  ServeHttpConfig http;
  int64_t threads = 0;
  std::vector<ServedModelConfig> models;
};

// ConfigError naming the file, key, line and column for anything malformed or out of range, a
// model listed twice, a model name that is not a registered one or an existing YAML, or weights
// that are not a file.
ServeConfig parse_serve_config(const std::string& yaml, const std::string& source,
                               const std::vector<std::string>& overrides = {});
ServeConfig load_serve_config(const std::string& path,
                              const std::vector<std::string>& overrides = {});

}  // namespace attnzoo
