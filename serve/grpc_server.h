// KServe v2's gRPC service (proto/kserve_v2.proto, the service Triton's clients call) for
// `attnzoo serve`, on grpc++'s callback API, beside the HTTP listener on a port of its own and
// answering from the same InferenceServer: the same models, batchers, deadlines and metrics.
//
//   ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata   as GET /v2/...
//   ModelInfer                       inputs as raw_input_contents or typed contents; outputs
//                                    as raw_output_contents
//   ModelStreamInfer                 a bidirectional stream: each ordinary request is answered
//                                    by one response (in the order results come; "id" tells
//                                    them apart); the requests of a sequence (grpc_messages.h)
//                                    drive a live utterance of a speech model, as Triton's
//                                    decoupled models do: a request of audio gets a response
//                                    when the result changed (a recognizer's "text" and "stable",
//                                    an encoder's new "encoded" frames; parameter "partial":
//                                    true), none otherwise, and sequence_end gets the final one
//                                    ("partial": false, "triton_final_response": true). A
//                                    sequence holds one of the model's max_streams.
//   RepositoryIndex, RepositoryModelLoad, RepositoryModelUnload
//                                    as /v2/repository/... (model_repository.h)
//
// A refusal's HTTP status becomes the gRPC code: 400 INVALID_ARGUMENT, 404 NOT_FOUND, 503
// UNAVAILABLE, 504 DEADLINE_EXCEEDED, other 5xx INTERNAL. In a stream, a failed request is a
// response with its error_message, and the stream goes on (a failed sequence is closed). The
// client's deadline is the request's deadline (with its "timeout" parameter, the earlier).
// Messages are limited to max_message_bytes each way.
#pragma once

#include <attnzoo/serve/inference_server.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace attnzoo::serve {

struct GrpcServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8001;  // 0: a free port (port() says which)
  size_t max_message_bytes = 64 << 20;
  // Run once on each gRPC thread before its first call (attnzoo serve: use_one_intra_op_thread,
  // as on the HTTP threads).
  std::function<void()> thread_start;
};

class GrpcServer {
 public:
  // Binds and serves at once (an error naming the address when it cannot). `repository` (may be
  // null: the Repository* calls are then FAILED_PRECONDITION) outlives the server.
  GrpcServer(GrpcServerOptions options, InferenceServer& server, RepositoryControl* repository);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  uint16_t port() const;
  // Streams end: one busy with a request finishes once that request is answered, an idle one at
  // once, with UNAVAILABLE. Calls already made are answered; InferenceServer::drain() then
  // completes them. Returns at once.
  void stop_accepting();
  // Stops the server: new calls are refused, calls in progress get until `grace` to finish,
  // then are cancelled.
  void shutdown(std::chrono::milliseconds grace);

  struct Impl;  // the service and its streams (grpc_server.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnzoo::serve
