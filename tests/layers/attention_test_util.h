// Helpers shared by the attention tests.
#pragma once

#include "layers/attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

namespace attnzoo::testing {

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// Runs `fn` and returns the message of the c10::Error it throws (without LibTorch's backtrace),
// or fails the test if it throws nothing.
template <typename Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

// q, k, v of one problem, drawn from a standard normal.
struct Qkv {
  torch::Tensor q, k, v;  // [B, H, L, E], [B, H, S, E], [B, H, S, Ev]
};
inline Qkv random_qkv(int64_t b, int64_t h, int64_t l, int64_t s, int64_t e,
                      torch::Dtype dtype = torch::kFloat, int64_t ev = -1) {
  const auto o = torch::TensorOptions().dtype(dtype);
  return {torch::randn({b, h, l, e}, o), torch::randn({b, h, s, e}, o),
          torch::randn({b, h, s, ev > 0 ? ev : e}, o)};
}

inline AttentionResult run_backend(const Qkv& t, const AttentionMask& mask,
                                   const std::string& backend, bool need_weights = false) {
  AttentionProblem p;
  p.query = t.q;
  p.key = t.k;
  p.value = t.v;
  p.mask = mask;
  p.need_weights = need_weights;
  return scaled_dot_product_attention(p, backend);
}

}  // namespace attnzoo::testing
