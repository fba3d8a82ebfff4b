// A fixed set of threads running tasks in the order they were submitted: the server's work that
// is neither I/O nor a dynamic batch (the chunks of streaming speech). Torch-free.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace attnzoo::serve {

class TaskPool {
 public:
  // `thread_start` (if any) runs first on each thread.
  explicit TaskPool(int threads, std::function<void()> thread_start = {});
  ~TaskPool();  // stop()
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Queues `task`; false (the task dropped) once stop() has begun. A task's exceptions are its
  // own to catch: one that escapes terminates the process, as from any thread.
  bool submit(std::function<void()> task);
  // Refuses new tasks, runs every queued one, joins the threads. Later calls do nothing.
  void stop();

 private:
  void work();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace attnzoo::serve
