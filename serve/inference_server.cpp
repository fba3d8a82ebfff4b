#include <attnzoo/serve/inference_server.h>

#include <attnzoo/api/intra_op_threads.h>
#include <attnzoo/core/version.h>
#include <attnzoo/serve/model_job.h>

#include <nlohmann/json.hpp>

#include <malloc.h>

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

HttpResponse refusal_response(const Refusal& refusal) {
  return error_response(refusal.status, refusal.message);
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
    models_.emplace(name, make_served(std::move(endpoint)));
  }
  retirer_ = std::thread([this] { retire_loop(); });
}

InferenceServer::~InferenceServer() { drain(); }

std::shared_ptr<InferenceServer::Served> InferenceServer::make_served(ModelEndpoint endpoint) {
  const auto& name = endpoint.model->name();
  metrics_->add_model(name, endpoint.model->version());
  auto model = endpoint.model;
  auto batcher = std::make_unique<DynamicBatcher>(
      name, endpoint.batching,
      [model](std::vector<std::shared_ptr<BatchJob>>& jobs) { return model->run(jobs); },
      metrics_.get());
  return std::make_shared<Served>(
      Served{std::move(endpoint), std::move(batcher), std::make_shared<std::atomic<int64_t>>(0)});
}

void InferenceServer::install(ModelEndpoint endpoint) {
  auto served = make_served(std::move(endpoint));
  std::shared_ptr<Served> old;
  {
    std::lock_guard<std::mutex> lock(models_mutex_);
    auto& slot = models_[served->endpoint.model->name()];
    old = std::move(slot);
    slot = std::move(served);
  }
  if (old) retire(std::move(old));
}

bool InferenceServer::remove(const std::string& name) {
  std::shared_ptr<Served> old;
  {
    std::lock_guard<std::mutex> lock(models_mutex_);
    const auto found = models_.find(name);
    if (found == models_.end()) return false;
    old = std::move(found->second);
    models_.erase(found);
  }
  retire(std::move(old));
  return true;
}

std::vector<std::string> InferenceServer::model_names() const {
  std::lock_guard<std::mutex> lock(models_mutex_);
  std::vector<std::string> names;
  for (const auto& [name, served] : models_) names.push_back(name);
  return names;
}

void InferenceServer::retire(std::shared_ptr<Served> served) {
  std::lock_guard<std::mutex> lock(retire_mutex_);
  retiring_.push_back(std::move(served));
  retire_wake_.notify_one();
}

