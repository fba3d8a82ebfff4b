// Dynamic batching with Triton Inference Server's knobs and meaning: requests for one model wait
// in a bounded queue until `max_batch_size` rows are there or the oldest has waited
// `max_queue_delay_us`, then run as one batch on one of the model's instances. With a delay of 0 a
// batch takes whatever is queued when an instance is free. A full queue refuses at once (the
// server answers 503 with Retry-After) instead of growing a backlog; a request whose deadline
// passes while it waits fails with TIMEOUT and is not run; stop() refuses new requests and runs
// everything already queued.
//
// Torch-free: a job is anything with a row count and a way to fail; the model's run function
// casts the jobs back to what it made and completes each.
#pragma once

#include <attnzoo/serve/metrics.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace attnzoo::serve {

using Clock = std::chrono::steady_clock;

inline double microseconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

struct BatchingOptions {
  bool dynamic = true;         // false: every request runs alone, as it came
  int64_t max_batch_size = 8;  // rows per execution (a request of n rows counts n)
  int64_t max_queue_delay_us = 0;
  int64_t max_queue_size = 64;  // requests waiting; a full queue refuses
  int64_t instances = 1;        // threads executing batches of this model
  // Runs first on each instance's thread (the server sets its LibTorch thread count there).
  std::function<void()> instance_start;
};

class BatchJob {
 public:
  virtual ~BatchJob() = default;
  virtual int64_t rows() const = 0;
  // Completes the job without running it (its deadline passed); called at most once, instead of
  // the model's completion.
  virtual void fail(FailureReason reason, const std::string& message) = 0;

  Clock::time_point arrival;  // set by submit
  Clock::time_point deadline = Clock::time_point::max();
  double queue_us = 0;  // set when taken into a batch
};

// How long a batch's stages took, for the metrics.
struct BatchTiming {
  double input_us = 0;
  double infer_us = 0;
  double output_us = 0;
};

class DynamicBatcher {
 public:
  using Job = std::shared_ptr<BatchJob>;
  // Runs one batch and completes every job of it (success or failure); must not throw.
  using Run = std::function<BatchTiming(std::vector<Job>&)>;

  // `metrics` (may be null) receives every execution and the queue length under `model`.
  DynamicBatcher(std::string model, BatchingOptions options, Run run,
                 ServerMetrics* metrics = nullptr);
  ~DynamicBatcher();  // stop()
  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  enum class Admission { kQueued, kQueueFull, kStopped, kTooLarge };
  // kTooLarge: more rows than max_batch_size (with dynamic batching). Only kQueued takes the job;
  // otherwise the caller answers the request itself.
  Admission submit(Job job);

  // Refuses new jobs, runs those queued, joins the instances. Idempotent.
  void stop();
  int64_t pending() const;
  const BatchingOptions& options() const { return options_; }

 private:
  void serve_instance();
  std::vector<Job> next_batch(std::unique_lock<std::mutex>& lock);

  std::string model_;
  BatchingOptions options_;
  Run run_;
  ServerMetrics* metrics_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  int64_t queued_rows_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> instances_;
};

}  // namespace attnzoo::serve
