// The serve config (`attnzoo serve --config`): defaults, paths relative to the file, Triton's
// batching knobs, and every mistake a ConfigError at its key, line and column.
#include <attnzoo/configs/serve_config.h>

#include "config_test_util.h"

namespace attnzoo {
namespace test_serve_config {

using ::testing::HasSubstr;
using testing::TempDir;

ConfigError serve_error(const std::string& yaml) {
  try {
    parse_serve_config(yaml, "serve.yaml");
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "no ConfigError for:\n" << yaml;
  return ConfigError("", "", "");
}

TEST(ServeConfig, ReadsModelsWithTheirBatchingAndResolvesPathsAgainstTheFile) {
  TempDir dir;
  const auto weights = dir.write("weights/w.safetensors", "not read by the config");
  const auto model = dir.write("models/micro.yaml", testing::kTinyConfig);
  const auto path = dir.write("serve/serve.yaml", R"(http:
  host: 0.0.0.0
  port: 9000
  max_body_mb: 8
  request_timeout_s: 2.5
  stream_idle_timeout_s: 4
threads: 2
stream_threads: 3
models:
  - model: ../models/micro.yaml
    weights: ../weights/w.safetensors
    max_batch_size: 16
    dynamic_batching: {max_queue_delay_us: 500}
    max_queue_size: 3
    default_timeout_us: 100000
  - name: second
    model: vit_tiny_patch16_224
    set: [architecture.num_classes=3]
    device: cuda:1
    dtype: bf16
  - name: speech
    model: conformer_digits_ctc
    task: transcribe
    units: ../weights/w.safetensors
    max_audio_seconds: 12.5
    max_streams: 3
    stream_chunk: 8
)");
  const auto c = load_serve_config(path);
  EXPECT_EQ(c.http.host, "0.0.0.0");
  EXPECT_EQ(c.http.port, 9000);
  EXPECT_EQ(c.http.max_body_mb, 8);
  EXPECT_DOUBLE_EQ(c.http.request_timeout_s, 2.5);
  EXPECT_EQ(c.http.threads, 2);  // the default
  EXPECT_EQ(c.threads, 2);
  EXPECT_DOUBLE_EQ(c.http.stream_idle_timeout_s, 4.0);
  EXPECT_EQ(c.stream_threads, 3);
  ASSERT_EQ(c.models.size(), 3u);
  EXPECT_EQ(c.models[0].name, "tiny_test");  // the model config's name
  EXPECT_EQ(c.models[0].model, std::filesystem::path(model).lexically_normal().string());
  EXPECT_EQ(c.models[0].options.weights,
            std::filesystem::path(weights).lexically_normal().string());
  EXPECT_EQ(c.models[0].max_batch_size, 16);
  EXPECT_TRUE(c.models[0].dynamic_batching);
  EXPECT_EQ(c.models[0].max_queue_delay_us, 500);
  EXPECT_EQ(c.models[0].max_queue_size, 3);
  EXPECT_EQ(c.models[0].default_timeout_us, 100000);
  EXPECT_EQ(c.models[1].name, "second");
  EXPECT_EQ(c.models[1].model, "vit_tiny_patch16_224");
  EXPECT_FALSE(c.models[1].dynamic_batching);
  EXPECT_EQ(c.models[1].options.overrides, std::vector<std::string>{"architecture.num_classes=3"});
  // Read, not checked against this machine's devices: that happens where the model loads.
  EXPECT_EQ(c.models[1].options.device, c10::Device("cuda:1"));
  EXPECT_EQ(c.models[1].options.dtype, c10::kBFloat16);
  EXPECT_EQ(c.models[0].options.device, c10::Device(c10::kCPU));
  EXPECT_FALSE(c.models[0].options.dtype.has_value());  // the model config's inference.dtype
  EXPECT_FALSE(c.models[1].task.has_value());           // from the model config
  EXPECT_DOUBLE_EQ(c.models[1].max_audio_seconds, 60.0);
  EXPECT_EQ(c.models[1].max_streams, 16);
  EXPECT_EQ(c.models[1].stream_chunk, 0);
  EXPECT_EQ(c.models[2].task, ServedTask::kTranscribe);
  EXPECT_EQ(c.models[2].units, std::filesystem::path(weights).lexically_normal().string());
  EXPECT_DOUBLE_EQ(c.models[2].max_audio_seconds, 12.5);
  EXPECT_EQ(c.models[2].max_streams, 3);
  EXPECT_EQ(c.models[2].stream_chunk, 8);
  EXPECT_EQ(c.wait_policy, WaitPolicy::kPassive);  // the default
  EXPECT_EQ(c.models[0].instances, 0);             // unset: instance_shape decides
  EXPECT_EQ(c.models[0].threads, 0);
  // Overrides of the serve config itself.
  const auto o = load_serve_config(path, {"http.port=0", "models=[{model: vit_tiny_patch16_224}]"});
  EXPECT_EQ(o.http.port, 0);
  ASSERT_EQ(o.models.size(), 1u);
}

// Instances and threads: each model's own, else the config's threads, else one thread per
// instance and as many instances as the usable cores hold.
TEST(ServeConfig, InstancesAndThreadsFollowTheEntryTheConfigAndTheCores) {
  const auto c = parse_serve_config(R"(threads: 2
wait_policy: bounded
models:
  - model: vit_tiny_patch16_224
  - name: own
    model: vit_tiny_patch16_224
    instances: 3
    threads: 1
  - name: counted
    model: vit_tiny_patch16_224
    instances: 2
)",
                                    "serve.yaml");
  EXPECT_EQ(c.wait_policy, WaitPolicy::kBounded);
  const auto shape = [&](size_t model, int cores) {
    const auto s = instance_shape(c.models[model], c, cores);
    return std::pair<int64_t, int64_t>{s.instances, s.threads};
  };
  EXPECT_EQ(shape(0, 8), (std::pair<int64_t, int64_t>{4, 2}));  // the config's 2 threads
  EXPECT_EQ(shape(0, 3), (std::pair<int64_t, int64_t>{1, 2}));
  EXPECT_EQ(shape(0, 1), (std::pair<int64_t, int64_t>{1, 2}));  // at least one instance
  EXPECT_EQ(shape(1, 8), (std::pair<int64_t, int64_t>{3, 1}));  // its own
  EXPECT_EQ(shape(2, 8), (std::pair<int64_t, int64_t>{2, 2}));
  auto defaults = parse_serve_config("models:\n  - model: vit_tiny_patch16_224\n", "serve.yaml");
  const auto d = instance_shape(defaults.models[0], defaults, 6);
  EXPECT_EQ(d.instances, 6);
  EXPECT_EQ(d.threads, 1);
}

TEST(ServeConfig, RefusesMistakesAtTheirKey) {
  auto e = serve_error("models: []\n");
  EXPECT_EQ(e.key_path(), "models");
  EXPECT_THAT(e.what(), HasSubstr("at least one model"));

  e = serve_error("models:\n  - model: vit_tiny_patch16_224\n    max_batch_size: 0\n");
  EXPECT_EQ(e.key_path(), "models[0].max_batch_size");
  EXPECT_EQ(e.line(), 3);

  e = serve_error("models:\n  - model: no_such_model\n");
  EXPECT_EQ(e.key_path(), "models[0].model");
  EXPECT_THAT(e.what(), HasSubstr("no_such_model"));

  e = serve_error("models:\n  - model: vit_tiny_patch16_224\n    weights: /nonexistent.st\n");
  EXPECT_EQ(e.key_path(), "models[0].weights");
  EXPECT_THAT(e.what(), HasSubstr("is not a file"));

  e = serve_error("models:\n  - model: vit_tiny_patch16_224\n  - model: vit_tiny_patch16_224\n");
  EXPECT_EQ(e.key_path(), "models[1].name");
  EXPECT_THAT(e.what(), HasSubstr("served twice"));

  e = serve_error("models:\n  - model: vit_tiny_patch16_224\n    name: a/b\n");
  EXPECT_EQ(e.key_path(), "models[0].name");

  e = serve_error("http: {port: 70000}\nmodels:\n  - model: vit_tiny_patch16_224\n");
  EXPECT_EQ(e.key_path(), "http.port");

  e = serve_error("models:\n  - model: vit_tiny_patch16_224\n    dynamic_batching: {delay: 5}\n");
  EXPECT_EQ(e.key_path(), "models[0].dynamic_batching.delay");

  e = serve_error("models:\n  - model: vit_tiny_patch16_224\n    task: translate\n");
  EXPECT_EQ(e.key_path(), "models[0].task");
  EXPECT_THAT(e.what(), HasSubstr("transcribe"));

  e = serve_error("models:\n  - model: vit_tiny_patch16_224\n    device: tpu\n");
  EXPECT_EQ(e.key_path(), "models[0].device");
  EXPECT_THAT(e.what(), HasSubstr("expected cpu, cuda or cuda:N, got 'tpu'"));

  e = serve_error("wait_policy: spin\nmodels:\n  - model: vit_tiny_patch16_224\n");
  EXPECT_EQ(e.key_path(), "wait_policy");
  EXPECT_THAT(e.what(), HasSubstr("bounded, passive, active"));

  e = serve_error("models:\n  - model: vit_tiny_patch16_224\n    instances: 65\n");
  EXPECT_EQ(e.key_path(), "models[0].instances");

  e = serve_error("models:\n  - model: vit_tiny_patch16_224\n    dtype: fp64\n");
  EXPECT_EQ(e.key_path(), "models[0].dtype");
  EXPECT_THAT(e.what(), HasSubstr("fp16"));

  e = serve_error("models:\n  - model: conformer_digits_ctc\n    units: /nonexistent.txt\n");
  EXPECT_EQ(e.key_path(), "models[0].units");
  EXPECT_THAT(e.what(), HasSubstr("is not a file"));

  e = serve_error("models:\n  - model: conformer_digits_ctc\n    max_audio_seconds: 0\n");
  EXPECT_EQ(e.key_path(), "models[0].max_audio_seconds");

  e = serve_error("stream_threads: 0\nmodels:\n  - model: conformer_digits_ctc\n");
  EXPECT_EQ(e.key_path(), "stream_threads");

  e = serve_error("modles:\n  - model: vit_tiny_patch16_224\n");
  EXPECT_THAT(e.what(), HasSubstr("modles"));

  e = serve_error("grpc: {port: -1}\nmodels:\n  - model: vit_tiny_patch16_224\n");
  EXPECT_EQ(e.key_path(), "grpc.port");
  e = serve_error("grpc: {prot: 9}\nmodels:\n  - model: vit_tiny_patch16_224\n");
  EXPECT_EQ(e.key_path(), "grpc.prot");
}

TEST(ServeConfig, ReadsTheGrpcListenerAndMayListNoModelsBesideARepository) {
  auto c = parse_serve_config("models:\n  - model: vit_tiny_patch16_224\n", "serve.yaml");
  EXPECT_TRUE(c.grpc.enabled);
  EXPECT_EQ(c.grpc.port, 8001);
  EXPECT_EQ(c.grpc.host, "");
  c = parse_serve_config(
      "grpc: {enabled: false, host: 0.0.0.0, port: 0}\nmodels:\n  - model: vit_tiny_patch16_224\n",
      "serve.yaml");
  EXPECT_FALSE(c.grpc.enabled);
  EXPECT_EQ(c.grpc.host, "0.0.0.0");
  EXPECT_EQ(c.grpc.port, 0);
  c = parse_serve_config("http: {port: 0}\n", "serve.yaml", {}, /*models_required=*/false);
  EXPECT_TRUE(c.models.empty());
  EXPECT_THROW(parse_serve_config("http: {port: 0}\n", "serve.yaml"), ConfigError);
}

TEST(ServeConfig, ARepositoryEntryIsNamedByItsFolderAndDefaultsToIt) {
  TempDir dir;
  dir.write("repo/tiny/model.yaml", testing::kTinyConfig);
  dir.write("repo/tiny/w.safetensors", "not read by the config");
  const auto path = dir.write("repo/tiny/serve.yaml",
                              "model: model.yaml\nweights: w.safetensors\nmax_batch_size: 4\n");
  const auto m = load_repository_entry(path, "tiny");
  EXPECT_EQ(m.name, "tiny");
  EXPECT_EQ(m.max_batch_size, 4);
  EXPECT_EQ(m.options.weights, (dir.path() / "repo/tiny/w.safetensors").string());

  const auto renamed =
      dir.write("repo/other/serve.yaml", "name: elsewhere\nmodel: ../tiny/model.yaml\n");
  try {
    load_repository_entry(renamed, "other");
    ADD_FAILURE() << "a name other than the folder's was taken";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key_path(), "name");
    EXPECT_THAT(e.what(), HasSubstr("named by its folder ('other')"));
  }
  // No model: the folder itself, which here is no model source.
  const auto bare = dir.write("repo/bare/serve.yaml", "max_batch_size: 2\n");
  try {
    load_repository_entry(bare, "bare");
    ADD_FAILURE() << "a folder without a model was taken";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key_path(), "model");
  }
}

}  // namespace test_serve_config
}  // namespace attnzoo