void InferenceServer::retire_loop() {
  std::unique_lock<std::mutex> lock(retire_mutex_);
  while (true) {
    retire_wake_.wait(lock, [this] { return retire_stop_ || !retiring_.empty(); });
    if (retiring_.empty()) return;
    auto served = std::move(retiring_.front());
    retiring_.erase(retiring_.begin());
    lock.unlock();
    // Requests that found the model before it left the map hold it until they have queued
    // their jobs; once they have, the queue runs to its end and the instances stop.
    while (served.use_count() > 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    served->batcher->stop();
    served.reset();
    // The weights were freed: give the heap's free pages back to the system, so that a model
    // unloaded is memory returned.
    malloc_trim(0);
    lock.lock();
  }
}

void InferenceServer::drain() {
  ready_ = false;
  std::vector<std::shared_ptr<Served>> served;
  {
    std::lock_guard<std::mutex> lock(models_mutex_);
    for (auto& [name, s] : models_) served.push_back(s);
  }
  for (auto& s : served) s->batcher->stop();
  {
    std::lock_guard<std::mutex> lock(retire_mutex_);
    retire_stop_ = true;
    retire_wake_.notify_one();
  }
  if (retirer_.joinable()) retirer_.join();
  stream_pool_.stop();
}

const std::vector<std::string>& InferenceServer::extensions() {
  static const std::vector<std::string> names{"binary_tensor_data", "classification",
                                              "model_repository"};
  return names;
}

std::shared_ptr<InferenceServer::Served> InferenceServer::find(const std::string& name,
                                                               const std::string& version,
                                                               Refusal& refusal) const {
  std::shared_ptr<Served> served;
  {
    std::lock_guard<std::mutex> lock(models_mutex_);
    const auto found = models_.find(name);
    if (found != models_.end()) served = found->second;
  }
  if (!served) {
    refusal = {404, "unknown model '" + name + "'"};
    return nullptr;
  }
  if (!version.empty() && version != served->endpoint.model->version()) {
    refusal = {404, "model '" + name + "' has no version '" + version + "'"};
    return nullptr;
  }
  return served;
}

bool InferenceServer::model_metadata(const std::string& name, const std::string& version,
                                     ModelMetadata& out, Refusal& refusal) const {
  const auto served = find(name, version, refusal);
  if (!served) return false;
  const auto& model = *served->endpoint.model;
  out.name = model.name();
  out.version = model.version();
  out.platform = std::string("attnzoo_") + model.kind();
  out.inputs = model.inputs();
  out.outputs = model.outputs();
  out.batched = served->endpoint.batching.max_batch_size > 0;
  return true;
}

bool InferenceServer::model_ready(const std::string& name, const std::string& version) const {
  Refusal refusal;
  return ready_ && find(name, version, refusal) != nullptr;
}

std::shared_ptr<void> InferenceServer::stream_ticket(const Served& served, Refusal& refusal) {
  const auto& model = *served.endpoint.model;
  if (const auto why = model.why_no_stream(); !why.empty()) {
    refusal = {404, "model '" + model.name() + "' does not stream: " + why};
    return nullptr;
  }
  if (served.endpoint.max_streams == 0) {
    refusal = {404, "model '" + model.name() + "' takes no streams (max_streams 0)"};
    return nullptr;
  }
  if (!ready_) {
    refusal = {503, "the server is shutting down"};
    return nullptr;
  }
  auto open = served.open_streams;
  if (open->fetch_add(1) >= served.endpoint.max_streams) {
    open->fetch_sub(1);
    refusal = {503, "model '" + model.name() + "': " + std::to_string(served.endpoint.max_streams) +
                        " streams are open (max_streams); try again later"};
    return nullptr;
  }
  metrics_->stream_opened(model.name());
  // Not null (callers test it): it points at the counter it holds.
  return std::shared_ptr<void>(open.get(), [open, metrics = metrics_, name = model.name()](void*) {
    open->fetch_sub(1);
    metrics->stream_closed(name);
  });
}

std::unique_ptr<SpeechSequence> InferenceServer::open_sequence(const std::string& name,
                                                               const std::string& version,
                                                               int64_t sample_rate,
                                                               Refusal& refusal) {
  const auto served = find(name, version, refusal);
  if (!served) return nullptr;
  auto ticket = stream_ticket(*served, refusal);
  if (!ticket) return nullptr;
  return served->endpoint.model->open_sequence(sample_rate, std::move(ticket));
}

std::shared_ptr<StreamHandler> InferenceServer::open_stream(const HttpRequest& request,
                                                            HttpResponse& refusal) {
  const auto parts = path_parts(request.path);
  if (parts.size() != 4 || parts[0] != "v2" || parts[1] != "models" || parts[3] != "stream") {
    refusal = error_response(
        404, "no WebSocket route " + request.path + " (streams are at /v2/models/{model}/stream)");
    return nullptr;
  }
  Refusal why;
  const auto served = find(parts[2], "", why);
  auto ticket = served ? stream_ticket(*served, why) : nullptr;
  if (!ticket) {
    refusal = refusal_response(why);
    return nullptr;
  }
  return served->endpoint.model->open_stream(stream_pool_, std::move(ticket));
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
    return respond(json_response(
        200, {{"name", "attnzoo"}, {"version", version()}, {"extensions", extensions()}}));
  }
  if (parts.size() == 3 && parts[1] == "health" && (parts[2] == "live" || parts[2] == "ready")) {
    if (!get) return method_not_allowed();
    return respond(empty_response(parts[2] == "live" || ready_ ? 200 : 400));
  }
  if (parts[1] == "repository") {
    if (!post) return method_not_allowed();
    return repository_route(parts, request, respond);
  }
  if (parts.size() < 3 || parts[1] != "models") {
    return respond(error_response(404, "no route " + request.path));
  }
  const auto& name = parts[2];
  std::string version;
  size_t next = 3;
  if (parts.size() >= 5 && parts[3] == "versions") {
    version = parts[4];
    next = 5;
  }
  Refusal refusal;
  const auto served = find(name, version, refusal);
  if (!served) return respond(refusal_response(refusal));
  if (parts.size() == next) {
    if (!get) return method_not_allowed();
    ModelMetadata metadata;
    if (!model_metadata(name, version, metadata, refusal)) {
      return respond(refusal_response(refusal));
    }
    json body = {{"name", metadata.name},
                 {"versions", {metadata.version}},
                 {"platform", metadata.platform},
                 {"inputs", json::array()},
                 {"outputs", json::array()}};
    for (const auto& spec : metadata.inputs) {
      body["inputs"].push_back(tensor_metadata(spec, metadata.batched));
    }
    for (const auto& spec : metadata.outputs) {
      body["outputs"].push_back(tensor_metadata(spec, metadata.batched));
    }
    return respond(json_response(200, body));
  }
  if (parts.size() == next + 1) {
    const auto& action = parts[next];
    if (action == "ready") {
      if (!get) return method_not_allowed();
      return respond(empty_response(model_ready(name, version) ? 200 : 400));
    }
    if (action == "infer") {
      if (!post) return method_not_allowed();
      return infer_http(name, version, request, respond);
    }
    if (action == served->endpoint.model->file_route() && next == 3) {
      if (!post) return method_not_allowed();
      return file_route(served, request, respond);
    }
  }
  respond(error_response(404, "no route " + request.path));
}

