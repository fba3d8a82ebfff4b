#include <attnzoo/configs/serve_config.h>

#include <attnzoo/configs/registry.h>
#include <attnzoo/configs/yaml_reader.h>
#include <attnzoo/core/dtype_device.h>

#include <algorithm>
#include <filesystem>
#include <set>

namespace attnzoo {
namespace {

using detail::Document;
using detail::MapReader;
using detail::names_a_file;
using detail::resolve;

ServeHttpConfig read_http(MapReader http) {
  ServeHttpConfig h;
  h.host = http.string("host", h.host);
  h.port = http.integer("port", h.port, 0, 65535);
  h.threads = http.integer("threads", h.threads, 1, 256);
  h.max_body_mb = http.integer("max_body_mb", h.max_body_mb, 1, 4096);
  h.max_header_kb = http.integer("max_header_kb", h.max_header_kb, 1, 1024);
  h.request_timeout_s = http.number("request_timeout_s", h.request_timeout_s, 0.0, 86400.0, true);
  h.write_timeout_s = http.number("write_timeout_s", h.write_timeout_s, 0.0, 86400.0, true);
  h.max_connections = http.integer("max_connections", h.max_connections, 1, 1 << 20);
  h.stream_idle_timeout_s =
      http.number("stream_idle_timeout_s", h.stream_idle_timeout_s, 0.0, 86400.0, true);
  http.finish();
  return h;
}

ServedModelConfig read_model(MapReader entry, const std::string& source,
                             std::optional<std::string> default_model = std::nullopt) {
  ServedModelConfig m;
  const auto reference = entry.string("model", default_model);
  m.model = names_a_file(reference) ? resolve(source, reference) : reference;
  if (auto sets = entry.string_list("set")) m.options.overrides = *sets;
  m.name = entry.string("name", "");
  try {
    const auto config = resolve_model_config(m.model, m.options.overrides);
    if (m.name.empty()) m.name = config.name;
  } catch (const ConfigError& e) {
    entry.fail("model", e.what());
  }
  if (m.name.empty() || m.name.find_first_of("/?#% ") != std::string::npos) {
    entry.fail("name", "a model's name must be non-empty without '/', '?', '#', '%' or spaces");
  }
  if (entry.has("weights")) {
    m.options.weights = resolve(source, entry.string("weights", std::nullopt));
    std::error_code error;
    if (!std::filesystem::is_regular_file(m.options.weights, error)) {
      entry.fail("weights", "'" + m.options.weights + "' is not a file");
    }
  }
  m.options.format = entry.string("format", "");
  m.options.key = entry.string("key", "");
  m.options.device = entry.device("device", "cpu");
  // Absent: the model config's inference.dtype; auto resolves where the model loads.
  if (entry.has("dtype")) {
    const auto dtype = entry.choice("dtype", std::nullopt, {"fp32", "bf16", "fp16", "auto"});
    if (dtype == "auto") {
      m.options.overrides.push_back("inference.dtype=auto");
    } else {
      m.options.dtype = parse_dtype("dtype", dtype);
    }
  }
  m.max_batch_size = entry.integer("max_batch_size", m.max_batch_size, 1, 4096);
  if (entry.has("dynamic_batching")) {
    auto batching = entry.map("dynamic_batching", false);
    m.dynamic_batching = true;
    m.max_queue_delay_us = batching.integer("max_queue_delay_us", 0, 0, 10'000'000);
    batching.finish();
  }
  m.max_queue_size = entry.integer("max_queue_size", m.max_queue_size, 1, 1 << 20);
  m.instances = entry.integer("instances", m.instances, 0, 64);
  m.threads = entry.integer("threads", m.threads, 0, 1024);
  m.default_timeout_us = entry.integer("default_timeout_us", 0, 0, int64_t{1} << 40);
  if (entry.has("task")) {
    m.task =
        entry.enumeration("task", std::nullopt,
                          {ServedTask::kClassify, ServedTask::kEncode, ServedTask::kTranscribe});
  }
  if (entry.has("units")) {
    m.units = resolve(source, entry.string("units", std::nullopt));
    std::error_code error;
    if (!std::filesystem::is_regular_file(m.units, error)) {
      entry.fail("units", "'" + m.units + "' is not a file");
    }
  }
  m.max_audio_seconds = entry.number("max_audio_seconds", m.max_audio_seconds, 0.0, 86400.0, true);
  m.max_streams = entry.integer("max_streams", m.max_streams, 0, 1 << 16);
  m.stream_chunk = entry.integer("stream_chunk", m.stream_chunk, 0, 4096);
  entry.finish();
  return m;
}

}  // namespace

ServeGrpcConfig read_grpc(MapReader grpc) {
  ServeGrpcConfig g;
  g.enabled = grpc.boolean("enabled", g.enabled);
  g.host = grpc.string("host", g.host);
  g.port = grpc.integer("port", g.port, 0, 65535);
  grpc.finish();
  return g;
}

ServeConfig parse_serve_config(const std::string& yaml, const std::string& source,
                               const std::vector<std::string>& overrides, bool models_required) {
  Document document(yaml, source);
  for (const auto& item : overrides) document.apply_override(item);
  MapReader root(document, document.root(), "");
  ServeConfig c;
  c.source = source;
  c.http = read_http(root.map("http", false));
  c.grpc = read_grpc(root.map("grpc", false));
  c.threads = root.integer("threads", 0, 0, 1024);
  c.wait_policy =
      root.enumeration("wait_policy", c.wait_policy,
                       {WaitPolicy::kBounded, WaitPolicy::kPassive, WaitPolicy::kActive});
  c.stream_threads = root.integer("stream_threads", c.stream_threads, 1, 256);
  auto entries =
      models_required || root.has("models") ? root.map_list("models") : std::vector<MapReader>{};
  std::set<std::string> names;
  for (auto& entry : entries) {
    c.models.push_back(read_model(entry, source));
    if (!names.insert(c.models.back().name).second) {
      entry.fail("name", "model '" + c.models.back().name + "' is served twice");
    }
  }
  root.finish();  // a misspelt key before a missing one
  if (entries.empty() && models_required) root.fail("models", "list at least one model to serve");
  return c;
}

InstanceShape instance_shape(const ServedModelConfig& m, const ServeConfig& config, int cores) {
  InstanceShape shape;
  shape.threads = m.threads > 0 ? m.threads : config.threads > 0 ? config.threads : 1;
  shape.instances = m.instances > 0 ? m.instances : std::max<int64_t>(1, cores / shape.threads);
  return shape;
}

ServedModelConfig load_repository_entry(const std::string& path, const std::string& name) {
  Document document(detail::read_document_file(path, "model repository entry"), path);
  MapReader root(document, document.root(), "");
  if (root.has("name")) {
    const auto given = root.string("name", std::nullopt);
    if (given != name) {
      root.fail("name",
                "a repository model is named by its folder ('" + name + "'), not '" + given + "'");
    }
  }
  auto m = read_model(root, path, "./");
  m.name = name;
  return m;
}

ServeConfig load_serve_config(const std::string& path, const std::vector<std::string>& overrides,
                              bool models_required) {
  return parse_serve_config(detail::read_document_file(path, "serve config"), path, overrides,
                            models_required);
}

}  // namespace attnzoo
