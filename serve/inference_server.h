// The KServe v2 server of `attnzoo serve`, its transports aside: the models it serves (which a
// model repository may add, replace and remove while it serves), health, metadata, inference and
// live sequences of audio, each as a call that the HTTP routes below and the gRPC service
// (grpc_server.h) both make.
//
// The HTTP routes:
//
//   GET  /v2/health/live                      200 while the process serves
//   GET  /v2/health/ready                     200 when every model is loaded and the server is
//                                             not shutting down, else 400 (the protocol's "not
//                                             ready", as Triton answers)
//   GET  /v2                                  server metadata: name, version, extensions
//   GET  /v2/models/{m}[/versions/{v}]        model metadata: its inputs and outputs
//   GET  /v2/models/{m}[/versions/{v}]/ready
//   POST /v2/models/{m}[/versions/{v}]/infer  JSON tensors or the binary tensor extension
//   POST /v2/models/{m}/classify?top=K        classifiers: the body is an image or audio file;
//                                             JSON back: {"model": m, "predictions": [{"index",
//                                             "label", "prob"}, ...]} (as attnzoo classify --json)
//   POST /v2/models/{m}/encode[?encoded=1]    speech encoders: an audio file; JSON back:
//                                             {"model", "frames", "frame_ms", "seconds",
//                                             "embedding"[, "encoded"]}
//   POST /v2/models/{m}/transcribe            speech recognizers: an audio file; JSON back: the
//                                             transcript (api/transcript_json.h) and "model"
//   GET  /v2/models/{m}/stream                WebSocket: live speech, WeNet's protocol
//                                             (speech_stream.h), for recognizers and encoders
//                                             that stream; at most the model's max_streams open
//   POST /v2/repository/index                 with a model repository (model_repository.h):
//   POST /v2/repository/models/{m}/load       Triton's repository extension
//   POST /v2/repository/models/{m}/unload
//   GET  /metrics                             Prometheus text (metrics.h)
//
// Every error is {"error": "..."} with a 4xx (the request) or 5xx (the server) status; a full
// queue is 503 with Retry-After, a request whose deadline passed 504. A request's deadline is its
// "timeout" parameter (µs, Triton's), else the model's default_timeout_us, else none.
//
// Replacing a model (a reload) never leaves a gap: requests that found the old model are
// answered by it, those that come after the swap by the new one, and the old one is retired (its
// queue run to the end, then freed) on a thread of its own.
#pragma once

#include <attnzoo/serve/dynamic_batcher.h>
#include <attnzoo/serve/http_server.h>
#include <attnzoo/serve/metrics.h>
#include <attnzoo/serve/served_model.h>
#include <attnzoo/serve/task_pool.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace attnzoo::serve {

struct ModelEndpoint {
  std::shared_ptr<const ServedModel> model;
  BatchingOptions batching;
  int64_t default_timeout_us = 0;  // 0: no deadline unless the request sets one
  int64_t max_streams = 0;         // open streams (WebSocket and gRPC sequences); 0: none
  int64_t threads = 1;             // LibTorch threads of each instance (for what the server prints)
};

// Why a call was not answered with what it asked: the HTTP status it gets (the gRPC service maps
// it to a status code, grpc_server.h) and a message naming what is at fault.
struct Refusal {
  int status = 0;
  std::string message;
};

// What an infer call ends with: the response, or a refusal (status != 200).
struct InferReply {
  int status = 200;
  std::string error;
  InferResponse response;
  bool ok() const { return status == 200; }
};
using InferDone = std::function<void(InferReply)>;

struct ModelMetadata {
  std::string name;
  std::string version;
  std::string platform;  // "attnzoo_<kind>"
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  bool batched = false;  // the shapes then start with a batch dimension (-1)
};

// What /v2/repository/... calls on; model_repository.h has the one `attnzoo serve` uses.
class RepositoryControl {
 public:
  struct Entry {
    std::string name;
    std::string version;
    std::string state;  // "READY", "UNAVAILABLE", "LOADING", "UNLOADING"
    std::string reason;
  };
  virtual ~RepositoryControl() = default;
  virtual std::vector<Entry> index() const = 0;
  // Loads (or reloads) / unloads the model, then calls `done` (from any thread) with a refusal
  // of status 0 on success.
  virtual void load(const std::string& name, std::function<void(Refusal)> done) = 0;
  virtual void unload(const std::string& name, std::function<void(Refusal)> done) = 0;
};

