#include "tools/bench/memory_tracking.h"

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#if ATTNZOO_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace attnzoo {
namespace {

// Each block is allocated from the wrapped allocator `kHeader` bytes larger than asked, and its
// size is stored in that header. The pointer handed out is the block's start + kHeader, so it is
// its own DataPtr context (what LibTorch expects of a "simple" CPU pointer) and raw_allocate /
// raw_deallocate keep working: the deleter finds the size without a lookup table or a lock. 64
// bytes keeps c10's alignment (c10::gAlignment, 64 for AVX-512).
constexpr size_t kHeader = 64;
static_assert(kHeader >= sizeof(size_t) && kHeader % alignof(std::max_align_t) == 0);

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
c10::Allocator* g_wrapped = nullptr;  // set once, before the tracker is installed

void add_live(int64_t bytes) {
  const int64_t live = g_live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

void tracked_delete(void* ptr) {
  if (ptr == nullptr) return;
  auto* block = static_cast<char*>(ptr) - kHeader;
  size_t size = 0;
  std::memcpy(&size, block, sizeof(size));
  g_live.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
  g_wrapped->raw_deallocate(block);
}

class TrackingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    // Zero-byte tensors still get a distinct pointer from c10's allocator; keep that behaviour.
    auto* block = static_cast<char*>(g_wrapped->raw_allocate(n + kHeader));
    std::memcpy(block, &n, sizeof(n));
    add_live(static_cast<int64_t>(n));
    void* data = block + kHeader;
    return {data, data, &tracked_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &tracked_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

std::once_flag g_install_once;
bool g_installed = false;

}  // namespace

void install_cpu_memory_tracking() {
  std::call_once(g_install_once, [] {
    g_wrapped = c10::GetCPUAllocator();
    TORCH_CHECK(g_wrapped != nullptr && g_wrapped->raw_deleter() != nullptr,
                "memory tracking: the current CPU allocator does not support raw allocation, so "
                "it cannot be wrapped");
    // Never destroyed: tensors allocated through it may outlive any scope, even main().
    static auto* tracker = new TrackingCpuAllocator();
    // Priority above the default's (0) so that the registration takes; nothing in this binary
    // installs another CPU allocator.
    c10::SetCPUAllocator(tracker, /*priority=*/10);
    TORCH_CHECK(c10::GetCPUAllocator() == tracker,
                "memory tracking: c10 kept its CPU allocator (a higher-priority one is installed)");
    g_installed = true;
  });
}

bool cpu_memory_tracking_installed() { return g_installed; }

CpuMemoryStats cpu_memory_stats() {
  return {g_live.load(std::memory_order_relaxed), g_peak.load(std::memory_order_relaxed)};
}

void reset_cpu_peak_memory() { g_peak.store(g_live.load(std::memory_order_relaxed)); }

int64_t check_cpu_memory_tracking(int64_t bytes) {
  TORCH_CHECK(g_installed, "memory tracking: check before install_cpu_memory_tracking()");
  const auto measure = [](const auto& make) {
    reset_cpu_peak_memory();
    const int64_t start = cpu_memory_stats().live_bytes;
    { const auto t = make(); }
    return cpu_memory_stats().peak_bytes - start;
  };
  const int64_t floats = bytes / 4;
  // An empty tensor, and one made by a kernel (randn writes through its own output allocation).
  const int64_t empty = measure([&] { return torch::empty({floats}, torch::kFloat); });
  const int64_t random = measure([&] { return torch::randn({floats}, torch::kFloat); });
  for (const int64_t seen : {empty, random}) {
    TORCH_CHECK(std::llabs(seen - floats * 4) <= floats * 4 / 100, "memory tracking: a ",
                floats * 4, "-byte tensor raised the tracked peak by ", seen,
                " bytes; LibTorch allocates around the tracker, so peak memory cannot be "
                "measured");
  }
  TORCH_CHECK(cpu_memory_stats().live_bytes <= cpu_memory_stats().peak_bytes,
              "memory tracking: live bytes above the peak");
  return random;
}

bool cuda_memory_stats_available() { return ATTNZOO_WITH_CUDA != 0; }

PeakMemoryScope::PeakMemoryScope(torch::Device device) : device_(device) {
  if (device_.is_cpu()) {
    TORCH_CHECK(g_installed, "memory tracking: install_cpu_memory_tracking() first");
    reset_cpu_peak_memory();
    start_bytes_ = cpu_memory_stats().live_bytes;
    return;
  }
#if ATTNZOO_WITH_CUDA
  TORCH_CHECK(device_.is_cuda(), "memory tracking: unsupported device ", device_);
  namespace cca = c10::cuda::CUDACachingAllocator;
  const auto index = device_.has_index() ? device_.index() : c10::DeviceIndex{0};
  cca::resetPeakStats(index);
  const auto stats = cca::getDeviceStats(index);
  start_bytes_ =
      stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
          .current;
#else
  TORCH_CHECK(false, "memory tracking: this attnzoo was built without CUDA; cannot measure ",
              device_);
#endif
}

int64_t PeakMemoryScope::peak_above_start() const {
  if (device_.is_cpu()) return cpu_memory_stats().peak_bytes - start_bytes_;
#if ATTNZOO_WITH_CUDA
  namespace cca = c10::cuda::CUDACachingAllocator;
  const auto index = device_.has_index() ? device_.index() : c10::DeviceIndex{0};
  const auto stats = cca::getDeviceStats(index);
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
             .peak -
         start_bytes_;
#else
  return 0;
#endif
}

}  // namespace attnzoo
