#include <attnzoo/serve/grpc_server.h>

#include <attnzoo/core/version.h>
#include <attnzoo/serve/grpc_messages.h>

#include "kserve_v2.grpc.pb.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>

namespace attnzoo::serve {
namespace {

using grpc::CallbackServerContext;
using grpc::ServerUnaryReactor;
using grpc::Status;
using grpc::StatusCode;
namespace pb = inference;

StatusCode code_of(int http_status) {
  switch (http_status) {
    case 400:
      return StatusCode::INVALID_ARGUMENT;
    case 404:
      return StatusCode::NOT_FOUND;
    case 413:
      return StatusCode::RESOURCE_EXHAUSTED;
    case 503:
      return StatusCode::UNAVAILABLE;
    case 504:
      return StatusCode::DEADLINE_EXCEEDED;
    default:
      return http_status >= 400 && http_status < 500 ? StatusCode::INVALID_ARGUMENT
                                                     : StatusCode::INTERNAL;
  }
}

Status status_of(const Refusal& refusal) {
  if (refusal.status == 0) return Status::OK;
  return Status(code_of(refusal.status), refusal.message);
}

ServerUnaryReactor* finish(CallbackServerContext* context, const Status& status) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// The request's deadline in µs from now: its "timeout" parameter or the client's deadline,
// whichever comes first.
void apply_client_deadline(const CallbackServerContext& context, InferRequest& request) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return;
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
                        deadline - std::chrono::system_clock::now())
                        .count();
  const int64_t timeout = std::max<int64_t>(1, left);
  request.timeout_us = std::min(request.timeout_us.value_or(timeout), timeout);
}

}  // namespace

struct GrpcServer::Impl : public pb::GRPCInferenceService::CallbackService {
  class Stream;

  GrpcServerOptions options;
  InferenceServer& server;
  RepositoryControl* repository;
  std::unique_ptr<grpc::Server> grpc_server;
  int port = 0;

  // The open streams, each held here until its OnDone (so that stop_accepting() may reach it
  // outside the lock).
  std::mutex streams_mutex;
  std::map<Stream*, std::shared_ptr<Stream>> streams;
  bool stopping = false;

  Impl(GrpcServerOptions o, InferenceServer& s, RepositoryControl* r)
      : options(std::move(o)), server(s), repository(r) {}

  // Runs options.thread_start once on the calling gRPC thread.
  void enter() const {
    thread_local bool started = false;
    if (!started) {
      started = true;
      if (options.thread_start) options.thread_start();
    }
  }

  ServerUnaryReactor* ServerLive(CallbackServerContext* context, const pb::ServerLiveRequest*,
                                 pb::ServerLiveResponse* response) override {
    response->set_live(true);
    return finish(context, Status::OK);
  }

  ServerUnaryReactor* ServerReady(CallbackServerContext* context, const pb::ServerReadyRequest*,
                                  pb::ServerReadyResponse* response) override {
    response->set_ready(server.ready());
    return finish(context, Status::OK);
  }

  ServerUnaryReactor* ModelReady(CallbackServerContext* context,
                                 const pb::ModelReadyRequest* request,
                                 pb::ModelReadyResponse* response) override {
    serve::ModelMetadata metadata;
    Refusal refusal;
    if (!server.model_metadata(request->name(), request->version(), metadata, refusal)) {
      return finish(context, status_of(refusal));
    }
    response->set_ready(server.model_ready(request->name(), request->version()));
    return finish(context, Status::OK);
  }

  ServerUnaryReactor* ServerMetadata(CallbackServerContext* context,
                                     const pb::ServerMetadataRequest*,
                                     pb::ServerMetadataResponse* response) override {
    response->set_name("attnzoo");
    response->set_version(version());
    for (const auto& extension : InferenceServer::extensions()) {
      response->add_extensions(extension);
    }
    return finish(context, Status::OK);
  }

