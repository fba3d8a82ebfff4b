#include <attnzoo/serve/dynamic_batcher.h>

#include <stdexcept>

namespace attnzoo::serve {
DynamicBatcher::DynamicBatcher(std::string model, BatchingOptions options, Run run,
                               ServerMetrics* metrics)
    : model_(std::move(model)), options_(options), run_(std::move(run)), metrics_(metrics) {
  if (options_.max_batch_size < 1 || options_.max_queue_size < 1 || options_.instances < 1 ||
      options_.max_queue_delay_us < 0) {
    throw std::invalid_argument("DynamicBatcher " + model_ +
                                ": max_batch_size, max_queue_size and instances must be >= 1, "
                                "max_queue_delay_us >= 0");
  }
  for (int64_t i = 0; i < options_.instances; ++i) {
    instances_.emplace_back([this] {
      if (options_.instance_start) options_.instance_start();
      serve_instance();
    });
  }
}

DynamicBatcher::~DynamicBatcher() { stop(); }

DynamicBatcher::Admission DynamicBatcher::submit(Job job) {
  if (options_.dynamic && job->rows() > options_.max_batch_size) return Admission::kTooLarge;
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return Admission::kStopped;
  if (static_cast<int64_t>(queue_.size()) >= options_.max_queue_size) return Admission::kQueueFull;
  job->arrival = Clock::now();
  queued_rows_ += job->rows();
  queue_.push_back(std::move(job));
  if (metrics_ != nullptr) metrics_->set_pending(model_, static_cast<int64_t>(queue_.size()));
  wake_.notify_all();
  return Admission::kQueued;
}

void DynamicBatcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& instance : instances_) {
    if (instance.joinable()) instance.join();
  }
}

int64_t DynamicBatcher::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

std::vector<DynamicBatcher::Job> DynamicBatcher::next_batch(std::unique_lock<std::mutex>& lock) {
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return {};  // stopping with nothing left
    if (options_.dynamic && options_.max_queue_delay_us > 0) {
      // Wait for a full batch, at most until the oldest request has waited the delay. Another
      // instance may take the queue meanwhile: then start over.
      const auto until =
          queue_.front()->arrival + std::chrono::microseconds(options_.max_queue_delay_us);
      wake_.wait_until(lock, until, [&] {
        return stopping_ || queue_.empty() || queued_rows_ >= options_.max_batch_size;
      });
      if (queue_.empty()) continue;
    }
    std::vector<Job> batch;
    int64_t rows = 0;
    while (!queue_.empty()) {
      const int64_t next = queue_.front()->rows();
      if (!batch.empty() && (!options_.dynamic || rows + next > options_.max_batch_size)) break;
      rows += next;
      queued_rows_ -= next;
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    if (metrics_ != nullptr) metrics_->set_pending(model_, static_cast<int64_t>(queue_.size()));
    if (!queue_.empty()) wake_.notify_all();  // another instance may take the rest
    return batch;
  }
}

void DynamicBatcher::serve_instance() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    auto batch = next_batch(lock);
    if (batch.empty()) return;
    lock.unlock();
    const auto now = Clock::now();
    std::vector<Job> live;
    double queue_us = 0;
    int64_t rows = 0;
    for (auto& job : batch) {
      job->queue_us = microseconds_between(job->arrival, now);
      if (job->deadline < now) {
        job->fail(FailureReason::kTimeout, "the request's deadline passed after " +
                                               std::to_string(static_cast<int64_t>(job->queue_us)) +
                                               " us in the queue, before the model ran");
        continue;
      }
      queue_us += job->queue_us;
      rows += job->rows();
      live.push_back(std::move(job));
    }
    if (!live.empty()) {
      const auto timing = run_(live);
      if (metrics_ != nullptr) {
        metrics_->batch_executed(model_, rows, queue_us, timing.input_us, timing.infer_us,
                                 timing.output_us);
      }
    }
    lock.lock();
  }
}

}  // namespace attnzoo::serve
