#include "tools/bench/op_profile.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

namespace attnzoo::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Open {
  Clock::time_point start;
  double children_ms = 0.0;
};

// One profile per thread at a time; the callbacks are the thread's own (addThreadLocalCallback).
struct ThreadState {
  std::vector<Open> open;  // the ops entered and not yet left, innermost last
  std::map<std::string, OpTime> ops;
  bool active = false;
};

thread_local ThreadState state;

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction&) {
  state.open.push_back({Clock::now(), 0.0});
  return nullptr;
}

void on_leave(const at::RecordFunction& fn, at::ObserverContext*) {
  if (state.open.empty()) return;  // entered before the profile began
  const Open entry = state.open.back();
  state.open.pop_back();
  const double total_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - entry.start).count();
  if (!state.open.empty()) state.open.back().children_ms += total_ms;
  auto& row = state.ops[fn.name()];
  row.op = fn.name();
  row.calls += 1;
  row.self_ms += total_ms - entry.children_ms;
}

}  // namespace

OpProfile::OpProfile() {
  TORCH_CHECK(!state.active, "OpProfile: this thread already has a profile open");
  state = ThreadState{};
  state.active = true;
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_enter, on_leave).scopes({at::RecordScope::FUNCTION}));
}

OpProfile::~OpProfile() {
  at::removeCallback(handle_);
  state.active = false;
}

std::vector<OpTime> OpProfile::rows() const {
  std::vector<OpTime> out;
  for (const auto& [name, row] : state.ops) out.push_back(row);
  std::sort(out.begin(), out.end(),
            [](const OpTime& a, const OpTime& b) { return a.self_ms > b.self_ms; });
  return out;
}

}  // namespace attnzoo::bench
