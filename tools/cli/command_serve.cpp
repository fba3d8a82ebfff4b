// `attnzoo serve`: the inference server (serve/): the models of a serve config, or one model
// given by flags, or those of a model repository, behind the KServe v2 protocol on HTTP and
// gRPC, with dynamic batching and metrics. SIGTERM or SIGINT shuts it down gracefully: it stops
// accepting, answers every request already received, and exits 0.
#include "tools/cli/commands.h"

#include <attnzoo/api/intra_op_threads.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/configs/serve_config.h>
#include <attnzoo/serve/endpoints.h>
#include <attnzoo/serve/grpc_server.h>
#include <attnzoo/serve/http_server.h>
#include <attnzoo/serve/inference_server.h>
#include <attnzoo/serve/model_repository.h>

#include <torch/torch.h>

#include <pthread.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace attnzoo::cli {
namespace {

struct ServeFlags {
  std::string config;
  std::vector<std::string> sets;
  // One model without a config file: the flags fill a serve config's entry directly (its
  // defaults are the flags' defaults), but for the name, which comes from the model's config.
  ServedModelConfig model;
  int64_t max_queue_delay_us = -1;  // >= 0: dynamic batching with this delay
  std::string model_repository;
  std::string host;
  int64_t port = -1;
  std::optional<int64_t> grpc_port;  // -1: no gRPC
  int64_t threads = -1;
  std::optional<WaitPolicy> wait_policy;
  double grace_s = 30.0;
};

ServeConfig config_of(const ServeFlags& f) {
  ServeConfig config;
  if (!f.config.empty()) {
    config = load_serve_config(f.config, f.sets, f.model_repository.empty());
  } else if (!f.model_repository.empty()) {
    config.source = "attnzoo serve";
  } else {
    config.source = "attnzoo serve";
    ServedModelConfig m = f.model;
    m.name = resolve_model_config(m.model, m.options.overrides).name;
    m.dynamic_batching = f.max_queue_delay_us >= 0;
    m.max_queue_delay_us = std::max<int64_t>(0, f.max_queue_delay_us);
    config.models.push_back(m);
  }
  if (!f.host.empty()) config.http.host = f.host;
  if (f.port >= 0) config.http.port = f.port;
  // A free HTTP port asked for on the command line: a free gRPC port too, unless one is given.
  if (f.port == 0 && !f.grpc_port) config.grpc.port = 0;
  if (f.grpc_port) {
    config.grpc.enabled = *f.grpc_port >= 0;
    if (*f.grpc_port >= 0) config.grpc.port = *f.grpc_port;
  }
  if (f.threads >= 0) config.threads = f.threads;
  if (f.wait_policy) config.wait_policy = *f.wait_policy;
  return config;
}

// libgomp reads how its idle threads wait (OMP_WAIT_POLICY, GOMP_SPINCOUNT) once, when it loads:
// to change it, the process starts again with the variable set, same PID and descriptors. A
// variable the environment already sets is left as it is.
void apply_wait_policy(WaitPolicy policy) {
  if (policy == WaitPolicy::kActive || std::getenv("OMP_WAIT_POLICY") != nullptr ||
      std::getenv("GOMP_SPINCOUNT") != nullptr) {
    return;
  }
  if (policy == WaitPolicy::kPassive) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  } else {
    setenv("GOMP_SPINCOUNT", "100", 1);
  }
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(cmdline, arg, '\0');) args.push_back(arg);
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  if (args.empty()) return;
  execv("/proc/self/exe", argv.data());
  std::cerr << "attnzoo serve: could not restart with wait_policy " << to_string(policy) << " ("
            << std::strerror(errno) << "); idle OpenMP threads spin as libgomp's default"
            << std::endl;
}

// How idle OpenMP threads wait in this process, for the listening line: the environment's
// variable, which the restart above set or the user did, else libgomp's default (active).
std::string wait_in_effect() {
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}) {
    if (const char* value = std::getenv(name)) return std::string(name) + "=" + value;
  }
  return "wait_policy active";
}

