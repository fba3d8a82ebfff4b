// Counts the calls of named operators on this thread while alive, through LibTorch's
// RecordFunction callbacks (the dispatcher reports every op call to them), so that a test can
// assert that a path takes a fused op, or makes no copy.
#pragma once

#include <ATen/record_function.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace attnzoo::testing {

class OpCounter {
 public:
  // ops: full schema names, e.g. "attnzoo::add_layer_norm", "aten::copy_".
  explicit OpCounter(const std::vector<std::string>& ops) {
    auto& counts = state();
    counts.clear();
    for (const auto& op : ops) counts[op] = 0;
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback([](const at::RecordFunction& fn)
                                       -> std::unique_ptr<at::ObserverContext> {
          auto& c = state();
          const auto it = c.find(fn.name());
          if (it != c.end()) ++it->second;
          return nullptr;
        }).scopes({at::RecordScope::FUNCTION}));
  }
  ~OpCounter() { at::removeCallback(handle_); }
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;

  // The calls of `op` since construction (0 for a name not asked for).
  int calls(const std::string& op) const {
    const auto& c = state();
    const auto it = c.find(op);
    return it == c.end() ? 0 : it->second;
  }

 private:
  static std::map<std::string, int>& state() {
    thread_local std::map<std::string, int> counts;
    return counts;
  }
  at::CallbackHandle handle_;
};

}  // namespace attnzoo::testing
