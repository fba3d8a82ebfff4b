// `attnzoo bench`: cost benchmarks. `bench attention` measures the attention backends' time and
// peak memory against sequence length (bench_attention.h); `bench model` the latency of a model
// of the zoo (bench_model.h); `bench memcheck` checks that the peak memory those figures rest on
// is really measured.
#include "tools/cli/bench_attention.h"
#include "tools/cli/bench_features.h"
#include "tools/cli/bench_memcheck.h"
#include "tools/cli/bench_model.h"
#include "tools/cli/commands.h"

#include <memory>

namespace attnzoo::cli {

Command add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand(
      "bench", "Benchmarks: attention backends, model latency, audio features, memory check");
  bench->require_subcommand(1, 1);

  auto o = std::make_shared<AttentionBenchOptions>();
  auto* attention = bench->add_subcommand(
      "attention",
      "Time and peak memory of each attention backend against sequence length N, next to "
      "reference cost estimates of standard attention, with fitted N^k exponents");
  attention
      ->add_option("--backends", o->backends,
                   "comma-separated backends to measure (default: every registered backend)")
      ->delimiter(',');
  attention->add_option("--lengths", o->lengths, "comma-separated sequence lengths N")
      ->delimiter(',')
      ->capture_default_str();
  attention->add_option("--batch", o->batch, "batch size B")->capture_default_str();
  attention->add_option("--heads", o->heads, "number of heads H")->capture_default_str();
  attention->add_option("--dim", o->dim, "model width d_model (head_dim = dim / heads)")
      ->capture_default_str();
  attention->add_option("--dtype", o->dtype, "fp32, bf16, fp16 or fp64")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp64"}))
      ->capture_default_str();
  attention->add_option("--device", o->device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  attention->add_flag("--backward", o->backward,
                      "time forward + backward (gradient of sum(out * g) w.r.t. q, k, v)");
  attention->add_flag("--causal", o->causal, "causal mask");
  attention->add_flag("--padding", o->padding,
                      "key padding: batch entries 0, 2, ... keep 75% of their keys");
  attention->add_option("--repeats", o->repeats, "timed calls per (backend, N); median and min")
      ->capture_default_str();
  attention->add_option("--warmup", o->warmup, "untimed calls before them")->capture_default_str();
  attention
      ->add_option("--max-memory-gb", o->max_memory_gb,
                   "skip a (backend, N) whose predicted peak memory exceeds this")
      ->capture_default_str();
  attention
      ->add_option("--max-seconds", o->max_seconds,
                   "once a call takes longer, skip larger N for that backend")
      ->capture_default_str();
  attention->add_option("--threads", o->threads, "CPU threads (0: LibTorch's default)")
      ->capture_default_str();
  attention->add_option("--seed", o->seed, "seed of the random inputs")->capture_default_str();
  attention->add_option("--chunk-size", o->chunk_size, "chunked backend: chunk size")
      ->capture_default_str();
  attention->add_option("--block-size", o->block_size, "block_local backend: block size")
      ->capture_default_str();
  attention->add_option("--window", o->window, "block_local backend: keys on each side of a block")
      ->capture_default_str();
  attention->add_option("--json", o->json, "write every measurement and the machine to this file");
  attention->add_option("--plot", o->plot,
                        "write time and peak memory against N (log-log) to this PNG");

  auto m = std::make_shared<ModelBenchOptions>();
  auto* model = bench->add_subcommand(
      "model", "Latency of one model of the zoo on a fixed random input (random weights)");
  model->add_option("--model", m->model, "A registered name or a YAML file")->required();
  model->add_option("--set", m->overrides, "Override a config value, key.path=value; repeatable")
      ->allow_extra_args(false);
  model->add_option("--batch", m->batch, "batch size")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  model->add_option("--seconds", m->seconds, "Conformer: seconds of audio per utterance")
      ->check(CLI::Range(0.1, 7200.0))
      ->capture_default_str();
  model
      ->add_option("--frames", m->frames,
                   "Conformer: input frames per utterance (instead of --seconds)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}));
  model->add_option("--iterations", m->iterations, "timed calls; median and min")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}))
      ->capture_default_str();
  model->add_option("--warmup", m->warmup, "untimed calls before them")
      ->check(CLI::Range(int64_t{0}, int64_t{100000}))
      ->capture_default_str();
  model->add_option("--threads", m->threads, "CPU threads (0: LibTorch's default)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}))
      ->capture_default_str();
  model
      ->add_option("--dtype", m->dtype,
                   "fp32, bf16, fp16, or auto: bf16 on a CPU with AVX512-BF16 or AMX, else fp32")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "auto"}))
      ->capture_default_str();
  model->add_option("--device", m->device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  model->add_flag("--cuda-graph", m->cuda_graph,
                  "CUDA: record the forward once as a CUDA graph and time its replays");
  model->add_option("--json", m->json, "write every timed call and the summary to this file");
  model->add_option("--output", m->output,
                    "write the input and the last output to this safetensors file");
  model
      ->add_option("--profile-ops", m->profile_ops,
                   "after the timed calls, this many forwards with the self time of each "
                   "LibTorch op recorded: a table of ops, calls and ms per forward")
      ->check(CLI::Range(int64_t{0}, int64_t{100000}));

  auto f = std::make_shared<FeatureBenchOptions>();
  auto* features = bench->add_subcommand(
      "features", "Time of the audio frontend on one file: in memory and from the file");
  features->add_option("input", f->input, "an audio file at the features' sample rate")->required();
  features->add_option("--model", f->model, "the model whose features section is used")
      ->capture_default_str();
  features->add_option("--set", f->overrides, "Override a config value, key.path=value")
      ->allow_extra_args(false);
  features->add_option("--iterations", f->iterations, "timed calls of each kind; median and min")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}))
      ->capture_default_str();
  features->add_option("--warmup", f->warmup, "untimed calls before them")
      ->check(CLI::Range(int64_t{0}, int64_t{100000}))
      ->capture_default_str();
  features->add_option("--threads", f->threads, "CPU threads (0: LibTorch's default)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}))
      ->capture_default_str();
  features->add_option("--json", f->json, "write every timed call and the summary to this file");
  features->add_option("--output", f->output,
                       "write the in-memory features to this safetensors file");

  auto megabytes = std::make_shared<int64_t>(100);
  auto* memcheck = bench->add_subcommand(
      "memcheck", "Check that peak-memory tracking sees LibTorch's CPU allocations");
  memcheck->add_option("--mb", *megabytes, "size of the test tensor in MiB")->capture_default_str();

  return {bench, [o, m, f, megabytes, attention, model, features] {
            if (attention->parsed()) return run_attention_bench(*o);
            if (model->parsed()) return run_model_bench(*m);
            if (features->parsed()) return run_feature_bench(*f);
            return run_memory_tracking_check(*megabytes);
          }};
}

}  // namespace attnzoo::cli
