// TaskPool: tasks run on its threads, stop() runs what was queued before it returns, and a task
// submitted after stop() is refused (its owner answers instead of losing it).
#include <attnzoo/serve/task_pool.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

namespace attnzoo::serve {
namespace test_task_pool {

TEST(TaskPool, RunsEveryQueuedTaskOnItsThreadsBeforeStopReturns) {
  TaskPool pool(3);
  std::atomic<int> done{0};
  std::mutex mutex;
  std::set<std::thread::id> threads;
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(pool.submit([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
      ++done;
    }));
  }
  pool.stop();
  EXPECT_EQ(done, 60);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
  EXPECT_GE(threads.size(), 2u);
  EXPECT_LE(threads.size(), 3u);
  EXPECT_FALSE(pool.submit([&] { ++done; }));
  pool.stop();  // again: nothing
  EXPECT_EQ(done, 60);
}

TEST(TaskPool, OneThreadRunsTasksInOrder) {
  TaskPool pool(1);
  std::vector<int> order;
  for (int i = 0; i < 20; ++i) pool.submit([&order, i] { order.push_back(i); });
  pool.stop();
  ASSERT_EQ(order.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[i], i);
}

}  // namespace test_task_pool
}  // namespace attnzoo::serve
