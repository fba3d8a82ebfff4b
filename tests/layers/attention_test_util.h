// Helpers shared by the attention tests.
#pragma once

#include "common/test_util.h"

#include <attnzoo/layers/attention.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace attnzoo::testing {

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

// t.q attending to t.k and t.v under `mask`; the rest of the problem (scale, dropout, weights,
// backend options) as AttentionProblem has it.
inline AttentionProblem problem_of(const Qkv& t, const AttentionMask& mask = AttentionMask()) {
  AttentionProblem p;
  p.query = t.q;
  p.key = t.k;
  p.value = t.v;
  p.mask = mask;
  return p;
}

inline AttentionResult run_backend(const Qkv& t, const AttentionMask& mask,
                                   const std::string& backend, bool need_weights = false) {
  auto p = problem_of(t, mask);
  p.need_weights = need_weights;
  return scaled_dot_product_attention(p, backend);
}

// Autograd's gradient of `loss()` w.r.t. `input` (float64) against central differences, on up to
// `samples` elements drawn at random (all of them for small tensors).
inline void expect_gradient_near_central_differences(const std::function<torch::Tensor()>& loss,
                                                     torch::Tensor input, const std::string& name,
                                                     int64_t samples = 48) {
  SCOPED_TRACE("input " + name);
  ASSERT_EQ(input.scalar_type(), torch::kDouble);
  if (input.grad().defined()) input.mutable_grad().zero_();
  loss().backward();
  const auto analytic = input.grad().clone();
  torch::NoGradGuard no_grad;
  auto flat = input.view(-1);
  const int64_t n = flat.numel();
  const auto picks = n <= samples ? torch::arange(n) : torch::randperm(n).narrow(0, 0, samples);
  const double eps = 1e-6;
  for (int64_t i = 0; i < picks.numel(); ++i) {
    const int64_t j = picks[i].item<int64_t>();
    const double saved = flat[j].item<double>();
    flat[j] = saved + eps;
    const double up = loss().item<double>();
    flat[j] = saved - eps;
    const double down = loss().item<double>();
    flat[j] = saved;
    const double numeric = (up - down) / (2 * eps);
    const double exact = analytic.view(-1)[j].item<double>();
    EXPECT_NEAR(exact, numeric, 1e-7 + 1e-5 * std::abs(numeric)) << "element " << j;
  }
}

// Every mask kind alone and combined, with biases of several broadcast shapes, for a problem of
// B × H × L queries and S keys; `dtype` is that of the biases. Some cases leave query rows with no
// key at all. Shared by the backends' tests, so that every backend meets the same cases.
using MaskCases = std::vector<std::pair<std::string, AttentionMask>>;
inline MaskCases all_mask_cases(int64_t b, int64_t h, int64_t l, int64_t s,
                                torch::Dtype dtype = torch::kFloat) {
  const auto f = torch::TensorOptions().dtype(dtype);
  const auto lengths = torch::randint(1, s + 1, {b}, torch::kLong);
  const auto lengths_with_zero = lengths.clone().index_fill_(0, torch::tensor({0L}), 0);
  const auto padding = torch::arange(s).unsqueeze(0) >= lengths.unsqueeze(1);
  const auto attn2d = torch::rand({l, s}) < 0.3;
  auto attn4d = torch::rand({b, h, l, s}) < 0.4;
  attn4d.select(2, l - 1).fill_(true);  // the last query of every head sees nothing
  return {
      {"none", AttentionMask()},
      {"key_lengths", AttentionMask().key_lengths(lengths)},
      {"key_lengths_with_zero", AttentionMask().key_lengths(lengths_with_zero)},
      {"key_padding_mask", AttentionMask().key_padding_mask(padding)},
      {"attn_mask_2d", AttentionMask().attn_mask(attn2d)},
      {"attn_mask_4d_fully_masked_rows", AttentionMask().attn_mask(attn4d)},
      {"attn_mask_b1ls", AttentionMask().attn_mask(attn4d.select(1, 0).unsqueeze(1))},
      {"attn_mask_1h1s", AttentionMask().attn_mask(torch::rand({1, h, 1, s}) < 0.3)},
      {"causal_top_left", AttentionMask().causal()},
      {"causal_bottom_right", AttentionMask().causal(true, CausalAlignment::kBottomRight)},
      {"bias_1hls", AttentionMask().bias(torch::randn({1, h, l, s}, f))},
      {"bias_ls", AttentionMask().bias(torch::randn({l, s}, f))},
      {"bias_bhls", AttentionMask().bias(torch::randn({b, h, l, s}, f))},
      {"bias_b11s", AttentionMask().bias(torch::randn({b, 1, 1, s}, f))},
      {"bias_and_lengths",
       AttentionMask().bias(torch::randn({b, h, l, s}, f)).key_lengths(lengths)},
      {"causal_and_bias", AttentionMask().causal().bias(torch::randn({h, l, s}, f))},
      {"everything_bottom_right", AttentionMask()
                                      .key_lengths(lengths_with_zero)
                                      .key_padding_mask(padding)
                                      .attn_mask(attn2d)
                                      .bias(torch::randn({b, 1, l, s}, f))
                                      .causal(true, CausalAlignment::kBottomRight)},
      {"everything_top_left", AttentionMask()
                                  .key_lengths(lengths)
                                  .key_padding_mask(padding)
                                  .attn_mask(attn4d)
                                  .bias(torch::randn({1, h, l, s}, f))
                                  .causal()},
  };
}

}  // namespace attnzoo::testing