int run_serve(const ServeFlags& flags) {
  const auto config = config_of(flags);
  apply_wait_policy(config.wait_policy);
  // Every thread started from here on (batchers, I/O, LibTorch's pool) inherits the blocked
  // signals; this thread alone takes them, with sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Loaded on a thread that then exits, taking its OpenMP team with it: the batchers' teams are
  // then the only ones (api/intra_op_threads.h).
  std::vector<serve::ModelEndpoint> endpoints;
  std::exception_ptr load_error;
  std::thread loader([&] {
    try {
      endpoints = serve::load_endpoints(config);
    } catch (...) {
      load_error = std::current_exception();
    }
  });
  loader.join();
  if (load_error) std::rethrow_exception(load_error);
  serve::InferenceServer server(std::vector<serve::ModelEndpoint>(endpoints),
                                static_cast<int>(config.stream_threads));
  std::unique_ptr<serve::ModelRepository> repository;
  if (!flags.model_repository.empty()) {
    repository = std::make_unique<serve::ModelRepository>(flags.model_repository, config, server);
    for (const auto& entry : repository->index()) {
      for (const auto& e : endpoints) {
        if (e.model->name() == entry.name) {
          throw std::invalid_argument("model '" + entry.name +
                                      "' is both in the serve config and the model repository");
        }
      }
    }
    std::thread repository_loader([&] {
      try {
        repository->load_all();
      } catch (...) {
        load_error = std::current_exception();
      }
    });
    repository_loader.join();
    if (load_error) std::rethrow_exception(load_error);
    server.set_repository(repository.get());
  }
  std::string names;
  for (const auto& e : endpoints) {
    names += (names.empty() ? "" : ", ") + e.model->name() + " (" + e.model->kind() + ", " +
             std::to_string(e.batching.instances) + " instance" +
             (e.batching.instances > 1 ? "s" : "") + " x " + std::to_string(e.threads) + " thread" +
             (e.threads > 1 ? "s" : "") + ", " +
             (e.batching.dynamic
                  ? "dynamic batching up to " + std::to_string(e.batching.max_batch_size) + ", " +
                        std::to_string(e.batching.max_queue_delay_us) + " us"
                  : "no dynamic batching") +
             (e.model->why_no_stream().empty() && e.max_streams > 0
                  ? ", streams at /v2/models/" + e.model->name() + "/stream"
                  : "") +
             ")";
  }
  if (repository) {
    names +=
        std::string(names.empty() ? "" : "; ") + "model repository " + flags.model_repository + ":";
    for (const auto& entry : repository->index()) names += " " + entry.name;
  }
  endpoints.clear();
  serve::HttpServerOptions http;
  http.host = config.http.host;
  http.port = static_cast<uint16_t>(config.http.port);
  http.threads = static_cast<int>(config.http.threads);
  http.max_body_bytes = static_cast<size_t>(config.http.max_body_mb) << 20;
  http.max_header_bytes = static_cast<size_t>(config.http.max_header_kb) << 10;
  http.request_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config.http.request_timeout_s * 1000));
  http.write_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config.http.write_timeout_s * 1000));
  http.max_connections = static_cast<size_t>(config.http.max_connections);
  http.thread_start = use_one_intra_op_thread;
  http.stream_idle_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config.http.stream_idle_timeout_s * 1000));
  serve::HttpServer listener(http, server);
  std::unique_ptr<serve::GrpcServer> grpc;
  std::string grpc_address;
  if (config.grpc.enabled) {
    serve::GrpcServerOptions options;
    options.host = config.grpc.host.empty() ? http.host : config.grpc.host;
    options.port = static_cast<uint16_t>(config.grpc.port);
    options.max_message_bytes = http.max_body_bytes;
    options.thread_start = use_one_intra_op_thread;
    grpc = std::make_unique<serve::GrpcServer>(options, server, repository.get());
    grpc_address = " and grpc://" + options.host + ":" + std::to_string(grpc->port());
  }
  listener.start();
  std::cout << "attnzoo serve: listening on http://" << http.host << ":" << listener.port()
            << grpc_address << " (" << names << "; " << wait_in_effect() << ")" << std::endl;

  int received = 0;
  sigwait(&signals, &received);
  std::cout << "attnzoo serve: " << (received == SIGTERM ? "SIGTERM" : "SIGINT")
            << ": no new requests; answering those received" << std::endl;
  listener.stop_accepting();
  if (grpc) grpc->stop_accepting();
  server.drain();
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(flags.grace_s * 1000));
  listener.shutdown(grace);
  if (grpc) grpc->shutdown(grace);
  repository.reset();
  std::cout << "attnzoo serve: stopped" << std::endl;
  return 0;
}

}  // namespace

