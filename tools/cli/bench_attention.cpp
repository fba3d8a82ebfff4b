#include "tools/cli/bench_attention.h"

#include <attnzoo/api/inference.h>
#include <attnzoo/io/atomic_file.h>
#include <attnzoo/layers/attention_backend.h>
#include "tools/bench/memory_tracking.h"
#include "tools/bench/timing.h"
#include "tools/cli/bench_machine.h"
#include "tools/cli/plot.h"
#include "tools/cli/progress_line.h"

#include <torch/cuda.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

namespace attnzoo::cli {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Reference cost estimates of standard multi-head attention at d_model 512, 8 heads, forward,
// printed beside the measurements at the same lengths.
struct NotesPoint {
  int64_t length;
  double memory_mb;
  double time_ms;
};
constexpr NotesPoint kNotes[] = {
    {512, 125, 15}, {1024, 500, 58}, {2048, 2000, 230}, {4096, 8000, 920}};

const NotesPoint* notes_at(int64_t length) {
  for (const auto& p : kNotes) {
    if (p.length == length) return &p;
  }
  return nullptr;
}

enum class Status { kOk, kUnsupported, kSkipped };

const char* status_name(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kUnsupported:
      return "n/a";
    case Status::kSkipped:
      return "skip";
  }
  return "?";
}

struct Measurement {
  std::string backend;
  int64_t length = 0;
  Status status = Status::kOk;
  std::string reason;            // why n/a or skip; why fewer repeats than asked
  std::vector<double> times_ms;  // timed calls (warm-up excluded unless it was the only call)
  int64_t peak_bytes = -1;       // max over the timed calls, above the live bytes at call start
  double predicted_bytes = 0;
  bool truncated = false;  // a call exceeded --max-seconds: fewer samples than --repeats

  double median_ms() const { return times_ms.empty() ? NAN : bench::median(times_ms); }
  double min_ms() const {
    return times_ms.empty() ? NAN : *std::min_element(times_ms.begin(), times_ms.end());
  }
};

// Least-squares slope of log y against log x: the k of y ∝ N^k. Empty with fewer than two
// distinct x.
std::optional<double> loglog_slope(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<std::pair<double, double>> points;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] > 0 && y[i] > 0 && std::isfinite(y[i])) {
      points.emplace_back(std::log(x[i]), std::log(y[i]));
    }
  }
  if (points.size() < 2) return std::nullopt;
  double mx = 0, my = 0;
  for (const auto& [a, b] : points) mx += a, my += b;
  mx /= static_cast<double>(points.size());
  my /= static_cast<double>(points.size());
  double sxx = 0, sxy = 0;
  for (const auto& [a, b] : points) sxx += (a - mx) * (a - mx), sxy += (a - mx) * (b - my);
  if (sxx <= 0) return std::nullopt;
  return sxy / sxx;
}

std::string first_line(std::string text) {
  const auto end = text.find('\n');
  if (end != std::string::npos) text.resize(end);
  return text;
}

std::string format_value(double v) {
  if (!std::isfinite(v)) return "-";
  char buffer[32];
  if (v < 1) {
    std::snprintf(buffer, sizeof(buffer), "%.3f", v);
  } else if (v < 10) {
    std::snprintf(buffer, sizeof(buffer), "%.2f", v);
  } else if (v < 1000) {
    std::snprintf(buffer, sizeof(buffer), "%.1f", v);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.0f", v);
  }
  return buffer;
}

std::string describe(const Measurement& m) {
  std::ostringstream out;
  out << "bench: " << m.backend << " N=" << m.length << " ... ";
  if (m.status == Status::kOk) {
    out << format_value(m.median_ms()) << " ms, " << format_value(m.peak_bytes / kMiB) << " MiB";
    if (m.truncated) out << " (" << m.reason << ")";
  } else {
    out << status_name(m.status) << " (" << m.reason << ")";
  }
  return out.str();
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
// are assumed O(N); the extrapolation in predicted_bytes() catches any that are not.
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

// From the last two measured points, the cost at `n` with the local exponent clamped to [1, 2]
// (exact attention is at most quadratic in both time and memory; at least linear). With one point,
// exponent 2, the cautious choice.
std::optional<double> extrapolate(const std::vector<double>& xs, const std::vector<double>& ys,
                                  int64_t n) {
  std::vector<std::pair<double, double>> points;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (ys[i] > 0 && std::isfinite(ys[i])) points.emplace_back(xs[i], ys[i]);
  }
  if (points.empty()) return std::nullopt;
  double k = 2.0;
  const auto [x1, y1] = points.back();
  if (points.size() >= 2) {
    const auto [x0, y0] = points[points.size() - 2];
    if (x1 > x0) k = std::clamp(std::log(y1 / y0) / std::log(x1 / x0), 1.0, 2.0);
  }
  return y1 * std::pow(static_cast<double>(n) / x1, k);
}

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

