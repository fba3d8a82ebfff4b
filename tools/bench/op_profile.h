// Where a forward pass spends its time, op by op: the self time of every LibTorch operator the
// calling thread runs (an op's time less that of the ops it calls), gathered through LibTorch's
// RecordFunction callbacks while an OpProfile is alive. An op's self time includes its parallel
// region, the OpenMP fork and join with it; what the thread does outside any op (module code,
// attnzoo's own loops) is the forward's time less the ops' sum.
//
//   bench::OpProfile profile;
//   for (int i = 0; i < 20; ++i) forward();
//   for (const auto& row : profile.rows()) ...  // largest self time first
#pragma once

#include <ATen/record_function.h>

#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo::bench {

struct OpTime {
  std::string op;        // "aten::addmm", "mkldnn::_linear_pointwise", "attnzoo::add_layer_norm"
  int64_t calls = 0;     // over the profile's lifetime
  double self_ms = 0.0;  // summed over those calls
};

class OpProfile {
 public:
  OpProfile();  // records the ops of the constructing thread from here on
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  // Every op seen so far, largest self time first.
  std::vector<OpTime> rows() const;

 private:
  at::CallbackHandle handle_;
};

}  // namespace attnzoo::bench
