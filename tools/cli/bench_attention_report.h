// What `attnzoo bench attention` measured, and its three reports of it: the table on stdout, the
// JSON record and the log-log plot, each beside the reference estimates of standard multi-head
// attention and with the fitted scaling exponents (tools/bench/scaling.h).
#pragma once

#include "tools/cli/bench_attention.h"

#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace attnzoo::cli {

enum class MeasurementStatus { kOk, kUnsupported, kSkipped };

// "ok", "n/a" or "skip", as the table's notes and the JSON write it.
const char* status_name(MeasurementStatus s);

// One backend at one length.
struct AttentionMeasurement {
  std::string backend;
  int64_t length = 0;
  MeasurementStatus status = MeasurementStatus::kOk;
  std::string reason;            // why n/a or skip; why fewer repeats than asked
  std::vector<double> times_ms;  // timed calls (warm-up excluded unless it was the only call)
  int64_t peak_bytes = -1;       // max over the timed calls, above the live bytes at call start
  double predicted_bytes = 0;
  bool truncated = false;  // a call exceeded --max-seconds: fewer samples than --repeats

  double median_ms() const;  // NaN without a timed call
  double min_ms() const;     // NaN without a timed call
};

// Every (backend, length) of a run, lengths increasing.
struct AttentionResults {
  std::vector<std::string> backends;
  std::vector<int64_t> lengths;
  std::map<std::pair<std::string, int64_t>, AttentionMeasurement> table;
  double load_at_start = NAN;  // the 1-minute load average when the run began
  const AttentionMeasurement& at(const std::string& b, int64_t n) const { return table.at({b, n}); }
};

// The progress line of a finished measurement: "bench: math N=512 ... 14.2 ms, 125 MiB".
std::string describe_measurement(const AttentionMeasurement& m);

// The table on stdout: a header (the settings, the machine, `command`), time and peak memory per
// backend and N beside the reference estimates, the fitted exponents, and why cells are n/a,
// skipped or starred.
void print_attention_table(const AttentionResults& r, const AttentionBenchOptions& o,
                           const torch::Device& device, const std::string& command);

// The JSON record at o.json: settings, machine, memory method (with the tracker's self-check on
// 16 MiB, `memory_check_bytes`), reference points, every measurement and the fits.
void write_attention_json(const AttentionResults& r, const AttentionBenchOptions& o,
                          const std::string& command, const torch::Device& device,
                          int64_t memory_check_bytes);

// The PNG at o.plot: time and peak memory against N, log-log, one line per backend and the
// reference estimates dashed.
void write_attention_plot(const AttentionResults& r, const AttentionBenchOptions& o);

}  // namespace attnzoo::cli