struct Results {
  std::vector<std::string> backends;
  std::vector<int64_t> lengths;
  std::map<std::pair<std::string, int64_t>, Measurement> table;
  double load_at_start = NAN;
  const Measurement& at(const std::string& b, int64_t n) const { return table.at({b, n}); }
};

// Exponents k of cost ∝ N^k: least squares over every measured point, and the slope between the
// two largest measured N, which is closer to the asymptote when small N are dominated by fixed
// costs (a chunked backend's per-chunk buffers, thread start-up).
struct Fit {
  std::optional<double> time, memory;
  std::optional<double> time_last2, memory_last2;
};

std::optional<double> last2(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() < 2) return std::nullopt;
  return loglog_slope({x[x.size() - 2], x.back()}, {y[y.size() - 2], y.back()});
}

Fit fit(const Results& r, const std::string& backend) {
  std::vector<double> x, t, x_mem, m;
  for (const auto n : r.lengths) {
    const auto& meas = r.at(backend, n);
    if (meas.status != Status::kOk) continue;
    x.push_back(static_cast<double>(n));
    t.push_back(meas.median_ms());
    if (meas.peak_bytes > 0) {
      x_mem.push_back(static_cast<double>(n));
      m.push_back(static_cast<double>(meas.peak_bytes));
    }
  }
  return {loglog_slope(x, t), loglog_slope(x_mem, m), last2(x, t), last2(x_mem, m)};
}

Fit notes_fit() {
  std::vector<double> x, t, m;
  for (const auto& p : kNotes) {
    x.push_back(static_cast<double>(p.length));
    t.push_back(p.time_ms);
    m.push_back(p.memory_mb);
  }
  return {loglog_slope(x, t), loglog_slope(x, m), last2(x, t), last2(x, m)};
}

std::string cell(const Measurement& m, bool time) {
  if (m.status == Status::kUnsupported) return "n/a";
  if (m.status == Status::kSkipped) return "skip";
  const std::string v =
      time ? format_value(m.median_ms()) : format_value(static_cast<double>(m.peak_bytes) / kMiB);
  return m.truncated && time ? v + "*" : v;
}

std::string exponent_cell(std::optional<double> k) {
  if (!k) return "-";
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "N^%.2f", *k);
  return buffer;
}

void print_table(const Results& r, const std::string& header) {
  std::cout << header << "\n";
  std::vector<std::string> columns = {"N", "notes ms", "notes MB"};
  for (const auto& b : r.backends) {
    columns.push_back(b + " ms");
    columns.push_back(b + " MiB");
  }
  std::vector<size_t> widths;
  for (const auto& c : columns) widths.push_back(std::max<size_t>(c.size(), 9));
  widths[0] = 8;
  const auto row = [&](const std::vector<std::string>& cells) {
    std::ostringstream line;
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i == 1 || (i >= 3 && i % 2 == 1)) line << " |";
      line << " " << std::setw(static_cast<int>(widths[i])) << cells[i];
    }
    std::cout << line.str() << "\n";
  };
  row(columns);
  size_t total = 0;
  for (const auto w : widths) total += w + 1;
  std::cout << std::string(total + 2 * (r.backends.size() + 1), '-') << "\n";
  for (const auto n : r.lengths) {
    std::vector<std::string> cells = {std::to_string(n)};
    const auto* notes = notes_at(n);
    cells.push_back(notes ? format_value(notes->time_ms) : "");
    cells.push_back(notes ? format_value(notes->memory_mb) : "");
    for (const auto& b : r.backends) {
      cells.push_back(cell(r.at(b, n), true));
      cells.push_back(cell(r.at(b, n), false));
    }
    row(cells);
  }
  std::cout << std::string(total + 2 * (r.backends.size() + 1), '-') << "\n";
  const auto nf = notes_fit();
  std::vector<std::string> fits = {"fit", exponent_cell(nf.time), exponent_cell(nf.memory)};
  for (const auto& b : r.backends) {
    const auto f = fit(r, b);
    fits.push_back(exponent_cell(f.time));
    fits.push_back(exponent_cell(f.memory));
  }
  row(fits);
  std::vector<std::string> ends = {"last2", exponent_cell(nf.time_last2),
                                   exponent_cell(nf.memory_last2)};
  for (const auto& b : r.backends) {
    const auto f = fit(r, b);
    ends.push_back(exponent_cell(f.time_last2));
    ends.push_back(exponent_cell(f.memory_last2));
  }
  row(ends);

  // Why cells are n/a, skipped or starred: one line per (backend, status, reason), listing the N,
  // in table order.
  using Key = std::tuple<std::string, std::string, std::string>;
  std::vector<std::pair<Key, std::vector<int64_t>>> notes;
  const auto note = [&](Key key, int64_t n) {
    auto it =
        std::find_if(notes.begin(), notes.end(), [&](const auto& e) { return e.first == key; });
    if (it == notes.end()) it = notes.insert(notes.end(), {key, {}});
    it->second.push_back(n);
  };
  for (const auto& b : r.backends) {
    for (const auto n : r.lengths) {
      const auto& m = r.at(b, n);
      if (m.status != Status::kOk) {
        note({b, status_name(m.status), m.reason}, n);
      } else if (m.truncated) {
        note({b, "*", m.reason}, n);
      }
    }
  }
  if (!notes.empty()) std::cout << "\n";
  for (const auto& [key, ns] : notes) {
    const auto& [b, what, reason] = key;
    std::cout << "  " << b << " " << what << " at N=";
    for (size_t i = 0; i < ns.size(); ++i) std::cout << (i ? "," : "") << ns[i];
    std::cout << ": " << reason << "\n";
  }
  std::cout << "\nms: median of the timed calls; MiB: peak allocated during a call above the "
               "inputs (* fewer timed calls than asked, see above); fit: least-squares slope of "
               "log cost against log N over the measured points; last2: the slope between the two "
               "largest measured N; notes: reference estimates of standard attention (forward, "
               "d_model 512, "
               "8 heads).\n";
}