  ServerUnaryReactor* ModelMetadata(CallbackServerContext* context,
                                    const pb::ModelMetadataRequest* request,
                                    pb::ModelMetadataResponse* response) override {
    serve::ModelMetadata metadata;
    Refusal refusal;
    if (!server.model_metadata(request->name(), request->version(), metadata, refusal)) {
      return finish(context, status_of(refusal));
    }
    response->set_name(metadata.name);
    response->add_versions(metadata.version);
    response->set_platform(metadata.platform);
    const auto add = [&](const TensorSpec& spec, pb::ModelMetadataResponse::TensorMetadata* out) {
      out->set_name(spec.name);
      out->set_datatype(to_string(spec.datatype));
      if (metadata.batched) out->add_shape(-1);
      for (const auto d : spec.dims) out->add_shape(d);
    };
    for (const auto& spec : metadata.inputs) add(spec, response->add_inputs());
    for (const auto& spec : metadata.outputs) add(spec, response->add_outputs());
    return finish(context, Status::OK);
  }

  ServerUnaryReactor* ModelInfer(CallbackServerContext* context,
                                 const pb::ModelInferRequest* request,
                                 pb::ModelInferResponse* response) override {
    enter();
    InferRequest parsed;
    try {
      parsed = infer_request_from_proto(*request, limits());
    } catch (const Error& e) {
      return finish(context, Status(StatusCode::INVALID_ARGUMENT, e.what()));
    }
    apply_client_deadline(*context, parsed);
    auto* reactor = context->DefaultReactor();
    server.infer(request->model_name(), request->model_version(), parsed,
                 [reactor, response](InferReply reply) {
                   if (!reply.ok()) {
                     return reactor->Finish(Status(code_of(reply.status), reply.error));
                   }
                   infer_response_to_proto(reply.response, *response);
                   reactor->Finish(Status::OK);
                 });
    return reactor;
  }

  grpc::ServerBidiReactor<pb::ModelInferRequest, pb::ModelStreamInferResponse>* ModelStreamInfer(
      CallbackServerContext* context) override;

  ServerUnaryReactor* RepositoryIndex(CallbackServerContext* context,
                                      const pb::RepositoryIndexRequest* request,
                                      pb::RepositoryIndexResponse* response) override {
    if (repository == nullptr) return no_repository(context);
    for (const auto& entry : repository->index()) {
      if (request->ready() && entry.state != "READY") continue;
      auto* model = response->add_models();
      model->set_name(entry.name);
      model->set_version(entry.version);
      model->set_state(entry.state);
      model->set_reason(entry.reason);
    }
    return finish(context, Status::OK);
  }

  ServerUnaryReactor* RepositoryModelLoad(CallbackServerContext* context,
                                          const pb::RepositoryModelLoadRequest* request,
                                          pb::RepositoryModelLoadResponse*) override {
    if (repository == nullptr) return no_repository(context);
    auto* reactor = context->DefaultReactor();
    repository->load(request->model_name(),
                     [reactor](Refusal refusal) { reactor->Finish(status_of(refusal)); });
    return reactor;
  }

  ServerUnaryReactor* RepositoryModelUnload(CallbackServerContext* context,
                                            const pb::RepositoryModelUnloadRequest* request,
                                            pb::RepositoryModelUnloadResponse*) override {
    if (repository == nullptr) return no_repository(context);
    auto* reactor = context->DefaultReactor();
    repository->unload(request->model_name(),
                       [reactor](Refusal refusal) { reactor->Finish(status_of(refusal)); });
    return reactor;
  }

  static ServerUnaryReactor* no_repository(CallbackServerContext* context) {
    return finish(context, Status(StatusCode::FAILED_PRECONDITION,
                                  "no model repository: start the server with --model-repository"));
  }

  RequestLimits limits() const {
    RequestLimits limits;
    limits.max_tensor_bytes = options.max_message_bytes;
    return limits;
  }
};

