// The routes of `attnzoo serve`: the KServe v2 protocol over HTTP, a file route per model for
// people with curl, and the metrics.
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
//   GET  /metrics                             Prometheus text (metrics.h)
//
// Every error is {"error": "..."} with a 4xx (the request) or 5xx (the server) status; a full
// queue is 503 with Retry-After, a request whose deadline passed 504. A request's deadline is its
// "timeout" parameter (µs, Triton's), else the model's default_timeout_us, else none.
#pragma once

#include <attnzoo/serve/dynamic_batcher.h>
#include <attnzoo/serve/http_server.h>
#include <attnzoo/serve/metrics.h>
#include <attnzoo/serve/served_model.h>
#include <attnzoo/serve/task_pool.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>

namespace attnzoo::serve {

struct ModelEndpoint {
  std::shared_ptr<const ServedModel> model;
  BatchingOptions batching;
  int64_t default_timeout_us = 0;  // 0: no deadline unless the request sets one
  int64_t max_streams = 0;         // open WebSocket streams (models that stream); 0: none
  int64_t threads = 1;             // LibTorch threads of each instance (for what the server prints)
};

class InferenceServer : public HttpHandler {
 public:
  // Starts each model's batcher, and `stream_threads` threads for the chunks of live audio.
  explicit InferenceServer(std::vector<ModelEndpoint> endpoints, int stream_threads = 2);
  ~InferenceServer() override;

  void handle(HttpRequest request, Respond respond) override;
  std::shared_ptr<StreamHandler> open_stream(const HttpRequest& request,
                                             HttpResponse& refusal) override;
  void responded(int status) override { metrics_->http_response(status); }

  // Not ready from now on; new infer requests and streams get 503. Then runs every queued request
  // and stream chunk to its end and stops the batchers and stream threads: once it returns, every
  // response has been handed to the HTTP side.
  void drain();
  bool ready() const { return ready_; }
  const ServerMetrics& metrics() const { return *metrics_; }

 private:
  struct Served {
    ModelEndpoint endpoint;
    std::unique_ptr<DynamicBatcher> batcher;
    std::shared_ptr<std::atomic<int64_t>> open_streams;
  };
  void infer(const Served& served, HttpRequest& request, Respond& respond);
  void file_route(const Served& served, HttpRequest& request, Respond& respond);
  // Queues a prepared job; answers the request itself when the queue refuses it.
  void submit(const Served& served, std::shared_ptr<BatchJob> job, const InferRequest& request,
              Respond& respond);

  // Shared with the open streams, which count themselves out when they end (perhaps after the
  // server).
  std::shared_ptr<ServerMetrics> metrics_ = std::make_shared<ServerMetrics>();
  TaskPool stream_pool_;
  std::map<std::string, Served> models_;
  std::atomic<bool> ready_{true};
};

}  // namespace attnzoo::serve