void write_json(const Results& r, const AttentionBenchOptions& o, const std::string& command,
                const torch::Device& device, int64_t memory_check_bytes) {
  using nlohmann::json;
  json d;
  d["benchmark"] = "attention";
  d["command"] = command;
  d["settings"] = {{"batch", o.batch},
                   {"heads", o.heads},
                   {"dim", o.dim},
                   {"head_dim", o.dim / o.heads},
                   {"dtype", o.dtype},
                   {"device", o.device},
                   {"backward", o.backward},
                   {"causal", o.causal},
                   {"padding", o.padding},
                   {"repeats", o.repeats},
                   {"warmup", o.warmup},
                   {"max_memory_gb", json_number(o.max_memory_gb)},
                   {"max_seconds", json_number(o.max_seconds)},
                   {"chunk_size", o.chunk_size},
                   {"block_size", o.block_size},
                   {"window", o.window},
                   {"seed", o.seed}};
  d["machine"] = machine_json(device);
  d["machine"]["load_average_1min_start"] = json_number(r.load_at_start);
  d["machine"]["load_average_1min_end"] = json_number(load_average());
  d["memory_measurement"] = {
      {"method", device.is_cpu() ? "tracking wrapper around c10's CPU allocator: peak live bytes "
                                   "during the call minus live bytes at its start"
                                 : "CUDA caching allocator allocated_bytes peak minus current at "
                                   "call start"},
      {"self_check_bytes_for_16MiB_tensor", memory_check_bytes}};
  json points = json::array();
  for (const auto& p : kNotes) {
    points.push_back({{"length", p.length},
                      {"memory_mb", json_number(p.memory_mb)},
                      {"time_ms", json_number(p.time_ms)}});
  }
  d["reference"] = {
      {"source", "reference estimates, standard multi-head attention, d_model 512, 8 heads"},
      {"points", points}};
  json measurements = json::array();
  for (const auto& b : r.backends) {
    for (const auto n : r.lengths) {
      const auto& m = r.at(b, n);
      const bool ok = m.status == Status::kOk;
      json times = json::array();
      for (const double t : m.times_ms) times.push_back(json_number(t));
      measurements.push_back(
          {{"backend", b},
           {"length", n},
           {"status", status_name(m.status)},
           {"reason", m.reason},
           {"time_ms_median", json_number(m.median_ms())},
           {"time_ms_min", json_number(m.min_ms())},
           {"times_ms", times},
           {"peak_bytes", ok ? json(m.peak_bytes) : json(nullptr)},
           {"peak_mib", ok ? json_number(static_cast<double>(m.peak_bytes) / kMiB) : json(nullptr)},
           {"predicted_bytes", json_number(m.predicted_bytes)},
           {"truncated", m.truncated}});
    }
  }
  d["measurements"] = measurements;
  json fits = json::array();
  for (const auto& b : r.backends) {
    const auto f = fit(r, b);
    fits.push_back({{"backend", b},
                    {"time_exponent", json_number(f.time)},
                    {"memory_exponent", json_number(f.memory)},
                    {"time_exponent_last2", json_number(f.time_last2)},
                    {"memory_exponent_last2", json_number(f.memory_last2)}});
  }
  d["fits"] = fits;
  io::write_file_atomically(o.json, d.dump(1) + "\n");
}

