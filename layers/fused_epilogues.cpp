#include <attnzoo/layers/fused_epilogues.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace attnzoo {
namespace {

std::atomic<bool>& switch_state() {
  static std::atomic<bool> on = [] {
    const char* value = std::getenv("ATTNZOO_FUSED_EPILOGUES");
    return value != nullptr && std::string(value) == "1";
  }();
  return on;
}

}  // namespace

bool fused_epilogues() { return switch_state().load(std::memory_order_relaxed); }

void set_fused_epilogues(bool on) { switch_state().store(on, std::memory_order_relaxed); }

}  // namespace attnzoo