class InferenceServer : public HttpHandler {
 public:
  // Starts each model's batcher, and `stream_threads` threads for the chunks of live audio.
  explicit InferenceServer(std::vector<ModelEndpoint> endpoints, int stream_threads = 2);
  ~InferenceServer() override;

  // --- the calls both transports make ---
  bool ready() const { return ready_; }
  static const std::vector<std::string>& extensions();
  // The model's metadata; false with the refusal (404) for an unknown model or version.
  bool model_metadata(const std::string& name, const std::string& version, ModelMetadata& out,
                      Refusal& refusal) const;
  bool model_ready(const std::string& name, const std::string& version) const;
  // Runs `request` through model `name` (`version` empty: the model's); `done` is called exactly
  // once, from any thread, perhaps before this returns.
  void infer(const std::string& name, const std::string& version, const InferRequest& request,
             InferDone done);
  // Live audio for a model that streams, as gRPC's sequences carry it: null with the refusal
  // (404: no such model or it does not stream; 503: max_streams reached or shutting down).
  std::unique_ptr<SpeechSequence> open_sequence(const std::string& name, const std::string& version,
                                                int64_t sample_rate, Refusal& refusal);
  // Runs a sequence's chunk on the stream threads; false once the server is draining.
  bool run_stream_task(std::function<void()> task) { return stream_pool_.submit(std::move(task)); }

  // --- the models ---
  // Serves `endpoint`'s model from now on, in place of a model of the same name if there is one
  // (retired as above).
  void install(ModelEndpoint endpoint);
  // Stops serving model `name` (retired as above); false when it is not served.
  bool remove(const std::string& name);
  std::vector<std::string> model_names() const;
  // Routes /v2/repository/... to `repository` (not owned; it outlives the server's requests).
  void set_repository(RepositoryControl* repository) { repository_ = repository; }

  // --- HTTP ---
  void handle(HttpRequest request, Respond respond) override;
  std::shared_ptr<StreamHandler> open_stream(const HttpRequest& request,
                                             HttpResponse& refusal) override;
  void responded(int status) override { metrics_->http_response(status); }

  // Not ready from now on; new infer requests and streams get 503. Then runs every queued request
  // and stream chunk to its end and stops the batchers, the retired models and the stream
  // threads: once it returns, every response has been handed to its transport.
  void drain();
  const ServerMetrics& metrics() const { return *metrics_; }

 private:
  struct Served {
    ModelEndpoint endpoint;
    std::unique_ptr<DynamicBatcher> batcher;
    std::shared_ptr<std::atomic<int64_t>> open_streams;
  };
  std::shared_ptr<Served> make_served(ModelEndpoint endpoint);
  // The model of that name and version, or null with the refusal (404).
  std::shared_ptr<Served> find(const std::string& name, const std::string& version,
                               Refusal& refusal) const;
  // A ticket for one more open stream of `served`, released with the stream; null with the
  // refusal when there is no room.
  std::shared_ptr<void> stream_ticket(const Served& served, Refusal& refusal);
  void infer_http(const std::string& name, const std::string& version, HttpRequest& request,
                  Respond& respond);
  void file_route(const std::shared_ptr<Served>& served, HttpRequest& request, Respond& respond);
  void repository_route(const std::vector<std::string>& parts, HttpRequest& request,
                        Respond& respond);
  // Queues a prepared job; calls `refuse` with the status and message when the queue refuses it.
  // `request_timeout_us`: the request's deadline, else the model's default_timeout_us.
  void submit(const Served& served, std::shared_ptr<BatchJob> job,
              std::optional<int64_t> request_timeout_us,
              const std::function<void(int, const std::string&)>& refuse);
  void retire(std::shared_ptr<Served> served);
  void retire_loop();

  // Shared with the open streams, which count themselves out when they end (perhaps after the
  // server).
  std::shared_ptr<ServerMetrics> metrics_ = std::make_shared<ServerMetrics>();
  TaskPool stream_pool_;
  mutable std::mutex models_mutex_;
  std::map<std::string, std::shared_ptr<Served>> models_;
  RepositoryControl* repository_ = nullptr;
  std::atomic<bool> ready_{true};

  // Models replaced or removed, stopped (their queues run to the end) and freed by retirer_.
  std::mutex retire_mutex_;
  std::condition_variable retire_wake_;
  std::vector<std::shared_ptr<Served>> retiring_;
  bool retire_stop_ = false;
  std::thread retirer_;
};

}  // namespace attnzoo::serve
