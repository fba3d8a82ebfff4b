// retain_freed_heap_memory: a forward's pattern of activations (blocks of 1.2 to 4.8 MB allocated,
// written and freed in an interleaved order, round after round) faults no page in after the first
// round once it is called, where glibc's defaults fault thousands in every round. Each case runs
// in a fresh process (a death test re-executing this binary), so that neither sees the other's
// settings or glibc's thresholds as earlier tests left them.
#include <attnzoo/core/heap_retention.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include <sys/resource.h>

namespace attnzoo {
namespace test_heap_retention {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ATTNZOO_SANITIZED_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ATTNZOO_SANITIZED_MALLOC 1
#endif
#endif

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

char* written(size_t bytes) {
  auto* p = static_cast<char*>(std::malloc(bytes));
  if (p == nullptr) std::abort();
  std::memset(p, 1, bytes);
  // The writes must happen: without this the compiler may drop a block written and freed unread.
  asm volatile("" : : "r"(p) : "memory");
  return p;
}

// Page faults a round of the pattern costs after a first round, averaged over 20.
long faults_per_round() {
  long before = 0;
  for (int round = 0; round < 21; ++round) {
    if (round == 1) before = minor_faults();
    char* input = written(1'200'000);
    char* qkv = written(3'600'000);
    char* hidden = written(4'800'000);
    std::free(input);
    char* output = written(1'200'000);
    std::free(qkv);
    char* next_hidden = written(4'800'000);
    std::free(hidden);
    std::free(next_hidden);
    std::free(output);
  }
  return (minor_faults() - before) / 20;
}

[[noreturn]] void run_pattern(bool retain) {
  if (retain && !retain_freed_heap_memory()) std::_Exit(2);
  std::_Exit(faults_per_round() < 100 ? 0 : 1);
}

TEST(HeapRetention, FreedActivationsComeBackWithoutPageFaults) {
#if !defined(__GLIBC__) || defined(ATTNZOO_SANITIZED_MALLOC)
  GTEST_SKIP() << "malloc is not glibc's here";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The premise: glibc's defaults fault pages in every round (exit 1: 100 or more a round).
  EXPECT_EXIT(run_pattern(false), ::testing::ExitedWithCode(1), "");
  // Retained: none after the first round (exit 0).
  EXPECT_EXIT(run_pattern(true), ::testing::ExitedWithCode(0), "");
#endif
}

}  // namespace test_heap_retention
}  // namespace attnzoo
