// `attnzoo bench memcheck`, the check of the benchmarks' peak-memory tracker
// (tools/bench/memory_tracking.h).
#pragma once

#include <cstdint>

namespace attnzoo::cli {

// `attnzoo bench memcheck`: checks that the peak-memory tracker sees LibTorch's CPU allocations
// (a tensor of `megabytes` MiB must raise the tracked peak by its size); returns the exit status.
int run_memory_tracking_check(int64_t megabytes);

}  // namespace attnzoo::cli
