#include <attnzoo/kernels/cpu_parallel.h>

#include <ATen/Parallel.h>
#include <c10/util/ParallelGuard.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <exception>

#if defined(__SANITIZE_THREAD__)
#define ATTNZOO_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ATTNZOO_TSAN 1
#endif
#endif

namespace attnzoo::kernels {
namespace {

// The entry points of the GNU OpenMP runtime (libgomp) that a `#pragma omp parallel` compiles to
// with GCC, and the two queries of the team inside it.
struct GnuOpenMp {
  void (*parallel)(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) = nullptr;
  int (*thread_num)() = nullptr;
  int (*num_threads)() = nullptr;
  bool usable() const {
    return parallel != nullptr && thread_num != nullptr && num_threads != nullptr;
  }
};

const GnuOpenMp& gnu_openmp() {
  static const GnuOpenMp runtime = [] {
    GnuOpenMp r;
#ifndef ATTNZOO_TSAN
    r.parallel = reinterpret_cast<decltype(r.parallel)>(dlsym(RTLD_DEFAULT, "GOMP_parallel"));
    r.thread_num =
        reinterpret_cast<decltype(r.thread_num)>(dlsym(RTLD_DEFAULT, "omp_get_thread_num"));
    r.num_threads =
        reinterpret_cast<decltype(r.num_threads)>(dlsym(RTLD_DEFAULT, "omp_get_num_threads"));
#endif
    return r;
  }();
  return runtime;
}

// What every thread of the team reads: the range, how to split it, and where an exception goes.
struct Job {
  int64_t begin, end, grain;
  const std::function<void(int64_t, int64_t)>* f;
  const GnuOpenMp* runtime;
  std::atomic_flag failed = ATOMIC_FLAG_INIT;
  std::exception_ptr error;
};

int64_t divide_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Run by each thread of the team: its share of the range, split as at::parallel_for splits it.
void run_share(void* data) {
  auto& job = *static_cast<Job*>(data);
  const int64_t length = job.end - job.begin;
  int64_t threads = job.runtime->num_threads();
  if (job.grain > 0) threads = std::min(threads, divide_up(length, job.grain));
  const int64_t tid = job.runtime->thread_num();
  const int64_t chunk = divide_up(length, threads);
  const int64_t first = job.begin + tid * chunk;
  if (first >= job.end) return;
  try {
    at::internal::ThreadIdGuard id(static_cast<int>(tid));
    c10::ParallelGuard inside(true);  // LibTorch ops called by f run on this thread alone
    (*job.f)(first, std::min(job.end, first + chunk));
  } catch (...) {
    if (!job.failed.test_and_set()) job.error = std::current_exception();
  }
}

}  // namespace

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& f) {
  if (begin >= end) return;
  const auto& runtime = gnu_openmp();
  if (!runtime.usable()) {
#ifdef ATTNZOO_TSAN
    c10::ParallelGuard inside(true);
    f(begin, end);
#else
    at::parallel_for(begin, end, grain, f);
#endif
    return;
  }
  at::internal::lazy_init_num_threads();  // this thread's team size, as LibTorch set it
  const int64_t length = end - begin;
  if (length <= grain || length <= 1 || at::in_parallel_region() || at::get_num_threads() <= 1) {
    at::internal::ThreadIdGuard id(0);
    c10::ParallelGuard inside(true);
    f(begin, end);
    return;
  }
  Job job;
  job.begin = begin;
  job.end = end;
  job.grain = grain;
  job.f = &f;
  job.runtime = &runtime;
  runtime.parallel(run_share, &job, /*num_threads=*/0, /*flags=*/0);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace attnzoo::kernels
