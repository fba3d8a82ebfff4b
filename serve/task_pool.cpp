#include <attnzoo/serve/task_pool.h>

#include <algorithm>

namespace attnzoo::serve {

TaskPool::TaskPool(int threads, std::function<void()> thread_start) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this, thread_start] {
      if (thread_start) thread_start();
      work();
    });
  }
}

TaskPool::~TaskPool() { stop(); }

bool TaskPool::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return false;
    tasks_.push_back(std::move(task));
  }
  ready_.notify_one();
  return true;
}

void TaskPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

void TaskPool::work() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace attnzoo::serve
