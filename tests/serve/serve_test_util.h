// What the HTTP server's tests share: handlers under test answer from threads of their own, as the
// inference server's batcher does.
#pragma once

#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace attnzoo::testing {

// Runs each reply `delay` after it is posted, on a thread of its own; waits for them all when
// destroyed, or at wait(). A reply holds the connection it answers: wait() before the server
// that owns the connection is destroyed.
class LaterReplies {
 public:
  explicit LaterReplies(std::chrono::milliseconds delay) : delay_(delay) {}
  ~LaterReplies() { wait(); }
  // Joins every reply posted so far: each has run and released what it held.
  void wait() {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }
  LaterReplies(const LaterReplies&) = delete;
  LaterReplies& operator=(const LaterReplies&) = delete;

  template <typename Reply>
  void post(Reply reply) {
    std::lock_guard<std::mutex> lock(mutex_);
    threads_.emplace_back([delay = delay_, reply = std::move(reply)]() mutable {
      std::this_thread::sleep_for(delay);
      reply();
    });
  }

 private:
  std::chrono::milliseconds delay_;
  std::mutex mutex_;
  std::vector<std::thread> threads_;
};

}  // namespace attnzoo::testing
