// What `attnzoo serve --config serve.yaml` serves and how: the HTTP listener and its limits, and
// the models, each a name of the zoo or a model YAML with its weights and Triton's batching knobs.
// Read with the model configs' reader: every error names the file, key path, line and column;
// unknown keys are refused; paths are relative to the file.
//
//   http: {host: 127.0.0.1, port: 8000, threads: 2, max_body_mb: 64, request_timeout_s: 30}
//   grpc: {port: 8001}                # KServe v2 over gRPC; {enabled: false}: none; host: http's
//   threads: 1                        # LibTorch threads per model instance (0: 1)
//   wait_policy: passive              # how OpenMP's idle threads wait: passive | bounded | active
//   stream_threads: 2                 # threads for the chunks of live audio
//   models:
//     - name: digits                  # the route's name (default: the model's)
//       model: vit_digits             # a registered name, a model YAML or a model folder
//       weights: ../assets/weights/vit_digits.safetensors
//       max_batch_size: 8             # rows per execution
//       dynamic_batching: {max_queue_delay_us: 2000}   # absent: each request runs alone
//       max_queue_size: 64            # waiting requests; past it 503 with Retry-After
//       default_timeout_us: 0         # a deadline for requests that set none (0: none)
//       instances: 0                  # parallel executions (0: usable cores / threads)
//       threads: 0                    # LibTorch threads per instance (0: the config's)
//     - model: conformer_digits_ctc   # audio: classify, encode or transcribe (task:)
//       max_audio_seconds: 60         # the longest audio of a request or stream
//       max_streams: 16               # open WebSocket streams (0: none)
//       stream_chunk: 16              # encoder frames per chunk of a stream
#pragma once

#include <attnzoo/configs/model_options.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnzoo {

// What a model is served as: an image or audio classifier, a speech encoder, a speech recognizer
// (a CTC head and a token table).
enum class ServedTask { kClassify, kEncode, kTranscribe };
// "classify" | "encode" | "transcribe": the values of a serve config's task and of --task.
constexpr const char* to_string(ServedTask task) {
  switch (task) {
    case ServedTask::kClassify:
      return "classify";
    case ServedTask::kEncode:
      return "encode";
    case ServedTask::kTranscribe:
      return "transcribe";
  }
  return "classify";
}

struct ServeHttpConfig {
  std::string host = "127.0.0.1";
  int64_t port = 8000;  // 0: a free port, printed at start
  int64_t threads = 2;  // I/O threads, which also decode and preprocess inputs
  int64_t max_body_mb = 64;
  int64_t max_header_kb = 16;
  double request_timeout_s = 30.0;  // to receive a whole request, header and body
  double write_timeout_s = 30.0;
  int64_t max_connections = 1024;
  // A WebSocket stream that sends nothing for this long is closed (its partial result lost).
  double stream_idle_timeout_s = 30.0;
};

// The gRPC service (KServe v2's GRPCInferenceService) beside the HTTP listener.
struct ServeGrpcConfig {
  bool enabled = true;
  std::string host;     // empty: the HTTP listener's host
  int64_t port = 8001;  // 0: a free port, printed at start
};

struct ServedModelConfig {
  std::string name;  // the route's name
  // A registered name, or a model YAML or model folder resolved against the serve config.
  std::string model;
  // How the model loads (the task APIs' own options): `weights` (safetensors, a PyTorch
  // checkpoint or a sharded index; empty: the model's own checkpoint.file, else random weights),
  // `format`, `key`, `set:` (overrides, as --set), `device`, `dtype`.
  ModelOptions options;
  int64_t max_batch_size = 8;
  bool dynamic_batching = false;
  int64_t max_queue_delay_us = 0;
  int64_t max_queue_size = 64;
  // Parallel executions of the model (Triton's instance_group count), each on `threads` LibTorch
  // threads; 0: instance_shape's defaults.
  int64_t instances = 0;
  int64_t threads = 0;
  int64_t default_timeout_us = 0;
  // Unset: classify for a model with a classification head, else transcribe when it has a CTC
  // head and a token table, else encode.
  std::optional<ServedTask> task;
  std::string units;  // the recognizer's token table; empty: the model config's decoding.units
  // Audio models: the longest audio a request may hold, in seconds (a file, a waveform, or a
  // stream), and how many WebSocket streams may be open at once (0: no streaming route).
  double max_audio_seconds = 60.0;
  int64_t max_streams = 16;
  // Encoder frames per chunk of a stream; 0: the model config's streaming.chunk_size (a model
  // without one does not stream unless this is set).
  int64_t stream_chunk = 0;
};

// How LibTorch's idle OpenMP threads wait for the next parallel region (libgomp's spin before
// sleeping): kPassive sleeps at once (OMP_WAIT_POLICY=PASSIVE), kBounded spins about 100 rounds
// first (GOMP_SPINCOUNT=100), kActive spins as long as libgomp likes (its default). A thread that
// spins for a core another process holds delays every region of its team.
enum class WaitPolicy { kBounded, kPassive, kActive };
constexpr const char* to_string(WaitPolicy policy) {
  switch (policy) {
    case WaitPolicy::kBounded:
      return "bounded";
    case WaitPolicy::kPassive:
      return "passive";
    case WaitPolicy::kActive:
      return "active";
  }
  return "bounded";
}

struct ServeConfig {
  std::string source;
  ServeHttpConfig http;
  ServeGrpcConfig grpc;
  int64_t threads = 0;  // LibTorch threads per model instance, for models that set none; 0: 1
  WaitPolicy wait_policy = WaitPolicy::kPassive;
  int64_t stream_threads = 2;  // threads running the chunks of live audio (WebSocket streams)
  std::vector<ServedModelConfig> models;
};

// How many instances of model `m` run and on how many LibTorch threads each: its entry's
// `threads`, else the config's, else 1; its `instances`, else as many as `cores` / threads (at
// least 1). One thread per instance is the default because it is the fastest on the models
// measured (docs/serving.md) and because a team of one never waits for a core a neighbour took.
struct InstanceShape {
  int64_t instances = 1;
  int64_t threads = 1;
};
InstanceShape instance_shape(const ServedModelConfig& m, const ServeConfig& config, int cores);

// ConfigError naming the file, key, line and column for anything malformed or out of range, a
// model listed twice, a model name that is not a registered one or an existing YAML, or weights
// that are not a file. `models_required`: no model listed is an error (a server with a model
// repository may start with none of its own).
ServeConfig parse_serve_config(const std::string& yaml, const std::string& source,
                               const std::vector<std::string>& overrides = {},
                               bool models_required = true);
ServeConfig load_serve_config(const std::string& path,
                              const std::vector<std::string>& overrides = {},
                              bool models_required = true);

// A model repository folder's serve.yaml (serve/model_repository.h): one entry as `models:`
// lists them, its paths relative to the file, `model:` by default the folder itself ("./"). The
// model's name is the folder's, `name`; a `name:` that says otherwise is a ConfigError.
ServedModelConfig load_repository_entry(const std::string& path, const std::string& name);

}  // namespace attnzoo