// One ModelStreamInfer call. Requests are read one at a time: an ordinary request is handed to
// the batcher and the next read at once; a sequence's request runs on the server's stream
// threads, and the next is read after it, so that a sequence's audio stays in order and a client
// that sends faster than the model computes is held back. Responses are written one at a time
// from a queue. The call finishes when the client is done sending, every request is answered
// and every response written (or at once with UNAVAILABLE when the server stops, or when the
// client cancels).
class GrpcServer::Impl::Stream
    : public grpc::ServerBidiReactor<pb::ModelInferRequest, pb::ModelStreamInferResponse> {
 public:
  Stream(Impl& impl, CallbackServerContext* context) : impl_(impl), context_(context) {}

  // Registers the stream and starts it (or finishes it at once when the server stops).
  static Stream* open(Impl& impl, CallbackServerContext* context) {
    auto stream = std::make_shared<Stream>(impl, context);
    auto* raw = stream.get();
    // Not finished by go_away() before its first read is started.
    raw->reading_ = true;
    raw->starting_read_ = true;
    bool stopping = false;
    {
      std::lock_guard<std::mutex> lock(impl.streams_mutex);
      stopping = impl.stopping;
      impl.streams.emplace(raw, stream);
    }
    if (stopping) {
      {
        std::lock_guard<std::mutex> lock(raw->mutex_);
        raw->reading_ = false;
        raw->starting_read_ = false;
        raw->finished_ = true;
      }
      raw->Finish(Status(StatusCode::UNAVAILABLE, "the server is shutting down"));
      return raw;
    }
    raw->StartRead(&raw->request_);
    std::unique_lock<std::mutex> lock(raw->mutex_);
    raw->starting_read_ = false;
    raw->finish_if_done(lock);
    return raw;
  }

  // The server stops: finish once what is in hand is answered.
  void go_away() {
    std::unique_lock<std::mutex> lock(mutex_);
    going_away_ = true;
    finish_if_done(lock);
  }

  void OnReadDone(bool ok) override {
    impl_.enter();
    std::unique_lock<std::mutex> lock(mutex_);
    reading_ = false;
    if (!ok) {
      reads_done_ = true;
      return finish_if_done(lock);
    }
    if (going_away_ || cancelled_) return finish_if_done(lock);
    ++pending_;
    lock.unlock();
    handle(request_);
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mutex_);
    writing_ = false;
    if (!ok) cancelled_ = true;  // the client is gone
    if (!writes_.empty() && !cancelled_) return write_next(lock);
    if (cancelled_) writes_.clear();
    finish_if_done(lock);
  }

  void OnCancel() override {
    std::unique_lock<std::mutex> lock(mutex_);
    cancelled_ = true;
    writes_.clear();
    finish_if_done(lock);
  }

  void OnDone() override {
    std::shared_ptr<Stream> self;
    {
      std::lock_guard<std::mutex> lock(impl_.streams_mutex);
      const auto found = impl_.streams.find(this);
      self = std::move(found->second);
      impl_.streams.erase(found);
    }
    // `self` may be the last reference: the stream is freed on return.
  }

 private:
  struct Sequence {
    std::unique_ptr<SpeechSequence> speech;
    std::string model;
    std::string version;
  };

  void handle(const pb::ModelInferRequest& request) {
    StreamRequest read;
    try {
      read = read_stream_request(request, impl_.limits());
    } catch (const Error& e) {
      return request_done(error_response(request, e.what()), true);
    }
    if (read.control.id.empty()) return infer(request, std::move(read.request));
    sequence_step(request, read.control, std::move(read.samples));
  }

  // An ordinary request: answered when the batcher is done with it; the next is read now.
  void infer(const pb::ModelInferRequest& request, InferRequest parsed) {
    apply_client_deadline(*context_, parsed);
    const auto model = request.model_name();
    const auto version = request.model_version();
    auto id = request.id();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      read_next(lock);
    }
    impl_.server.infer(model, version, parsed, [this, id](InferReply reply) {
      pb::ModelStreamInferResponse response;
      if (!reply.ok()) {
        response.set_error_message(reply.error);
        response.mutable_infer_response()->set_id(id);
      } else {
        infer_response_to_proto(reply.response, *response.mutable_infer_response());
      }
      request_done(std::move(response), false);
    });
  }

  void sequence_step(const pb::ModelInferRequest& request, const SequenceControl& control,
                     std::vector<float> samples) {
    Sequence* sequence = nullptr;
    const auto found = sequences_.find(control.id);
    if (control.start) {
      if (found != sequences_.end()) {
        return request_done(error_response(request, "sequence " + control.id + " is already open"),
                            true);
      }
      Refusal refusal;
      std::unique_ptr<SpeechSequence> speech;
      try {
        speech = impl_.server.open_sequence(request.model_name(), request.model_version(),
                                            control.sample_rate, refusal);
      } catch (const std::exception& e) {
        refusal = {400, e.what()};
      }
      if (!speech && refusal.status == 0) refusal = {404, "the model does not stream"};
      if (!speech) return request_done(error_response(request, refusal.message), true);
      sequence = &sequences_[control.id];
      sequence->speech = std::move(speech);
      sequence->model = request.model_name();
      serve::ModelMetadata metadata;
      sequence->version = impl_.server.model_metadata(request.model_name(), "", metadata, refusal)
                              ? metadata.version
                              : request.model_version();
    } else if (found == sequences_.end()) {
      return request_done(error_response(request, "sequence " + control.id +
                                                      " is not open (sequence_start opens it)"),
                          true);
    } else {
      sequence = &found->second;
    }
    if (sequence->model != request.model_name()) {
      sequences_.erase(control.id);
      return request_done(
          error_response(request, "sequence " + control.id + " belongs to model '" +
                                      sequence->model + "', not '" + request.model_name() + "'"),
          true);
    }
    // The chunk runs on a stream thread; the next request is read when it is done.
    const bool queued = impl_.server.run_stream_task(
        [this, sequence, control, samples = std::move(samples), request_id = request.id()] {
          std::vector<pb::ModelStreamInferResponse> responses;
          bool failed = false;
          try {
            auto outputs = sequence->speech->push(samples.data(), samples.size());
            if (!outputs.empty()) {
              responses.push_back(result(*sequence, request_id, control.id, outputs, true));
            }
            if (control.end) {
              responses.push_back(
                  result(*sequence, request_id, control.id, sequence->speech->finish(), false));
            }
          } catch (const std::exception& e) {
            responses.clear();
            pb::ModelStreamInferResponse response;
            response.set_error_message("sequence " + control.id + ": " + e.what());
            response.mutable_infer_response()->set_id(request_id);
            responses.push_back(std::move(response));
            failed = true;
          }
          if (failed || control.end) sequences_.erase(control.id);
          sequence_done(std::move(responses));
        });
    if (!queued) {
      sequences_.erase(control.id);
      request_done(error_response(request, "the server is shutting down"), true);
    }
  }

  static pb::ModelStreamInferResponse result(const Sequence& sequence, const std::string& id,
                                             const std::string& sequence_id,
                                             const std::vector<OutputTensor>& outputs,
                                             bool partial) {
    pb::ModelStreamInferResponse response;
    InferResponse reply{sequence.model, sequence.version, id, outputs};
    auto* out = response.mutable_infer_response();
    infer_response_to_proto(reply, *out);
    (*out->mutable_parameters())["sequence_id"].set_string_param(sequence_id);
    (*out->mutable_parameters())["partial"].set_bool_param(partial);
    if (!partial) (*out->mutable_parameters())["triton_final_response"].set_bool_param(true);
    return response;
  }

  static pb::ModelStreamInferResponse error_response(const pb::ModelInferRequest& request,
                                                     const std::string& message) {
    pb::ModelStreamInferResponse response;
    response.set_error_message(message);
    response.mutable_infer_response()->set_model_name(request.model_name());
    response.mutable_infer_response()->set_id(request.id());
    return response;
  }

  // A request answered with one response; `read_after`: the next request is read now (it was
  // not read when this one was handed off).
  void request_done(pb::ModelStreamInferResponse response, bool read_after) {
    std::unique_lock<std::mutex> lock(mutex_);
    --pending_;
    if (!cancelled_) writes_.push_back(std::move(response));
    if (read_after) read_next(lock);
    if (!writing_ && !writes_.empty()) return write_next(lock);
    finish_if_done(lock);
  }

  void sequence_done(std::vector<pb::ModelStreamInferResponse> responses) {
    std::unique_lock<std::mutex> lock(mutex_);
    --pending_;
    if (!cancelled_) {
      for (auto& response : responses) writes_.push_back(std::move(response));
    }
    read_next(lock);
    if (!writing_ && !writes_.empty()) return write_next(lock);
    finish_if_done(lock);
  }

  // Starts the next read unless the stream is ending. Called with the lock held; keeps it. The
  // call is not finished while the read is being started (finish_if_done waits for it).
  void read_next(std::unique_lock<std::mutex>& lock) {
    if (reading_ || reads_done_ || going_away_ || cancelled_) return;
    reading_ = true;
    starting_read_ = true;
    lock.unlock();
    StartRead(&request_);
    lock.lock();
    starting_read_ = false;
  }

  // Writes the queue's front. Called with the lock held; releases it.
  void write_next(std::unique_lock<std::mutex>& lock) {
    writing_ = true;
    current_write_ = std::move(writes_.front());
    writes_.pop_front();
    lock.unlock();
    StartWrite(&current_write_);
  }

  // Finishes the call when nothing is left to do. Called with the lock held; releases it.
  void finish_if_done(std::unique_lock<std::mutex>& lock) {
    const bool ending = reads_done_ || going_away_ || cancelled_;
    if (finished_ || !ending || pending_ > 0 || writing_ || !writes_.empty() || starting_read_) {
      return;
    }
    finished_ = true;
    const auto status = cancelled_ ? Status::CANCELLED
                        : going_away_ && !reads_done_
                            ? Status(StatusCode::UNAVAILABLE, "the server is shutting down")
                            : Status::OK;
    lock.unlock();
    Finish(status);
  }

  Impl& impl_;
  CallbackServerContext* context_;
  pb::ModelInferRequest request_;               // the read in progress
  pb::ModelStreamInferResponse current_write_;  // the write in progress
  std::map<std::string, Sequence> sequences_;   // touched by one request at a time
  std::mutex mutex_;
  std::deque<pb::ModelStreamInferResponse> writes_;
  int pending_ = 0;  // requests read and not yet answered
  bool reading_ = false;
  bool starting_read_ = false;  // between read_next()'s unlock and its StartRead's return
  bool writing_ = false;
  bool reads_done_ = false;
  bool going_away_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
};