Command add_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  auto* sub = app.add_subcommand(
      "serve",
      "Serve models over HTTP: the KServe v2 / Triton protocol, dynamic batching, metrics");
  auto* config = sub->add_option("--config", flags->config,
                                 "A serve config (YAML: the models, batching, HTTP limits)")
                     ->check(CLI::ExistingFile);
  sub->add_option("--set-config", flags->sets,
                  "Override a serve config value, key.path=value; repeatable")
      ->needs(config);
  auto* model = sub->add_option("--model", flags->model.model,
                                "One model to serve: a registered name, a YAML or a model folder")
                    ->excludes(config);
  sub->add_option("--model-repository", flags->model_repository,
                  "A folder of models, one per folder, loaded at start and managed with "
                  "/v2/repository/... (docs/serving.md)")
      ->check(CLI::ExistingDirectory)
      ->excludes(model);
  sub->add_option("--weights", flags->model.options.weights,
                  "Weights of --model: safetensors, a PyTorch checkpoint or a sharded index "
                  "(default: the model folder's own)")
      ->needs(model);
  sub->add_option("--format", flags->model.options.format, "Checkpoint layout of --weights")
      ->needs(model);
  sub->add_option("--key", flags->model.options.key,
                  "The state dict of a PyTorch training checkpoint")
      ->needs(model);
  sub->add_option("--set", flags->model.options.overrides, "Override a value of --model's config")
      ->needs(model);
  sub->add_option("--max-batch-size", flags->model.max_batch_size, "Rows per execution (--model)")
      ->check(CLI::Range(1, 4096))
      ->needs(model);
  sub->add_option("--max-queue-delay-us", flags->max_queue_delay_us,
                  "Dynamic batching of --model with this delay (absent: none)")
      ->check(CLI::Range(0, 10'000'000))
      ->needs(model);
  sub->add_option("--max-queue-size", flags->model.max_queue_size, "Requests waiting (--model)")
      ->check(CLI::Range(1, 1 << 20))
      ->needs(model);
  const auto tasks = std::map<std::string, ServedTask>{{"classify", ServedTask::kClassify},
                                                       {"encode", ServedTask::kEncode},
                                                       {"transcribe", ServedTask::kTranscribe}};
  sub->add_option_function<std::string>(
         "--task", [flags, tasks](const std::string& name) { flags->model.task = tasks.at(name); },
         "What --model is served as: classify, encode or transcribe (default: from its config)")
      ->check(CLI::IsMember({"classify", "encode", "transcribe"}))
      ->needs(model);
  sub->add_option("--units", flags->model.units, "The token table of a recognizer (--model)")
      ->check(CLI::ExistingFile)
      ->needs(model);
  sub->add_option("--max-audio-seconds", flags->model.max_audio_seconds,
                  "The longest audio of a request or stream (--model; default 60)")
      ->check(CLI::Range(0.001, 86400.0))
      ->needs(model);
  sub->add_option("--max-streams", flags->model.max_streams,
                  "WebSocket streams open at once (--model; default 16, 0: none)")
      ->check(CLI::Range(0, 1 << 16))
      ->needs(model);
  sub->add_option("--stream-chunk", flags->model.stream_chunk,
                  "Encoder frames per chunk of a stream (--model; default: its config's)")
      ->check(CLI::Range(0, 4096))
      ->needs(model);
  sub->add_option("--host", flags->host, "Address to listen on (default 127.0.0.1)");
  sub->add_option("--port", flags->port, "Port (default 8000; 0: a free one, printed)")
      ->check(CLI::Range(0, 65535));
  sub->add_option_function<int64_t>(
         "--grpc-port", [flags](int64_t port) { flags->grpc_port = port; },
         "gRPC port (default 8001, or a free one with --port 0; 0: a free one; -1: no gRPC)")
      ->check(CLI::Range(-1, 65535));
  sub->add_option("--instances", flags->model.instances,
                  "Parallel executions of --model (default: usable cores / --threads)")
      ->check(CLI::Range(1, 64))
      ->needs(model);
  sub->add_option("--threads", flags->threads,
                  "LibTorch threads per model instance (default 1; a config's models that set "
                  "none)")
      ->check(CLI::Range(1, 1024));
  const auto policies = std::map<std::string, WaitPolicy>{{"bounded", WaitPolicy::kBounded},
                                                          {"passive", WaitPolicy::kPassive},
                                                          {"active", WaitPolicy::kActive}};
  sub->add_option_function<std::string>(
         "--wait-policy",
         [flags, policies](const std::string& name) { flags->wait_policy = policies.at(name); },
         "How idle OpenMP threads wait: passive (default: they sleep), bounded (a short spin) "
         "or active")
      ->check(CLI::IsMember({"passive", "bounded", "active"}));
  sub->add_option("--grace", flags->grace_s,
                  "Seconds to wait for responses to be written at shutdown (default 30)")
      ->check(CLI::Range(0.0, 3600.0));
  return {sub, [flags] {
            if (flags->config.empty() && flags->model.model.empty() &&
                flags->model_repository.empty()) {
              throw CLI::ValidationError("serve", "give --config, --model or --model-repository");
            }
            return run_serve(*flags);
          }};
}

}  // namespace attnzoo::cli
