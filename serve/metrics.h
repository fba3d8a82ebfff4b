// The server's counters in Prometheus' text exposition format (GET /metrics). Where Triton
// Inference Server has a metric for the same thing, it has Triton's name, labels and meaning, so
// that dashboards made for Triton read attnzoo unchanged:
//
//   nv_inference_request_success{model,version}         requests answered with outputs
//   nv_inference_request_failure{model,version,reason}  requests that failed: REJECTED (queue
//       full or shutting down), TIMEOUT (deadline passed before the model ran), INVALID (a
//       request the model cannot take: 400), BACKEND (the model failed)
//   nv_inference_count{model,version}                   inferences (batch rows) computed
//   nv_inference_exec_count{model,version}              model executions (batches)
//   nv_inference_request_duration_us{model,version}     cumulative, arrival to response ready
//   nv_inference_queue_duration_us{model,version}       cumulative, time waiting for a batch
//   nv_inference_compute_input_duration_us              cumulative, request tensors to the
//       model's input (decoding, preprocessing, stacking)
//   nv_inference_compute_infer_duration_us              cumulative, the model's forward
//   nv_inference_compute_output_duration_us             cumulative, outputs to response tensors
//   nv_inference_pending_request_count{model,version}   gauge, requests queued now
//
// and, which Triton does not have:
//
//   attnzoo_inference_batch_size{model,version}         histogram of executed batch sizes (rows)
//   attnzoo_streams_opened_total{model,version}         live streams accepted (WebSocket
//                                                       streams and gRPC sequences)
//   attnzoo_streams_open{model,version}                 gauge, live streams open now
//   attnzoo_http_responses_total{code}                  every HTTP response by status code
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace attnzoo::serve {

enum class FailureReason { kRejected, kTimeout, kInvalid, kBackend };
const char* to_string(FailureReason reason);  // "REJECTED", ...

class ServerMetrics {
 public:
  // The batch size histogram's upper bounds (plus +Inf).
  static const std::vector<int64_t>& batch_buckets();

  // Every model is listed from the start (with zeros), as Triton lists its loaded models.
  void add_model(const std::string& model, const std::string& version);

  void request_succeeded(const std::string& model, double request_us);
  void request_failed(const std::string& model, FailureReason reason);
  // One execution of `rows` batch rows; queue_us_total: the time its requests waited, summed.
  void batch_executed(const std::string& model, int64_t rows, double queue_us_total,
                      double input_us, double infer_us, double output_us);
  void set_pending(const std::string& model, int64_t pending);
  void stream_opened(const std::string& model);
  void stream_closed(const std::string& model);
  void http_response(int status);

  std::string render() const;

 private:
  struct ModelCounters {
    std::string version;
    int64_t success = 0;
    std::map<FailureReason, int64_t> failure;
    int64_t inference_count = 0;
    int64_t exec_count = 0;
    double request_us = 0;
    double queue_us = 0;
    double input_us = 0;
    double infer_us = 0;
    double output_us = 0;
    int64_t pending = 0;
    int64_t streams_opened = 0;
    int64_t streams_open = 0;
    std::vector<int64_t> batch_counts;  // per bucket, not cumulative; the last is +Inf
    int64_t batch_rows_sum = 0;
  };
  ModelCounters& counters(const std::string& model);

  mutable std::mutex mutex_;
  std::map<std::string, ModelCounters> models_;
  std::map<int, int64_t> http_;
};

}  // namespace attnzoo::serve
