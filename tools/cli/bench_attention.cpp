#include "tools/cli/bench_attention.h"

#include <attnzoo/core/dtype_device.h>
#include <attnzoo/layers/attention_backend.h>
#include "tools/bench/memory_tracking.h"
#include "tools/bench/scaling.h"
#include "tools/bench/timing.h"
#include "tools/cli/bench_attention_report.h"
#include "tools/cli/bench_machine.h"
#include "tools/cli/progress_line.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace attnzoo::cli {
namespace {

std::string first_line(std::string text) {
  const auto end = text.find('\n');
  if (end != std::string::npos) text.resize(end);
  return text;
}

// ---- timing of one call ----

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Milliseconds of `call`, on the steady clock with the device synchronised before and after, as
// tools/bench/timing.h times every benchmark.
template <typename F>
double time_call_ms(const torch::Device& device, F&& call) {
  synchronize(device);
  const bench::Stopwatch watch;
  call();
  synchronize(device);
  return watch.elapsed_ms();
}

// ---- the benchmark ----

struct Inputs {
  torch::Tensor query, key, value;  // [B, H, N, E]
  torch::Tensor grad_output;        // [B, H, N, E]; defined with --backward
  AttentionMask mask;
};

Inputs draw_inputs(const AttentionBenchOptions& o, int64_t length, torch::ScalarType dtype,
                   const torch::Device& device) {
  torch::manual_seed(static_cast<uint64_t>(o.seed * 1000003 + length));
  const int64_t head_dim = o.dim / o.heads;
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  Inputs in;
  // Drawn in float32 and cast, so every dtype sees the same numbers.
  const auto draw = [&] { return torch::randn({o.batch, o.heads, length, head_dim}).to(options); };
  in.query = draw();
  in.key = draw();
  in.value = draw();
  if (o.backward) {
    in.grad_output = draw();
    in.query.requires_grad_(true);
    in.key.requires_grad_(true);
    in.value.requires_grad_(true);
  }
  if (o.padding) {
    // Every other batch entry (0, 2, ...) keeps 75% of its keys, so a batch of one is padded too.
    auto lengths = torch::full({o.batch}, length, torch::kLong);
    for (int64_t b = 0; b < o.batch; b += 2) lengths[b] = std::max<int64_t>(1, (3 * length) / 4);
    in.mask.key_lengths(lengths.to(device));
  }
  if (o.causal) in.mask.causal(true);
  return in;
}

// Bytes a call is expected to allocate, before measuring it: the guard of --max-memory-gb.
// math materialises scores and probabilities (and their gradients in the backward), about three
// [B, H, N, N] buffers forward and five with the backward. The others are O(N) by design; their
// estimate is the O(N) buffers plus any [N, N] mask the mask kinds need. Backends not listed here
// are assumed O(N); the extrapolation from the measured points (extrapolate_cost) catches any
// that are not.
double model_bytes(const std::string& backend, const AttentionBenchOptions& o, int64_t n,
                   size_t element) {
  const double bh = static_cast<double>(o.batch * o.heads), nn = static_cast<double>(n);
  const double e = static_cast<double>(o.dim / o.heads), bytes = static_cast<double>(element);
  const double mask = o.causal ? static_cast<double>(o.batch) * nn * nn : 0.0;  // bool [B,1,N,N]
  const double io = bh * nn * e * bytes * (o.backward ? 8 : 2);
  if (backend == "math") return bh * nn * nn * bytes * (o.backward ? 5 : 3) + mask + io;
  if (backend == "chunked") {
    const double c = static_cast<double>(std::min(o.chunk_size, n));
    return bh * nn * c * bytes * (o.backward ? 5 : 3) + mask + io;
  }
  if (backend == "block_local") {
    const double k = static_cast<double>(std::min(o.block_size + 2 * o.window, n));
    return bh * nn * k * bytes * (o.backward ? 5 : 3) + mask + io;
  }
  return mask + io * 2;
}

struct BackendState {
  std::string name;
  std::string stop_reason;  // set once a call exceeded --max-seconds: larger N are skipped
  std::vector<double> lengths, medians, peaks;  // measured points so far
};

void validate(const AttentionBenchOptions& o, const std::vector<std::string>& registered) {
  TORCH_CHECK_VALUE(!o.lengths.empty(), "--lengths: give at least one length");
  for (const auto n : o.lengths) {
    TORCH_CHECK_VALUE(n >= 1, "--lengths: every length must be >= 1, got ", n);
  }
  for (const auto& b : o.backends) {
    if (std::find(registered.begin(), registered.end(), b) != registered.end()) continue;
    std::ostringstream known;
    for (size_t i = 0; i < registered.size(); ++i) known << (i ? ", " : "") << registered[i];
    TORCH_CHECK_VALUE(false, "--backends: unknown backend '", b, "'; registered: ", known.str());
  }
  TORCH_CHECK_VALUE(o.batch >= 1, "--batch must be >= 1, got ", o.batch);
  TORCH_CHECK_VALUE(o.heads >= 1, "--heads must be >= 1, got ", o.heads);
  TORCH_CHECK_VALUE(o.dim >= 1 && o.dim % o.heads == 0, "--heads must divide --dim, got dim ",
                    o.dim, " and heads ", o.heads);
  TORCH_CHECK_VALUE(o.repeats >= 1, "--repeats must be >= 1, got ", o.repeats);
  TORCH_CHECK_VALUE(o.warmup >= 0, "--warmup must be >= 0, got ", o.warmup);
  TORCH_CHECK_VALUE(o.max_memory_gb > 0, "--max-memory-gb must be > 0, got ", o.max_memory_gb);
  TORCH_CHECK_VALUE(o.max_seconds > 0, "--max-seconds must be > 0, got ", o.max_seconds);
  TORCH_CHECK_VALUE(o.threads >= 0, "--threads must be >= 0, got ", o.threads);
  TORCH_CHECK_VALUE(o.chunk_size >= 1, "--chunk-size must be >= 1, got ", o.chunk_size);
  TORCH_CHECK_VALUE(o.block_size >= 1, "--block-size must be >= 1, got ", o.block_size);
  TORCH_CHECK_VALUE(o.window >= 0, "--window must be >= 0, got ", o.window);
}

torch::Device resolve_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  TORCH_CHECK_VALUE(name == "cuda", "--device must be cpu or cuda, got '", name, "'");
  TORCH_CHECK_VALUE(torch::cuda::is_available(),
                    "--device cuda: no CUDA device is available on this machine");
  TORCH_CHECK_VALUE(cuda_memory_stats_available(),
                    "--device cuda: this attnzoo was built without CUDA (ATTNZOO_WITH_CUDA=0), so "
                    "it cannot time with CUDA events or read the caching allocator's statistics");
  return torch::Device(torch::kCUDA, 0);
}

