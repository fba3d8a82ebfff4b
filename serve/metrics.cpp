#include <attnzoo/serve/metrics.h>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace attnzoo::serve {
namespace {

constexpr FailureReason kReasons[] = {FailureReason::kRejected, FailureReason::kTimeout,
                                      FailureReason::kInvalid, FailureReason::kBackend};

// Prometheus label values escape backslash, double quote and newline.
std::string escaped(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

// Durations are whole microseconds, as Triton reports them.
std::string microseconds(double value) { return std::to_string(std::llround(value)); }

void header(std::ostringstream& out, const char* name, const char* type, const char* help) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

}  // namespace

const char* to_string(FailureReason reason) {
  switch (reason) {
    case FailureReason::kRejected:
      return "REJECTED";
    case FailureReason::kTimeout:
      return "TIMEOUT";
    case FailureReason::kInvalid:
      return "INVALID";
    case FailureReason::kBackend:
      return "BACKEND";
  }
  return "OTHER";
}

const std::vector<int64_t>& ServerMetrics::batch_buckets() {
  static const std::vector<int64_t> buckets = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  return buckets;
}

void ServerMetrics::add_model(const std::string& model, const std::string& version) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& c = models_[model];
  c.version = version;
  // A model loaded again (a reload) keeps its counters, as Prometheus' counters must.
  if (c.batch_counts.empty()) c.batch_counts.assign(batch_buckets().size() + 1, 0);
}

ServerMetrics::ModelCounters& ServerMetrics::counters(const std::string& model) {
  auto& c = models_[model];
  if (c.batch_counts.empty()) {
    c.version = "1";
    c.batch_counts.assign(batch_buckets().size() + 1, 0);
  }
  return c;
}

void ServerMetrics::request_succeeded(const std::string& model, double request_us) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& c = counters(model);
  ++c.success;
  c.request_us += request_us;
}

void ServerMetrics::request_failed(const std::string& model, FailureReason reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++counters(model).failure[reason];
}

void ServerMetrics::batch_executed(const std::string& model, int64_t rows, double queue_us_total,
                                   double input_us, double infer_us, double output_us) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& c = counters(model);
  ++c.exec_count;
  c.inference_count += rows;
  c.queue_us += queue_us_total;
  c.input_us += input_us;
  c.infer_us += infer_us;
  c.output_us += output_us;
  const auto& bounds = batch_buckets();
  const auto bucket = std::lower_bound(bounds.begin(), bounds.end(), rows) - bounds.begin();
  ++c.batch_counts[static_cast<size_t>(bucket)];
  c.batch_rows_sum += rows;
}

void ServerMetrics::stream_opened(const std::string& model) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& c = counters(model);
  ++c.streams_opened;
  ++c.streams_open;
}

void ServerMetrics::stream_closed(const std::string& model) {
  std::lock_guard<std::mutex> lock(mutex_);
  --counters(model).streams_open;
}

void ServerMetrics::set_pending(const std::string& model, int64_t pending) {
  std::lock_guard<std::mutex> lock(mutex_);
  counters(model).pending = pending;
}

void ServerMetrics::http_response(int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++http_[status];
}

std::string ServerMetrics::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  const auto labels = [](const std::string& model, const ModelCounters& c) {
    return "model=\"" + escaped(model) + "\",version=\"" + escaped(c.version) + "\"";
  };
  const auto per_model = [&](const char* name, const char* type, const char* help, auto value) {
    header(out, name, type, help);
    for (const auto& [model, c] : models_) {
      out << name << "{" << labels(model, c) << "} " << value(c) << "\n";
    }
  };
  per_model("nv_inference_request_success", "counter",
            "Number of successful inference requests, all batch sizes",
            [](const ModelCounters& c) { return std::to_string(c.success); });
  header(out, "nv_inference_request_failure", "counter",
         "Number of failed inference requests, all batch sizes");
  for (const auto& [model, c] : models_) {
    for (const auto reason : kReasons) {
      const auto it = c.failure.find(reason);
      out << "nv_inference_request_failure{" << labels(model, c) << ",reason=\""
          << to_string(reason) << "\"} " << (it == c.failure.end() ? 0 : it->second) << "\n";
    }
  }
  per_model("nv_inference_count", "counter",
            "Number of inferences performed (does not include cached requests)",
            [](const ModelCounters& c) { return std::to_string(c.inference_count); });
  per_model("nv_inference_exec_count", "counter",
            "Number of model executions performed (does not include cached requests)",
            [](const ModelCounters& c) { return std::to_string(c.exec_count); });
  per_model("nv_inference_request_duration_us", "counter",
            "Cumulative inference request duration in microseconds",
            [](const ModelCounters& c) { return microseconds(c.request_us); });
  per_model("nv_inference_queue_duration_us", "counter",
            "Cumulative inference queuing duration in microseconds",
            [](const ModelCounters& c) { return microseconds(c.queue_us); });
  per_model("nv_inference_compute_input_duration_us", "counter",
            "Cumulative compute input duration in microseconds",
            [](const ModelCounters& c) { return microseconds(c.input_us); });
  per_model("nv_inference_compute_infer_duration_us", "counter",
            "Cumulative compute inference duration in microseconds",
            [](const ModelCounters& c) { return microseconds(c.infer_us); });
  per_model("nv_inference_compute_output_duration_us", "counter",
            "Cumulative inference compute output duration in microseconds",
            [](const ModelCounters& c) { return microseconds(c.output_us); });
  per_model("nv_inference_pending_request_count", "gauge",
            "Instantaneous number of pending requests awaiting execution per-model",
            [](const ModelCounters& c) { return std::to_string(c.pending); });

  header(out, "attnzoo_inference_batch_size", "histogram",
         "Batch sizes (rows) of the model executions");
  const auto& bounds = batch_buckets();
  for (const auto& [model, c] : models_) {
    int64_t cumulative = 0;
    for (size_t b = 0; b <= bounds.size(); ++b) {
      cumulative += c.batch_counts[b];
      out << "attnzoo_inference_batch_size_bucket{" << labels(model, c) << ",le=\""
          << (b < bounds.size() ? std::to_string(bounds[b]) : "+Inf") << "\"} " << cumulative
          << "\n";
    }
    out << "attnzoo_inference_batch_size_sum{" << labels(model, c) << "} " << c.batch_rows_sum
        << "\n";
    out << "attnzoo_inference_batch_size_count{" << labels(model, c) << "} " << c.exec_count
        << "\n";
  }
  per_model("attnzoo_streams_opened_total", "counter", "WebSocket streams accepted",
            [](const ModelCounters& c) { return std::to_string(c.streams_opened); });
  per_model("attnzoo_streams_open", "gauge", "WebSocket streams open now",
            [](const ModelCounters& c) { return std::to_string(c.streams_open); });
  header(out, "attnzoo_http_responses_total", "counter", "HTTP responses by status code");
  for (const auto& [code, count] : http_) {
    out << "attnzoo_http_responses_total{code=\"" << code << "\"} " << count << "\n";
  }
  return out.str();
}

}  // namespace attnzoo::serve
