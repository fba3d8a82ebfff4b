#include <attnzoo/serve/inference_server.h>

#include <attnzoo/api/intra_op_threads.h>
#include <attnzoo/core/version.h>
#include <attnzoo/serve/model_job.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <sstream>

namespace attnzoo::serve {
namespace {

using nlohmann::json;

HttpResponse json_response(int status, const json& body) {
  HttpResponse response;
  response.status = status;
  response.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return response;
}

HttpResponse error_response(int status, const std::string& message) {
  HttpResponse response;
  response.status = status;
  response.body = error_body(message);
  if (status == 503) response.headers.emplace_back("Retry-After", "1");
  return response;
}

HttpResponse empty_response(int status) {
  HttpResponse response;
  response.status = status;
  response.content_type = "text/plain";
  return response;
}

std::vector<std::string> path_parts(const std::string& path) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(path);
  while (std::getline(in, part, '/')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

json tensor_metadata(const TensorSpec& spec, bool batched) {
  std::vector<int64_t> shape;
  if (batched) shape.push_back(-1);
  shape.insert(shape.end(), spec.dims.begin(), spec.dims.end());
  return {{"name", spec.name}, {"datatype", to_string(spec.datatype)}, {"shape", shape}};
}

}  // namespace

InferenceServer::InferenceServer(std::vector<ModelEndpoint> endpoints, int stream_threads)
    // Many streams at once, each chunk on one thread: their ops start no OpenMP teams beside the
    // batchers' (api/intra_op_threads.h).
    : stream_pool_(stream_threads, use_one_intra_op_thread) {
  for (auto& endpoint : endpoints) {
    const auto name = endpoint.model->name();
    if (models_.count(name) != 0) throw std::invalid_argument("serve: model '" + name + "' twice");
    metrics_->add_model(name, endpoint.model->version());
    auto model = endpoint.model;
    auto batcher = std::make_unique<DynamicBatcher>(
        name, endpoint.batching,
        [model](std::vector<std::shared_ptr<BatchJob>>& jobs) { return model->run(jobs); },
        metrics_.get());
    models_.emplace(name, Served{std::move(endpoint), std::move(batcher),
                                 std::make_shared<std::atomic<int64_t>>(0)});
  }
}

InferenceServer::~InferenceServer() { drain(); }

void InferenceServer::drain() {
  ready_ = false;
  for (auto& [name, served] : models_) served.batcher->stop();
  stream_pool_.stop();
}

std::shared_ptr<StreamHandler> InferenceServer::open_stream(const HttpRequest& request,
                                                            HttpResponse& refusal) {
  const auto parts = path_parts(request.path);
  if (parts.size() != 4 || parts[0] != "v2" || parts[1] != "models" || parts[3] != "stream") {
    refusal = error_response(
        404, "no WebSocket route " + request.path + " (streams are at /v2/models/{model}/stream)");
    return nullptr;
  }
  const auto found = models_.find(parts[2]);
  if (found == models_.end()) {
    refusal = error_response(404, "unknown model '" + parts[2] + "'");
    return nullptr;
  }
  const Served& served = found->second;
  const auto& model = *served.endpoint.model;
  if (const auto why = model.why_no_stream(); !why.empty()) {
    refusal = error_response(404, "model '" + model.name() + "' does not stream: " + why);
    return nullptr;
  }
  if (served.endpoint.max_streams == 0) {
    refusal =
        error_response(404, "model '" + model.name() + "' has no stream route (max_streams 0)");
    return nullptr;
  }
  if (!ready_) {
    refusal = error_response(503, "the server is shutting down");
    return nullptr;
  }
  // A ticket per open stream, released when the stream goes.
  auto open = served.open_streams;
  if (open->fetch_add(1) >= served.endpoint.max_streams) {
    open->fetch_sub(1);
    refusal = error_response(503, "model '" + model.name() +
                                      "': " + std::to_string(served.endpoint.max_streams) +
                                      " streams are open (max_streams); try again later");
    return nullptr;
  }
  metrics_->stream_opened(model.name());
  std::shared_ptr<void> ticket(nullptr, [open, metrics = metrics_, name = model.name()](void*) {
    open->fetch_sub(1);
    metrics->stream_closed(name);
  });
  return model.open_stream(stream_pool_, std::move(ticket));
}

void InferenceServer::handle(HttpRequest request, Respond respond) {
  const auto parts = path_parts(request.path);
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  const auto method_not_allowed = [&] {
    respond(error_response(405, "method " + request.method + " not allowed on " + request.path));
  };
  if (parts.size() == 1 && parts[0] == "metrics") {
    if (!get) return method_not_allowed();
    HttpResponse response;
    response.content_type = "text/plain; version=0.0.4";
    response.body = metrics_->render();
    return respond(std::move(response));
  }
  if (parts.empty() || parts[0] != "v2") {
    return respond(error_response(404, "no route " + request.path));
  }
  if (parts.size() == 1) {
    if (!get) return method_not_allowed();
    return respond(json_response(200, {{"name", "attnzoo"},
                                       {"version", version()},
                                       {"extensions", {"binary_tensor_data", "classification"}}}));
  }
  if (parts.size() == 3 && parts[1] == "health" && (parts[2] == "live" || parts[2] == "ready")) {
    if (!get) return method_not_allowed();
    return respond(empty_response(parts[2] == "live" || ready_ ? 200 : 400));
  }
  if (parts.size() < 3 || parts[1] != "models") {
    return respond(error_response(404, "no route " + request.path));
  }
  const auto found = models_.find(parts[2]);
  if (found == models_.end()) {
    return respond(error_response(404, "unknown model '" + parts[2] + "'"));
  }
  const Served& served = found->second;
  const auto& model = *served.endpoint.model;
  size_t next = 3;
  if (parts.size() >= 5 && parts[3] == "versions") {
    if (parts[4] != model.version()) {
      return respond(
          error_response(404, "model '" + model.name() + "' has no version '" + parts[4] + "'"));
    }
    next = 5;
  }
  if (parts.size() == next) {
    if (!get) return method_not_allowed();
    json metadata = {{"name", model.name()},
                     {"versions", {model.version()}},
                     {"platform", std::string("attnzoo_") + model.kind()}};
    const bool batched = served.endpoint.batching.max_batch_size > 0;
    metadata["inputs"] = json::array();
    for (const auto& spec : model.inputs())
      metadata["inputs"].push_back(tensor_metadata(spec, batched));
    metadata["outputs"] = json::array();
    for (const auto& spec : model.outputs()) {
      metadata["outputs"].push_back(tensor_metadata(spec, batched));
    }
    return respond(json_response(200, metadata));
  }
  if (parts.size() == next + 1) {
    const auto& action = parts[next];
    if (action == "ready") {
      if (!get) return method_not_allowed();
      return respond(empty_response(ready_ ? 200 : 400));
    }
    if (action == "infer") {
      if (!post) return method_not_allowed();
      return infer(served, request, respond);
    }
    if (action == model.file_route() && next == 3) {
      if (!post) return method_not_allowed();
      return file_route(served, request, respond);
    }
  }
  respond(error_response(404, "no route " + request.path));
}

void InferenceServer::submit(const Served& served, std::shared_ptr<BatchJob> job,
                             const InferRequest& request, Respond& respond) {
  const auto& name = served.endpoint.model->name();
  const int64_t timeout_us = request.timeout_us.value_or(served.endpoint.default_timeout_us);
  if (timeout_us > 0) job->deadline = Clock::now() + std::chrono::microseconds(timeout_us);
  switch (served.batcher->submit(job)) {
    case DynamicBatcher::Admission::kQueued:
      return;
    case DynamicBatcher::Admission::kQueueFull:
      metrics_->request_failed(name, FailureReason::kRejected);
      return respond(
          error_response(503, "model '" + name + "': the queue is full (" +
                                  std::to_string(served.endpoint.batching.max_queue_size) +
                                  " requests); try again later"));
    case DynamicBatcher::Admission::kStopped:
      metrics_->request_failed(name, FailureReason::kRejected);
      return respond(error_response(503, "the server is shutting down"));
    case DynamicBatcher::Admission::kTooLarge:
      metrics_->request_failed(name, FailureReason::kInvalid);
      return respond(
          error_response(400, "model '" + name + "': a request of " + std::to_string(job->rows()) +
                                  " rows is more than max_batch_size " +
                                  std::to_string(served.endpoint.batching.max_batch_size)));
  }
}

void InferenceServer::infer(const Served& served, HttpRequest& request, Respond& respond) {
  const auto start = Clock::now();
  const auto& model = served.endpoint.model;
  const auto& name = model->name();
  if (!ready_) {
    metrics_->request_failed(name, FailureReason::kRejected);
    return respond(error_response(503, "the server is shutting down"));
  }
  InferRequest parsed;
  std::shared_ptr<BatchJob> job;
  try {
    std::optional<size_t> json_length;
    if (const auto* header = request.header("inference-header-content-length")) {
      char* end = nullptr;
      const auto value = std::strtoull(header->c_str(), &end, 10);
      if (header->empty() || *end != '\0') {
        throw ProtocolError("Inference-Header-Content-Length '" + *header +
                            "' is not a number of bytes");
      }
      json_length = static_cast<size_t>(value);
    }
    parsed = parse_infer_request(request.body, json_length);
    request.body.clear();
    request.body.shrink_to_fit();
    job = model->prepare(parsed, [this, respond, name, version = model->version(), id = parsed.id,
                                  start](InferOutcome outcome) {
      if (!outcome.ok()) {
        metrics_->request_failed(name, outcome.reason);
        return respond(error_response(outcome.status, outcome.error));
      }
      InferResponse response{name, version, id, std::move(outcome.outputs)};
      auto encoded = encode_infer_response(response);
      HttpResponse http;
      http.body = std::move(encoded.body);
      if (encoded.json_length) {
        http.content_type = "application/octet-stream";
        http.headers.emplace_back("Inference-Header-Content-Length",
                                  std::to_string(*encoded.json_length));
      }
      metrics_->request_succeeded(name, microseconds_between(start, Clock::now()));
      respond(std::move(http));
    });
  } catch (const Error& e) {
    metrics_->request_failed(name, FailureReason::kInvalid);
    return respond(error_response(400, e.what()));
  }
  submit(served, std::move(job), parsed, respond);
}

void InferenceServer::file_route(const Served& served, HttpRequest& request, Respond& respond) {
  const auto& model = served.endpoint.model;
  const auto& name = model->name();
  if (!ready_) {
    metrics_->request_failed(name, FailureReason::kRejected);
    return respond(error_response(503, "the server is shutting down"));
  }
  std::shared_ptr<BatchJob> job;
  InferRequest synthetic;
  const auto start = Clock::now();
  try {
    auto call = model->file_call(std::move(request.body), request.query);
    request.body.clear();
    synthetic = std::move(call.request);
    job = model->prepare(synthetic, [this, respond, name, start,
                                     answer = std::move(call.answer)](InferOutcome outcome) {
      if (!outcome.ok()) {
        metrics_->request_failed(name, outcome.reason);
        return respond(error_response(outcome.status, outcome.error));
      }
      HttpResponse response;
      try {
        response.body = answer(outcome.outputs);
      } catch (const std::exception& e) {
        metrics_->request_failed(name, FailureReason::kBackend);
        return respond(error_response(500, e.what()));
      }
      metrics_->request_succeeded(name, microseconds_between(start, Clock::now()));
      respond(std::move(response));
    });
  } catch (const Error& e) {
    metrics_->request_failed(name, FailureReason::kInvalid);
    return respond(error_response(400, e.what()));
  }
  submit(served, std::move(job), synthetic, respond);
}

}  // namespace attnzoo::serve
