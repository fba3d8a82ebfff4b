#include <attnzoo/core/heap_retention.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace attnzoo {

bool retain_freed_heap_memory() {
#if defined(__GLIBC__)
  // Each fixed setting also turns off glibc's own adjustment of both at run time.
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHeapBlockLimit)) == 1 &&
         mallopt(M_TRIM_THRESHOLD, static_cast<int>(kHeapKeepLimit)) == 1;
#else
  return false;
#endif
}

}  // namespace attnzoo