void write_plot(const Results& r, const AttentionBenchOptions& o) {
  const std::string config = std::string(o.backward ? "forward+backward" : "forward") +
                             ", B=" + std::to_string(o.batch) + " H=" + std::to_string(o.heads) +
                             " D=" + std::to_string(o.dim) + " " + o.dtype + " " + o.device;
  PlotPanel time{"time per call (" + config + ")", "sequence length N", "time (ms), median", {}};
  PlotPanel memory{"peak memory per call (" + config + ")",
                   "sequence length N",
                   "peak memory above inputs (MiB)",
                   {}};
  for (size_t i = 0; i < r.backends.size(); ++i) {
    PlotSeries t{r.backends[i], {}, {}, plot_color(i)}, m = t;
    for (const auto n : r.lengths) {
      const auto& meas = r.at(r.backends[i], n);
      if (meas.status != Status::kOk) continue;
      t.x.push_back(static_cast<double>(n));
      t.y.push_back(meas.median_ms());
      m.x.push_back(static_cast<double>(n));
      m.y.push_back(static_cast<double>(meas.peak_bytes) / kMiB);
    }
    time.series.push_back(t);
    memory.series.push_back(m);
  }
  PlotSeries notes_time{
      "reference estimates (D=512, H=8)", {}, {}, cv::Scalar(130, 130, 130), true},
      notes_memory = notes_time;
  for (const auto& p : kNotes) {
    notes_time.x.push_back(static_cast<double>(p.length));
    notes_time.y.push_back(p.time_ms);
    notes_memory.x.push_back(static_cast<double>(p.length));
    notes_memory.y.push_back(p.memory_mb);
  }
  time.series.push_back(notes_time);
  memory.series.push_back(notes_memory);
  write_log_log_plot({time, memory}, o.plot);
}

}  // namespace

int run_attention_bench(const AttentionBenchOptions& o) {
  const auto registered = attention_backend_names();
  validate(o, registered);
  const auto dtype = api_detail::parse_dtype("--dtype", o.dtype, /*accept_fp64=*/true);
  const auto device = resolve_device(o.device);
  if (o.threads > 0) torch::set_num_threads(static_cast<int>(o.threads));

  int64_t memory_check_bytes = 0;
  if (device.is_cpu()) {
    install_cpu_memory_tracking();
    // A tracker that misses LibTorch's allocations would print plausible zeros; refuse instead.
    memory_check_bytes = check_cpu_memory_tracking(16 * 1024 * 1024);
  }

  Results results;
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
      Measurement m;
      m.backend = state.name;
      m.length = n;
      const auto from_model = model_bytes(state.name, o, n, element);
      const auto from_trend = extrapolate(state.lengths, state.peaks, n);
      m.predicted_bytes = std::max(from_model, from_trend.value_or(0.0));
      const auto predicted_ms = extrapolate(state.lengths, state.medians, n);
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
        m.status = Status::kSkipped;
        progress.done(describe(m));
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
          m.status = Status::kUnsupported;
          m.reason = first_line(e.what_without_backtrace());
        } catch (const std::exception& e) {
          m.status = Status::kUnsupported;
          m.reason = first_line(e.what());
        }
        if (m.status == Status::kUnsupported) {
          m.times_ms.clear();
          finished[i] = true;
          progress.done(describe(m));
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
      if (m.status != Status::kOk) continue;
      state.lengths.push_back(static_cast<double>(n));
      state.medians.push_back(m.median_ms());
      state.peaks.push_back(static_cast<double>(m.peak_bytes));
      progress.done(describe(m));
    }
  }
  progress.clear();

  std::ostringstream header;
  header << "attention cost, " << (o.backward ? "forward+backward" : "forward") << ": B=" << o.batch
         << " H=" << o.heads << " D=" << o.dim << " (head_dim " << o.dim / o.heads << ") "
         << o.dtype << " on " << (device.is_cpu() ? cpu_model() : o.device) << ", "
         << torch::get_num_threads() << " threads (load average " << std::setprecision(3)
         << results.load_at_start << " at start)" << (o.causal ? ", causal" : "")
         << (o.padding ? ", padded keys" : "") << "; median of " << o.repeats << " after "
         << o.warmup << " warm-up\n"
         << command;
  print_table(results, header.str());
  if (!o.json.empty()) {
    write_json(results, o, command, device, memory_check_bytes);
    std::cout << "measurements written to " << o.json << "\n";
  }
  if (!o.plot.empty()) {
    write_plot(results, o);
    std::cout << "plot written to " << o.plot << "\n";
  }
  return 0;
}

}  // namespace attnzoo::cli
