// attnzoo::kernels::parallel_for: the ranges cover [begin, end) once, in at most one range per
// thread and none shorter than the grain; they run on more than one thread where LibTorch has
// more than one (the point of it: at::parallel_for, compiled into code built without OpenMP, runs
// everything on the calling thread); exceptions reach the caller; a call inside a range, or inside
// one of LibTorch's own parallel regions, runs on the calling thread.
#include <attnzoo/kernels/cpu_parallel.h>
#include "common/test_util.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace test_cpu_parallel {

using attnzoo::kernels::parallel_for;

// LibTorch's thread count for the lifetime of the guard.
class Threads {
 public:
  explicit Threads(int n) : old_(at::get_num_threads()) { at::set_num_threads(n); }
  ~Threads() { at::set_num_threads(old_); }
  Threads(const Threads&) = delete;
  Threads& operator=(const Threads&) = delete;

 private:
  int old_;
};

struct Record {
  std::mutex mutex;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::set<std::thread::id> threads;
  void add(int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mutex);
    ranges.emplace_back(b, e);
    threads.insert(std::this_thread::get_id());
  }
};

void expect_cover(std::vector<std::pair<int64_t, int64_t>> ranges, int64_t begin, int64_t end) {
  std::sort(ranges.begin(), ranges.end());
  ASSERT_FALSE(ranges.empty());
  EXPECT_EQ(ranges.front().first, begin);
  EXPECT_EQ(ranges.back().second, end);
  for (size_t i = 0; i + 1 < ranges.size(); ++i) EXPECT_EQ(ranges[i].second, ranges[i + 1].first);
  for (const auto& [b, e] : ranges) EXPECT_LT(b, e);
}

TEST(CpuParallel, RangesCoverTheWholeRangeOnce) {
  Threads threads(2);
  for (const auto& [begin, end, grain] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {0, 1000, 1}, {5, 6, 1}, {3, 1000, 400}, {0, 7, 0}, {-20, 20, 16}}) {
    Record record;
    parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { record.add(b, e); });
    expect_cover(record.ranges, begin, end);
    EXPECT_LE(static_cast<int64_t>(record.ranges.size()), 2);
    // every range but the last is at least the grain
    std::sort(record.ranges.begin(), record.ranges.end());
    for (size_t i = 0; i + 1 < record.ranges.size(); ++i) {
      EXPECT_GE(record.ranges[i].second - record.ranges[i].first, grain);
    }
  }
  bool called = false;
  parallel_for(4, 4, 1, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(CpuParallel, RunsOnLibTorchsThreads) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core";
  Threads threads(2);
  Record record;
  // Each range waits until both have started (bounded), so that one thread cannot take both.
  std::atomic<int> started{0};
  parallel_for(0, 2, 1, [&](int64_t b, int64_t e) {
    started.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    record.add(b, e);
  });
  EXPECT_EQ(record.ranges.size(), 2u);
  EXPECT_EQ(record.threads.size(), 2u) << "both ranges ran on one thread";
  EXPECT_TRUE(record.threads.count(std::this_thread::get_id()) == 1)
      << "the calling thread takes part, as in LibTorch's own regions";
}

TEST(CpuParallel, OneThreadOrAShortRangeRunsOnTheCaller) {
  {
    Threads threads(1);
    Record record;
    parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) { record.add(b, e); });
    ASSERT_EQ(record.ranges.size(), 1u);
    EXPECT_EQ(*record.threads.begin(), std::this_thread::get_id());
  }
  Threads threads(2);
  Record record;
  parallel_for(0, 10, 10, [&](int64_t b, int64_t e) { record.add(b, e); });
  ASSERT_EQ(record.ranges.size(), 1u);
  EXPECT_EQ(*record.threads.begin(), std::this_thread::get_id());
}

TEST(CpuParallel, NestedCallsRunInsideTheirRange) {
  Threads threads(2);
  std::atomic<int> inner_ranges{0};
  std::atomic<bool> in_region{true};
  parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    if (!at::in_parallel_region()) in_region = false;
    parallel_for(0, 100, 1, [&](int64_t, int64_t) { inner_ranges.fetch_add(1); });
  });
  EXPECT_TRUE(in_region.load()) << "LibTorch ops called in a range would start teams of their own";
  EXPECT_LE(inner_ranges.load(), 2);
  EXPECT_GE(inner_ranges.load(), 1);
  // Inside one of LibTorch's own regions, too.
  std::atomic<int> ranges{0};
  at::parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    parallel_for(0, 100, 1, [&](int64_t, int64_t) { ranges.fetch_add(1); });
  });
  EXPECT_GE(ranges.load(), 1);
  EXPECT_LE(ranges.load(), 2);
}

TEST(CpuParallel, ExceptionsReachTheCaller) {
  Threads threads(2);
  EXPECT_THROW(parallel_for(0, 100, 1,
                            [&](int64_t b, int64_t) {
                              if (b > 0) throw std::runtime_error("range failed");
                            }),
               std::runtime_error);
  EXPECT_THROW(parallel_for(0, 100, 1, [&](int64_t, int64_t) { throw std::out_of_range("x"); }),
               std::out_of_range);
}

}  // namespace test_cpu_parallel