void InferenceServer::repository_route(const std::vector<std::string>& parts, HttpRequest& request,
                                       Respond& respond) {
  if (repository_ == nullptr) {
    return respond(error_response(
        404, "no model repository: start the server with --model-repository to manage models"));
  }
  if (parts.size() == 3 && parts[2] == "index") {
    bool ready_only = false;
    if (!request.body.empty()) {
      const auto body = json::parse(request.body, nullptr, false);
      if (body.is_discarded() || !body.is_object()) {
        return respond(error_response(400, "the repository index request must be a JSON object"));
      }
      if (const auto it = body.find("ready"); it != body.end()) {
        if (!it->is_boolean()) return respond(error_response(400, "\"ready\" must be a boolean"));
        ready_only = it->get<bool>();
      }
    }
    auto models = json::array();
    for (const auto& entry : repository_->index()) {
      if (ready_only && entry.state != "READY") continue;
      json model = {{"name", entry.name}, {"state", entry.state}};
      if (!entry.version.empty()) model["version"] = entry.version;
      if (!entry.reason.empty()) model["reason"] = entry.reason;
      models.push_back(std::move(model));
    }
    return respond(json_response(200, models));
  }
  if (parts.size() == 5 && parts[2] == "models" && (parts[4] == "load" || parts[4] == "unload")) {
    auto done = [respond](Refusal refusal) {
      if (refusal.status != 0) return respond(refusal_response(refusal));
      respond(json_response(200, json::object()));
    };
    if (parts[4] == "load") return repository_->load(parts[3], done);
    return repository_->unload(parts[3], done);
  }
  respond(error_response(404, "no route " + request.path));
}

