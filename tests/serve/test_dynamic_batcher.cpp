// The dynamic batcher's contract with Triton's meaning of its knobs: batches of up to
// max_batch_size rows, formed within max_queue_delay_us; a bounded queue that refuses when full;
// deadlines that fail a request instead of running it late; stop() runs what was queued.
#include <attnzoo/serve/dynamic_batcher.h>

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <set>
#include <thread>

namespace attnzoo::serve {
namespace test_dynamic_batcher {

using namespace std::chrono_literals;

struct CountedJob : BatchJob {
  explicit CountedJob(int64_t n = 1) : n(n) {}
  int64_t rows() const override { return n; }
  void fail(FailureReason why, const std::string& message) override {
    failed = why;
    error = message;
    done.set_value();
  }
  int64_t n;
  std::optional<FailureReason> failed;
  std::string error;
  int64_t batch_rows = 0;  // the rows of the batch it ran in
  std::promise<void> done;
};

// Records the batches it runs; each may be held until released.
struct Recorder {
  std::mutex mutex;
  std::vector<int64_t> batch_rows;
  std::atomic<int> running{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  bool hold = false;

  DynamicBatcher::Run run() {
    return [this](std::vector<DynamicBatcher::Job>& jobs) {
      ++running;
      if (hold) released.wait();
      int64_t rows = 0;
      for (auto& job : jobs) rows += job->rows();
      {
        std::lock_guard<std::mutex> lock(mutex);
        batch_rows.push_back(rows);
      }
      for (auto& job : jobs) {
        auto& counted = static_cast<CountedJob&>(*job);
        counted.batch_rows = rows;
        counted.done.set_value();
      }
      return BatchTiming{};
    };
  }
};

TEST(DynamicBatcher, WaitsUpToTheDelayToFillABatch) {
  Recorder recorder;
  BatchingOptions options;
  options.max_batch_size = 4;
  options.max_queue_delay_us = 2'000'000;  // long: only a full batch makes it run early
  DynamicBatcher batcher("m", options, recorder.run());
  std::vector<std::shared_ptr<CountedJob>> jobs;
  for (int i = 0; i < 4; ++i) {
    jobs.push_back(std::make_shared<CountedJob>());
    ASSERT_EQ(batcher.submit(jobs.back()), DynamicBatcher::Admission::kQueued);
  }
  const auto start = Clock::now();
  for (auto& job : jobs) job->done.get_future().wait();
  EXPECT_LT(Clock::now() - start, 1s) << "a full batch should not wait for the delay";
  EXPECT_EQ(recorder.batch_rows, std::vector<int64_t>{4});
}

TEST(DynamicBatcher, RunsAPartialBatchWhenTheDelayPasses) {
  Recorder recorder;
  BatchingOptions options;
  options.max_batch_size = 8;
  options.max_queue_delay_us = 50'000;
  DynamicBatcher batcher("m", options, recorder.run());
  auto a = std::make_shared<CountedJob>(2);
  auto b = std::make_shared<CountedJob>(1);
  const auto start = Clock::now();
  batcher.submit(a);
  batcher.submit(b);
  a->done.get_future().wait();
  b->done.get_future().wait();
  EXPECT_GE(Clock::now() - start, 45ms);
  EXPECT_EQ(recorder.batch_rows, std::vector<int64_t>{3});
}

TEST(DynamicBatcher, NeverExceedsMaxBatchSizeAndRefusesLargerRequests) {
  Recorder recorder;
  recorder.hold = true;
  BatchingOptions options;
  options.max_batch_size = 4;
  options.max_queue_size = 100;
  DynamicBatcher batcher("m", options, recorder.run());
  // The first job occupies the instance; the rest queue behind it.
  auto first = std::make_shared<CountedJob>(1);
  batcher.submit(first);
  while (recorder.running == 0) std::this_thread::sleep_for(1ms);
  std::vector<std::shared_ptr<CountedJob>> jobs;
  for (const int64_t rows : {3, 2, 2, 1, 4, 1}) {
    jobs.push_back(std::make_shared<CountedJob>(rows));
    ASSERT_EQ(batcher.submit(jobs.back()), DynamicBatcher::Admission::kQueued);
  }
  EXPECT_EQ(batcher.submit(std::make_shared<CountedJob>(5)), DynamicBatcher::Admission::kTooLarge);
  recorder.release.set_value();
  for (auto& job : jobs) job->done.get_future().wait();
  // In arrival order, each batch as full as the next request allows: 3 | 2 2 | 1 (4 won't fit) |
  // 4 | 1.
  EXPECT_EQ(recorder.batch_rows, (std::vector<int64_t>{1, 3, 4, 1, 4, 1}));
}

TEST(DynamicBatcher, WithoutDynamicBatchingEachRequestRunsAlone) {
  Recorder recorder;
  recorder.hold = true;
  BatchingOptions options;
  options.dynamic = false;
  options.max_batch_size = 4;
  DynamicBatcher batcher("m", options, recorder.run());
  std::vector<std::shared_ptr<CountedJob>> jobs;
  for (const int64_t rows : {1, 1, 6, 1}) {  // a request larger than max_batch_size still runs
    jobs.push_back(std::make_shared<CountedJob>(rows));
    ASSERT_EQ(batcher.submit(jobs.back()), DynamicBatcher::Admission::kQueued);
  }
  recorder.release.set_value();
  for (auto& job : jobs) job->done.get_future().wait();
  EXPECT_EQ(recorder.batch_rows, (std::vector<int64_t>{1, 1, 6, 1}));
}

TEST(DynamicBatcher, AFullQueueRefusesAtOnce) {
  Recorder recorder;
  recorder.hold = true;
  BatchingOptions options;
  options.max_batch_size = 1;
  options.max_queue_size = 2;
  ServerMetrics metrics;
  DynamicBatcher batcher("m", options, recorder.run(), &metrics);
  auto running = std::make_shared<CountedJob>();
  batcher.submit(running);
  while (recorder.running == 0) std::this_thread::sleep_for(1ms);
  auto a = std::make_shared<CountedJob>();
  auto b = std::make_shared<CountedJob>();
  EXPECT_EQ(batcher.submit(a), DynamicBatcher::Admission::kQueued);
  EXPECT_EQ(batcher.submit(b), DynamicBatcher::Admission::kQueued);
  EXPECT_EQ(batcher.pending(), 2);
  EXPECT_NE(
      metrics.render().find("nv_inference_pending_request_count{model=\"m\",version=\"1\"} 2"),
      std::string::npos);
  EXPECT_EQ(batcher.submit(std::make_shared<CountedJob>()), DynamicBatcher::Admission::kQueueFull);
  recorder.release.set_value();
  a->done.get_future().wait();
  b->done.get_future().wait();
  EXPECT_EQ(batcher.submit(std::make_shared<CountedJob>()), DynamicBatcher::Admission::kQueued);
}

TEST(DynamicBatcher, ARequestPastItsDeadlineFailsWithoutRunning) {
  Recorder recorder;
  recorder.hold = true;
  BatchingOptions options;
  options.max_batch_size = 1;
  DynamicBatcher batcher("m", options, recorder.run());
  auto running = std::make_shared<CountedJob>();
  batcher.submit(running);
  while (recorder.running == 0) std::this_thread::sleep_for(1ms);
  auto late = std::make_shared<CountedJob>();
  late->deadline = Clock::now() + 20ms;
  auto patient = std::make_shared<CountedJob>();
  batcher.submit(late);
  batcher.submit(patient);
  std::this_thread::sleep_for(60ms);
  recorder.release.set_value();
  late->done.get_future().wait();
  patient->done.get_future().wait();
  ASSERT_TRUE(late->failed.has_value());
  EXPECT_EQ(*late->failed, FailureReason::kTimeout);
  EXPECT_NE(late->error.find("deadline passed"), std::string::npos);
  EXPECT_FALSE(patient->failed.has_value());
  EXPECT_EQ(recorder.batch_rows, (std::vector<int64_t>{1, 1}));  // `late` never ran
}

TEST(DynamicBatcher, StopRunsWhatIsQueuedAndRefusesTheRest) {
  Recorder recorder;
  BatchingOptions options;
  options.max_batch_size = 2;
  options.max_queue_delay_us = 5'000'000;  // would wait long for a full batch
  auto batcher = std::make_unique<DynamicBatcher>("m", options, recorder.run());
  auto job = std::make_shared<CountedJob>();
  batcher->submit(job);
  const auto start = Clock::now();
  batcher->stop();
  EXPECT_LT(Clock::now() - start, 2s) << "stop should not wait out the queue delay";
  EXPECT_EQ(job->done.get_future().wait_for(0s), std::future_status::ready);
  EXPECT_FALSE(job->failed.has_value());
  EXPECT_EQ(batcher->submit(std::make_shared<CountedJob>()), DynamicBatcher::Admission::kStopped);
}

TEST(DynamicBatcher, SeveralInstancesRunBatchesAtOnce) {
  Recorder recorder;
  recorder.hold = true;
  BatchingOptions options;
  options.max_batch_size = 1;
  options.instances = 3;
  DynamicBatcher batcher("m", options, recorder.run());
  std::vector<std::shared_ptr<CountedJob>> jobs;
  for (int i = 0; i < 3; ++i) {
    jobs.push_back(std::make_shared<CountedJob>());
    batcher.submit(jobs.back());
  }
  const auto start = Clock::now();
  while (recorder.running < 3 && Clock::now() - start < 5s) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(recorder.running.load(), 3);
  recorder.release.set_value();
  for (auto& job : jobs) job->done.get_future().wait();
}

// instance_start runs once on each instance's own thread, before it runs any batch (the server
// sets the thread's LibTorch thread count there).
TEST(DynamicBatcher, EachInstanceStartsOnItsOwnThreadBeforeItsBatches) {
  std::mutex mutex;
  std::set<std::thread::id> started;
  std::atomic<int> batches_before_start{0};
  BatchingOptions options;
  options.instances = 3;
  options.instance_start = [&] {
    std::lock_guard<std::mutex> lock(mutex);
    started.insert(std::this_thread::get_id());
  };
  {
    DynamicBatcher batcher("m", options, [&](std::vector<DynamicBatcher::Job>& jobs) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (started.count(std::this_thread::get_id()) == 0) ++batches_before_start;
      }
      for (auto& job : jobs) static_cast<CountedJob&>(*job).done.set_value();
      return BatchTiming{};
    });
    std::vector<std::shared_ptr<CountedJob>> jobs;
    for (int i = 0; i < 6; ++i) {
      jobs.push_back(std::make_shared<CountedJob>());
      batcher.submit(jobs.back());
    }
    for (auto& job : jobs) job->done.get_future().wait();
  }
  EXPECT_EQ(started.size(), 3u);
  EXPECT_EQ(started.count(std::this_thread::get_id()), 0u);
  EXPECT_EQ(batches_before_start.load(), 0);
}

}  // namespace test_dynamic_batcher
}  // namespace attnzoo::serve
