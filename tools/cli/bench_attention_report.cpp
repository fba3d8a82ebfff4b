#include "tools/cli/bench_attention_report.h"

#include <attnzoo/io/atomic_file.h>
#include "tools/bench/scaling.h"
#include "tools/bench/timing.h"
#include "tools/cli/bench_machine.h"
#include "tools/cli/plot.h"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <iostream>
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

// The exponents of time and peak memory against N.
struct CostExponents {
  bench::ScalingExponent time, memory;
};

// A backend's exponents over its measured lengths (memory over those with a peak above zero).
CostExponents cost_exponents(const AttentionResults& r, const std::string& backend) {
  std::vector<double> x, t, x_mem, m;
  for (const auto n : r.lengths) {
    const auto& meas = r.at(backend, n);
    if (meas.status != MeasurementStatus::kOk) continue;
    x.push_back(static_cast<double>(n));
    t.push_back(meas.median_ms());
    if (meas.peak_bytes > 0) {
      x_mem.push_back(static_cast<double>(n));
      m.push_back(static_cast<double>(meas.peak_bytes));
    }
  }
  return {bench::scaling_exponent(x, t), bench::scaling_exponent(x_mem, m)};
}

CostExponents notes_exponents() {
  std::vector<double> x, t, m;
  for (const auto& p : kNotes) {
    x.push_back(static_cast<double>(p.length));
    t.push_back(p.time_ms);
    m.push_back(p.memory_mb);
  }
  return {bench::scaling_exponent(x, t), bench::scaling_exponent(x, m)};
}

std::string measurement_cell(const AttentionMeasurement& m, bool time) {
  if (m.status == MeasurementStatus::kUnsupported) return "n/a";
  if (m.status == MeasurementStatus::kSkipped) return "skip";
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

std::string table_header(const AttentionResults& r, const AttentionBenchOptions& o,
                         const torch::Device& device, const std::string& command) {
  std::ostringstream header;
  header << "attention cost, " << (o.backward ? "forward+backward" : "forward") << ": B=" << o.batch
         << " H=" << o.heads << " D=" << o.dim << " (head_dim " << o.dim / o.heads << ") "
         << o.dtype << " on " << (device.is_cpu() ? cpu_model() : o.device) << ", "
         << torch::get_num_threads() << " threads (load average " << std::setprecision(3)
         << r.load_at_start << " at start)" << (o.causal ? ", causal" : "")
         << (o.padding ? ", padded keys" : "") << "; median of " << o.repeats << " after "
         << o.warmup << " warm-up\n"
         << command;
  return header.str();
}

// Why cells are n/a, skipped or starred: one line per (backend, status, reason), listing the N,
// in table order.
void print_table_notes(const AttentionResults& r) {
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
      if (m.status != MeasurementStatus::kOk) {
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
}

}  // namespace

const char* status_name(MeasurementStatus s) {
  switch (s) {
    case MeasurementStatus::kOk:
      return "ok";
    case MeasurementStatus::kUnsupported:
      return "n/a";
    case MeasurementStatus::kSkipped:
      return "skip";
  }
  return "?";
}

double AttentionMeasurement::median_ms() const {
  return times_ms.empty() ? NAN : bench::median(times_ms);
}

double AttentionMeasurement::min_ms() const {
  return times_ms.empty() ? NAN : *std::min_element(times_ms.begin(), times_ms.end());
}

std::string describe_measurement(const AttentionMeasurement& m) {
  std::ostringstream out;
  out << "bench: " << m.backend << " N=" << m.length << " ... ";
  if (m.status == MeasurementStatus::kOk) {
    out << format_value(m.median_ms()) << " ms, " << format_value(m.peak_bytes / kMiB) << " MiB";
    if (m.truncated) out << " (" << m.reason << ")";
  } else {
    out << status_name(m.status) << " (" << m.reason << ")";
  }
  return out.str();
}

void print_attention_table(const AttentionResults& r, const AttentionBenchOptions& o,
                           const torch::Device& device, const std::string& command) {
  std::cout << table_header(r, o, device, command) << "\n";
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
  const std::string rule(total + 2 * (r.backends.size() + 1), '-');
  std::cout << rule << "\n";
  for (const auto n : r.lengths) {
    std::vector<std::string> cells = {std::to_string(n)};
    const auto* notes = notes_at(n);
    cells.push_back(notes ? format_value(notes->time_ms) : "");
    cells.push_back(notes ? format_value(notes->memory_mb) : "");
    for (const auto& b : r.backends) {
      cells.push_back(measurement_cell(r.at(b, n), true));
      cells.push_back(measurement_cell(r.at(b, n), false));
    }
    row(cells);
  }
  std::cout << rule << "\n";
  std::vector<CostExponents> exponents = {notes_exponents()};
  for (const auto& b : r.backends) exponents.push_back(cost_exponents(r, b));
  std::vector<std::string> fits = {"fit"}, ends = {"last2"};
  for (const auto& k : exponents) {
    fits.push_back(exponent_cell(k.time.all));
    fits.push_back(exponent_cell(k.memory.all));
    ends.push_back(exponent_cell(k.time.last2));
    ends.push_back(exponent_cell(k.memory.last2));
  }
  row(fits);
  row(ends);
  print_table_notes(r);
  std::cout << "\nms: median of the timed calls; MiB: peak allocated during a call above the "
               "inputs (* fewer timed calls than asked, see above); fit: least-squares slope of "
               "log cost against log N over the measured points; last2: the slope between the two "
               "largest measured N; notes: reference estimates of standard attention (forward, "
               "d_model 512, "
               "8 heads).\n";
}

void write_attention_json(const AttentionResults& r, const AttentionBenchOptions& o,
                          const std::string& command, const torch::Device& device,
                          int64_t memory_check_bytes) {
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
      const bool ok = m.status == MeasurementStatus::kOk;
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
    const auto k = cost_exponents(r, b);
    fits.push_back({{"backend", b},
                    {"time_exponent", json_number(k.time.all)},
                    {"memory_exponent", json_number(k.memory.all)},
                    {"time_exponent_last2", json_number(k.time.last2)},
                    {"memory_exponent_last2", json_number(k.memory.last2)}});
  }
  d["fits"] = fits;
  io::write_file_atomically(o.json, d.dump(1) + "\n");
}

void write_attention_plot(const AttentionResults& r, const AttentionBenchOptions& o) {
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
      if (meas.status != MeasurementStatus::kOk) continue;
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

}  // namespace attnzoo::cli