grpc::ServerBidiReactor<pb::ModelInferRequest, pb::ModelStreamInferResponse>*
GrpcServer::Impl::ModelStreamInfer(CallbackServerContext* context) {
  return Stream::open(*this, context);
}

GrpcServer::GrpcServer(GrpcServerOptions options, InferenceServer& server,
                       RepositoryControl* repository)
    : impl_(std::make_unique<Impl>(std::move(options), server, repository)) {
  const auto address = impl_->options.host + ":" + std::to_string(impl_->options.port);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl_->port);
  builder.RegisterService(impl_.get());
  const auto max_message = static_cast<int>(
      std::min<size_t>(impl_->options.max_message_bytes, static_cast<size_t>(INT32_MAX)));
  builder.SetMaxReceiveMessageSize(max_message);
  builder.SetMaxSendMessageSize(max_message);
  impl_->grpc_server = builder.BuildAndStart();
  if (!impl_->grpc_server || impl_->port == 0) {
    throw std::runtime_error("gRPC: cannot listen on " + address);
  }
}

GrpcServer::~GrpcServer() { shutdown(std::chrono::milliseconds(0)); }

uint16_t GrpcServer::port() const { return static_cast<uint16_t>(impl_->port); }

void GrpcServer::stop_accepting() {
  std::vector<std::shared_ptr<Impl::Stream>> streams;
  {
    std::lock_guard<std::mutex> lock(impl_->streams_mutex);
    impl_->stopping = true;
    for (const auto& [raw, stream] : impl_->streams) streams.push_back(stream);
  }
  for (const auto& stream : streams) stream->go_away();
}

void GrpcServer::shutdown(std::chrono::milliseconds grace) {
  if (!impl_->grpc_server) return;
  stop_accepting();
  impl_->grpc_server->Shutdown(std::chrono::system_clock::now() + grace);
  impl_->grpc_server->Wait();
  impl_->grpc_server.reset();
}

}  // namespace attnzoo::serve