// The command line that reproduces a run, for the table header and the JSON.
std::string command_line(const AttentionBenchOptions& o, const std::vector<std::string>& backends,
                         const std::vector<int64_t>& lengths) {
  std::ostringstream out;
  out << "attnzoo bench attention --backends ";
  for (size_t i = 0; i < backends.size(); ++i) out << (i ? "," : "") << backends[i];
  out << " --lengths ";
  for (size_t i = 0; i < lengths.size(); ++i) out << (i ? "," : "") << lengths[i];
  out << " --batch " << o.batch << " --heads " << o.heads << " --dim " << o.dim << " --dtype "
      << o.dtype << " --device " << o.device << (o.backward ? " --backward" : "")
      << (o.causal ? " --causal" : "") << (o.padding ? " --padding" : "") << " --repeats "
      << o.repeats << " --warmup " << o.warmup << " --max-memory-gb " << o.max_memory_gb
      << " --max-seconds " << o.max_seconds << " --chunk-size " << o.chunk_size << " --block-size "
      << o.block_size << " --window " << o.window;
  return out.str();
}

}  // namespace

int run_attention_bench(const AttentionBenchOptions& o) {
  const auto registered = attention_backend_names();
  validate(o, registered);
  const auto dtype = parse_dtype("--dtype", o.dtype, /*accept_fp64=*/true);
  const auto device = resolve_device(o.device);
  if (o.threads > 0) torch::set_num_threads(static_cast<int>(o.threads));

  int64_t memory_check_bytes = 0;
  if (device.is_cpu()) {
    install_cpu_memory_tracking();
    // A tracker that misses LibTorch's allocations would print plausible zeros; refuse instead.
    memory_check_bytes = check_cpu_memory_tracking(16 * 1024 * 1024);
  }

  AttentionResults results;
  results.load_at_start = load_average();
  results.backends = o.backends.empty() ? registered : o.backends;
  results.lengths = o.lengths;
  std::sort(results.lengths.begin(), results.lengths.end());  // the skip rules assume growing N
  results.lengths.erase(std::unique(results.lengths.begin(), results.lengths.end()),
                        results.lengths.end());
  const std::string command = command_line(o, results.backends, results.lengths);
  const size_t element = c10::elementSize(dtype);
  const double max_bytes = o.max_memory_gb * 1e9;

  AttentionBackendOptions backend_options;
  backend_options.chunk_size(o.chunk_size).block_size(o.block_size).window(o.window);

  std::vector<BackendState> states;
  for (const auto& b : results.backends) states.push_back({b, {}, {}, {}, {}});

  ProgressLine progress;
  for (const auto n : results.lengths) {
    // Decide, before drawing inputs, which backends run at this N.
    std::vector<BackendState*> active;
    for (auto& state : states) {
      AttentionMeasurement m;
      m.backend = state.name;
      m.length = n;
      const auto from_model = model_bytes(state.name, o, n, element);
      const auto from_trend =
          bench::extrapolate_cost(state.lengths, state.peaks, static_cast<double>(n));
      m.predicted_bytes = std::max(from_model, from_trend.value_or(0.0));
      const auto predicted_ms =
          bench::extrapolate_cost(state.lengths, state.medians, static_cast<double>(n));
      std::ostringstream why;
      if (!state.stop_reason.empty()) {
        why << state.stop_reason;
      } else if (m.predicted_bytes > max_bytes) {
        why << "predicted " << std::setprecision(3) << m.predicted_bytes / 1e9
            << " GB > --max-memory-gb " << o.max_memory_gb;
      } else if (predicted_ms && *predicted_ms > o.max_seconds * 1e3) {
        why << "predicted " << std::setprecision(3) << *predicted_ms / 1e3
            << " s per call > --max-seconds " << o.max_seconds;
      }
      m.reason = why.str();
      if (!m.reason.empty()) {
        m.status = MeasurementStatus::kSkipped;
        progress.done(describe_measurement(m));
      } else {
        active.push_back(&state);
      }
      results.table[{state.name, n}] = m;
    }
    if (active.empty()) continue;

    const auto inputs = draw_inputs(o, n, dtype, device);
    AttentionProblem problem;
    problem.query = inputs.query;
    problem.key = inputs.key;
    problem.value = inputs.value;
    problem.mask = inputs.mask;
    problem.options = backend_options;

    // One call: time and peak memory. Forward only runs without autograd (inference cost); the
    // backward is the vector-Jacobian product of out with g, i.e. the gradient of sum(out · g).
    const auto call = [&](const std::string& backend, int64_t& peak) {
      synchronize(device);
      PeakMemoryScope scope(device);
      const double ms = time_call_ms(device, [&] {
        if (!o.backward) {
          torch::NoGradGuard no_grad;
          const auto out = scaled_dot_product_attention(problem, backend).output;
          TORCH_CHECK(out.defined(), "backend '", backend, "' returned no output");
        } else {
          const auto out = scaled_dot_product_attention(problem, backend).output;
          TORCH_CHECK(out.defined(), "backend '", backend, "' returned no output");
          const auto grads = torch::autograd::grad(
              {out}, {problem.query, problem.key, problem.value}, {inputs.grad_output});
        }
      });
      peak = scope.peak_above_start();
      return ms;
    };

    // Backends alternate within each round, so drift of a shared, noisy machine spreads over all
    // of them rather than biasing the one measured last.
    std::vector<bool> finished(active.size(), false);
    const auto total_rounds = o.warmup + o.repeats;
    for (int64_t round = 0; round < total_rounds; ++round) {
      const bool warmup = round < o.warmup;
      for (size_t i = 0; i < active.size(); ++i) {
        if (finished[i]) continue;
        auto& state = *active[i];
        auto& m = results.table[{state.name, n}];
        std::ostringstream what;
        what << "bench: " << state.name << " N=" << n << " "
             << (warmup ? "warm-up " + std::to_string(round + 1) + "/" + std::to_string(o.warmup)
                        : "repeat " + std::to_string(round - o.warmup + 1) + "/" +
                              std::to_string(o.repeats))
             << " ...";
        progress.status(what.str());
        int64_t peak = 0;
        double ms = 0;
        try {
          ms = call(state.name, peak);
        } catch (const c10::Error& e) {
          m.status = MeasurementStatus::kUnsupported;
          m.reason = first_line(e.what_without_backtrace());
        } catch (const std::exception& e) {
          m.status = MeasurementStatus::kUnsupported;
          m.reason = first_line(e.what());
        }
        if (m.status == MeasurementStatus::kUnsupported) {
          m.times_ms.clear();
          finished[i] = true;
          progress.done(describe_measurement(m));
          continue;
        }
        const bool too_slow = ms > o.max_seconds * 1e3;
        // A warm-up call is kept only when it is the only call this length will get.
        if (!warmup || too_slow) {
          m.times_ms.push_back(ms);
          m.peak_bytes = std::max(m.peak_bytes, peak);
        }
        if (too_slow) {
          std::ostringstream why;
          why << "a call took " << std::setprecision(3) << ms / 1e3 << " s > --max-seconds "
              << o.max_seconds;
          m.truncated = static_cast<int64_t>(m.times_ms.size()) < o.repeats;
          m.reason = why.str() + (m.truncated ? "; fewer repeats" : "");
          state.stop_reason = why.str() + " at N=" + std::to_string(n);
          finished[i] = true;
        }
      }
    }
    for (size_t i = 0; i < active.size(); ++i) {
      auto& state = *active[i];
      const auto& m = results.table[{state.name, n}];
      if (m.status != MeasurementStatus::kOk) continue;
      state.lengths.push_back(static_cast<double>(n));
      state.medians.push_back(m.median_ms());
      state.peaks.push_back(static_cast<double>(m.peak_bytes));
      progress.done(describe_measurement(m));
    }
  }
  progress.clear();

  print_attention_table(results, o, device, command);
  if (!o.json.empty()) {
    write_attention_json(results, o, command, device, memory_check_bytes);
    std::cout << "measurements written to " << o.json << "\n";
  }
  if (!o.plot.empty()) {
    write_attention_plot(results, o);
    std::cout << "plot written to " << o.plot << "\n";
  }
  return 0;
}

}  // namespace attnzoo::cli
