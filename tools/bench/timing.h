// Timing of repeated calls, as every benchmark of attnzoo reports it: warm-up calls first, then
// each call timed on the steady clock, with the caller's `sync` (e.g. torch::cuda::synchronize)
// inside the timed interval so that asynchronous GPU work is counted. Reported as the median (the
// machines are shared and noisy) and the minimum.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace attnzoo::bench {

// Milliseconds since construction (or the last restart()).
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void restart() { start_ = std::chrono::steady_clock::now(); }
  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// The median of `values` (the mean of the two middle ones for an even count); values non-empty.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

struct Timings {
  std::vector<double> ms;  // one per timed call, in call order
  double median() const { return bench::median(ms); }
  double min() const { return *std::min_element(ms.begin(), ms.end()); }
};

// Calls `call` `warmup` times, runs `sync`, then times `iterations` calls (>= 1), each followed by
// `sync` inside its interval.
inline Timings time_calls(const std::function<void()>& call, int64_t warmup, int64_t iterations,
                          const std::function<void()>& sync = {}) {
  for (int64_t i = 0; i < warmup; ++i) call();
  if (sync) sync();
  Timings timings;
  timings.ms.reserve(static_cast<size_t>(std::max<int64_t>(iterations, 0)));
  for (int64_t i = 0; i < iterations; ++i) {
    const Stopwatch watch;
    call();
    if (sync) sync();
    timings.ms.push_back(watch.elapsed_ms());
  }
  return timings;
}

}  // namespace attnzoo::bench
