// Peak memory of one call, as the benchmarks report it.
//
// CPU: LibTorch allocates every CPU tensor through c10's CPU allocator, so wrapping that allocator
// in one that counts live bytes and their high-water mark measures what a call really allocated
// (not a model of it). Memory that bypasses c10 (BLAS packing buffers, oneDNN scratch, thread
// stacks) is not seen; attention's large buffers (scores, probabilities, gradients) are tensors.
//
// CUDA: the caching allocator's own device statistics ("allocated_bytes", all pools), which count
// the bytes handed to tensors, not the bytes the cache holds.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace attnzoo {

struct CpuMemoryStats {
  int64_t live_bytes = 0;  // allocated through the tracking allocator and not yet freed
  int64_t peak_bytes = 0;  // high-water mark of live_bytes since the last reset
};

// Installs the tracking allocator as c10's CPU allocator, wrapping the one installed now. Only
// tensors allocated afterwards are counted. Idempotent; the allocator stays installed for the rest
// of the process (tensors carry its deleter, so it must outlive them all).
void install_cpu_memory_tracking();
bool cpu_memory_tracking_installed();
CpuMemoryStats cpu_memory_stats();
// Sets the peak to the current live bytes, so the next reading is the peak of what follows.
void reset_cpu_peak_memory();

// Allocates tensors of known size and checks that the tracker sees them: throws when the peak
// does not rise by the tensor's size (within 1%), i.e. when LibTorch allocates around the tracker
// and every CPU memory figure would be wrong. Returns the measured rise for a `bytes` tensor.
int64_t check_cpu_memory_tracking(int64_t bytes);

// Peak bytes of a call on `device`, above what was live when it started. Usage:
//   PeakMemoryScope scope(device);  run();  int64_t bytes = scope.peak_above_start();
class PeakMemoryScope {
 public:
  explicit PeakMemoryScope(torch::Device device);
  int64_t peak_above_start() const;

 private:
  torch::Device device_;
  int64_t start_bytes_ = 0;
};

// True when this binary can read CUDA allocator statistics (built with CUDA).
bool cuda_memory_stats_available();

}  // namespace attnzoo