void InferenceServer::submit(const Served& served, std::shared_ptr<BatchJob> job,
                             std::optional<int64_t> request_timeout_us,
                             const std::function<void(int, const std::string&)>& refuse) {
  const auto& name = served.endpoint.model->name();
  const int64_t timeout_us = request_timeout_us.value_or(served.endpoint.default_timeout_us);
  if (timeout_us > 0) job->deadline = Clock::now() + std::chrono::microseconds(timeout_us);
  switch (served.batcher->submit(job)) {
    case DynamicBatcher::Admission::kQueued:
      return;
    case DynamicBatcher::Admission::kQueueFull:
      metrics_->request_failed(name, FailureReason::kRejected);
      return refuse(503, "model '" + name + "': the queue is full (" +
                             std::to_string(served.endpoint.batching.max_queue_size) +
                             " requests); try again later");
    case DynamicBatcher::Admission::kStopped:
      metrics_->request_failed(name, FailureReason::kRejected);
      return refuse(503, "the server is shutting down");
    case DynamicBatcher::Admission::kTooLarge:
      metrics_->request_failed(name, FailureReason::kInvalid);
      return refuse(400, "model '" + name + "': a request of " + std::to_string(job->rows()) +
                             " rows is more than max_batch_size " +
                             std::to_string(served.endpoint.batching.max_batch_size));
  }
}

void InferenceServer::infer(const std::string& name, const std::string& version,
                            const InferRequest& request, InferDone done) {
  const auto start = Clock::now();
  const auto refuse = [&done](int status, const std::string& message) {
    InferReply reply;
    reply.status = status;
    reply.error = message;
    done(std::move(reply));
  };
  Refusal refusal;
  const auto served = find(name, version, refusal);
  if (!served) return refuse(refusal.status, refusal.message);
  const auto& model = served->endpoint.model;
  if (!ready_) {
    metrics_->request_failed(name, FailureReason::kRejected);
    return refuse(503, "the server is shutting down");
  }
  std::shared_ptr<BatchJob> job;
  try {
    job = model->prepare(request, [this, done, name, version = model->version(), id = request.id,
                                   start](InferOutcome outcome) {
      InferReply reply;
      if (!outcome.ok()) {
        metrics_->request_failed(name, outcome.reason);
        reply.status = outcome.status;
        reply.error = std::move(outcome.error);
        return done(std::move(reply));
      }
      reply.response = InferResponse{name, version, id, std::move(outcome.outputs)};
      metrics_->request_succeeded(name, microseconds_between(start, Clock::now()));
      done(std::move(reply));
    });
  } catch (const Error& e) {
    metrics_->request_failed(name, FailureReason::kInvalid);
    return refuse(400, e.what());
  }
  submit(*served, std::move(job), request.timeout_us, refuse);
}

void InferenceServer::infer_http(const std::string& name, const std::string& version,
                                 HttpRequest& request, Respond& respond) {
  InferRequest parsed;
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
  } catch (const Error& e) {
    metrics_->request_failed(name, FailureReason::kInvalid);
    return respond(error_response(400, e.what()));
  }
  request.body.clear();
  request.body.shrink_to_fit();
  infer(name, version, parsed, [respond](InferReply reply) {
    if (!reply.ok()) return respond(error_response(reply.status, reply.error));
    auto encoded = encode_infer_response(reply.response);
    HttpResponse http;
    http.body = std::move(encoded.body);
    if (encoded.json_length) {
      http.content_type = "application/octet-stream";
      http.headers.emplace_back("Inference-Header-Content-Length",
                                std::to_string(*encoded.json_length));
    }
    respond(std::move(http));
  });
}

void InferenceServer::file_route(const std::shared_ptr<Served>& served, HttpRequest& request,
                                 Respond& respond) {
  const auto& model = served->endpoint.model;
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
  submit(*served, std::move(job), synthetic.timeout_us,
         [&respond](int status, const std::string& message) {
           respond(error_response(status, message));
         });
}

}  // namespace attnzoo::serve
