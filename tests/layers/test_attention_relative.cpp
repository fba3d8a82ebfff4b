// relative_position_attention (the Conformer's relative term computed a strip of queries at a
// time) against the materialised form (relative_position_bias given to the math backend) and an
// index-by-index float64 transcription of Transformer-XL's score: every mask kind, caches
// (fewer queries than keys), both layouts, shared and per-entry positions, strip sizes down to
// one row; gradients of every input; windows; Longformer's global keys; dropout's
// forward/backward agreement; fully masked rows; peak memory; refusals.
#include "layers/attention_test_util.h"
#include "tools/bench/memory_tracking.h"

#include <attnzoo/kernels/ops.h>
#include <attnzoo/layers/attention_relative.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace attnzoo {
namespace test_attention_relative {

using testing::all_mask_cases;
using testing::error_of;
using testing::max_abs_diff;

RelativeAttentionProblem random_problem(int64_t b, int64_t h, int64_t l, int64_t s, int64_t e,
                                        RelativeLayout layout, bool shared_positions,
                                        torch::Dtype dtype = torch::kDouble) {
  const auto o = torch::TensorOptions().dtype(dtype);
  RelativeAttentionProblem p;
  p.query = torch::randn({b, h, l, e}, o);
  p.key = torch::randn({b, h, s, e}, o);
  p.value = torch::randn({b, h, s, e + 1}, o);
  const int64_t rows = layout == RelativeLayout::kShifted ? l + s - 1 : s;
  p.positions = torch::randn({shared_positions ? 1 : b, h, rows, e}, o);
  p.content_bias = torch::randn({h, e}, o);
  p.position_bias = torch::randn({h, e}, o);
  p.layout = layout;
  p.scale = 1.0 / std::sqrt(static_cast<double>(e));
  return p;
}

// The materialised path: the whole [B, H, L, S] bias, then the math backend.
torch::Tensor materialised(const RelativeAttentionProblem& p) {
  AttentionProblem problem;
  problem.query = p.query;
  problem.key = p.key;
  problem.value = p.value;
  problem.scale = p.scale;
  problem.mask = p.mask;
  problem.mask.bias(relative_position_bias(p));
  return scaled_dot_product_attention(problem, "math").output;
}

const char* name_of(RelativeLayout layout) {
  return layout == RelativeLayout::kShifted ? "shifted" : "key_positions";
}

TEST(RelativeAttention, IndexByIndexTransformerXlWithACache) {
  // Query i sits at key position S − L + i; its relative position to key j is S − L + i − j,
  // which row r = L − 1 − i + j encodes (row r is relative position S − 1 − r).
  torch::manual_seed(1);
  const int64_t l = 3, s = 7, e = 4;
  for (const auto layout : {RelativeLayout::kShifted, RelativeLayout::kKeyPositions}) {
    SCOPED_TRACE(name_of(layout));
    auto p = random_problem(1, 1, l, s, e, layout, true);
    p.strip_rows = 2;
    const auto q = p.query[0][0], k = p.key[0][0], v = p.value[0][0], pos = p.positions[0][0];
    const auto u = p.content_bias[0], vb = p.position_bias[0];
    auto expected = torch::empty({l, e + 1}, torch::kDouble);
    for (int64_t i = 0; i < l; ++i) {
      auto scores = torch::empty({s}, torch::kDouble);
      for (int64_t j = 0; j < s; ++j) {
        const int64_t r = layout == RelativeLayout::kShifted ? l - 1 - i + j : j;
        scores[j] = p.scale * ((q[i] + u).dot(k[j]) + (q[i] + vb).dot(pos[r]));
      }
      expected[i] = torch::matmul(torch::softmax(scores, 0), v);
    }
    EXPECT_LE(max_abs_diff(relative_position_attention(p)[0][0], expected), 1e-12);
    EXPECT_LE(max_abs_diff(materialised(p)[0][0], expected), 1e-12);
  }
}

TEST(RelativeAttention, EveryMaskCaseMatchesTheMaterialisedPath) {
  torch::manual_seed(2);
  const int64_t b = 3, h = 2, e = 5;
  for (const auto layout : {RelativeLayout::kShifted, RelativeLayout::kKeyPositions}) {
    for (const auto& [l, s] : {std::pair<int64_t, int64_t>{9, 9}, {4, 11}}) {
      for (const bool shared : {true, false}) {
        for (const auto& [name, mask] : all_mask_cases(b, h, l, s, torch::kDouble)) {
          for (const int64_t rows : {1, 4, 0}) {
            SCOPED_TRACE(std::string(name_of(layout)) + " L=" + std::to_string(l) +
                         " S=" + std::to_string(s) + (shared ? " shared" : " per-entry") + " " +
                         name + " rows=" + std::to_string(rows));
            auto p = random_problem(b, h, l, s, e, layout, shared);
            p.mask = mask;
            p.strip_rows = rows;
            const auto ours = relative_position_attention(p);
            const auto expected = materialised(p);
            ASSERT_FALSE(torch::isnan(ours).any().item<bool>());
            EXPECT_LE(max_abs_diff(ours, expected), 1e-12);
          }
        }
      }
    }
  }
}

TEST(RelativeAttention, GradientsOfEveryInputMatchAutogradThroughTheMaterialisedPath) {
  torch::manual_seed(3);
  const int64_t b = 2, h = 2, e = 4;
  for (const auto layout : {RelativeLayout::kShifted, RelativeLayout::kKeyPositions}) {
    for (const auto& [l, s] : {std::pair<int64_t, int64_t>{7, 7}, {3, 8}}) {
      for (const bool shared : {true, false}) {
        for (const auto& [name, mask] : all_mask_cases(b, h, l, s, torch::kDouble)) {
          SCOPED_TRACE(std::string(name_of(layout)) + " L=" + std::to_string(l) +
                       " S=" + std::to_string(s) + (shared ? " shared " : " per-entry ") + name);
          auto base = random_problem(b, h, l, s, e, layout, shared);
          base.mask = mask;
          base.strip_rows = 3;
          const auto d_out = torch::randn({b, h, l, e + 1}, torch::kDouble);
          std::vector<torch::Tensor> grads[2];
          for (int path = 0; path < 2; ++path) {
            auto p = base;
            std::vector<torch::Tensor> inputs;
            for (auto* t :
                 {&p.query, &p.key, &p.value, &p.positions, &p.content_bias, &p.position_bias}) {
              *t = t->detach().requires_grad_();
              inputs.push_back(*t);
            }
            if (mask.bias().defined()) {
              p.mask.bias(mask.bias().detach().requires_grad_());
              inputs.push_back(p.mask.bias());
            }
            const auto out = path == 0 ? relative_position_attention(p) : materialised(p);
            grads[path] = torch::autograd::grad({out}, inputs, {d_out});
          }
          const char* names[] = {"query", "key", "value", "positions", "u", "v", "bias"};
          for (size_t i = 0; i < grads[0].size(); ++i) {
            EXPECT_LE(max_abs_diff(grads[0][i], grads[1][i]), 1e-10) << names[i];
          }
        }
      }
    }
  }
}

// A window computes only the keys in reach, strip by strip: the same output and gradients as the
// materialised path given the band as a mask, under every mask case, with and without a cache.
TEST(RelativeAttention, WindowEqualsTheBandMaskForwardAndBackward) {
  torch::manual_seed(4);
  const int64_t b = 2, h = 2, e = 4;
  for (const auto layout : {RelativeLayout::kShifted, RelativeLayout::kKeyPositions}) {
    for (const auto& [l, s] : {std::pair<int64_t, int64_t>{13, 13}, {5, 12}}) {
      for (const auto& [left, right] :
           {std::pair<int64_t, int64_t>{2, 2}, {3, 0}, {0, 1}, {-1, 1}, {4, -1}, {20, 20}}) {
        for (const auto& [name, mask] : all_mask_cases(b, h, l, s, torch::kDouble)) {
          for (const int64_t rows : {1, 3, 0}) {
            SCOPED_TRACE(std::string(name_of(layout)) + " L=" + std::to_string(l) +
                         " S=" + std::to_string(s) + " window " + std::to_string(left) + "," +
                         std::to_string(right) + " " + name + " rows=" + std::to_string(rows));
            auto windowed = random_problem(b, h, l, s, e, layout, true);
            windowed.mask = mask;
            windowed.strip_rows = rows;
            windowed.window_left = left;
            windowed.window_right = right;
            auto banded = windowed;
            banded.window_left = banded.window_right = -1;
            const auto band = band_attention_mask(l, s, left, right);
            banded.mask.attn_mask(mask.attn_mask().defined() ? mask.attn_mask().logical_or(band)
                                                             : band);
            const auto d_out = torch::randn({b, h, l, e + 1}, torch::kDouble);
            std::vector<torch::Tensor> outs, grads[2];
            for (int path = 0; path < 2; ++path) {
              auto p = path == 0 ? windowed : banded;
              std::vector<torch::Tensor> inputs;
              for (auto* t :
                   {&p.query, &p.key, &p.value, &p.positions, &p.content_bias, &p.position_bias}) {
                *t = t->detach().requires_grad_();
                inputs.push_back(*t);
              }
              const auto out = path == 0 ? relative_position_attention(p) : materialised(p);
              outs.push_back(out.detach());
              grads[path] = torch::autograd::grad({out}, inputs, {d_out});
            }
            ASSERT_FALSE(torch::isnan(outs[0]).any().item<bool>());
            EXPECT_LE(max_abs_diff(outs[0], outs[1]), 1e-12);
            {
              torch::NoGradGuard inference;  // the inference path too
              EXPECT_LE(max_abs_diff(relative_position_attention(windowed), outs[1]), 1e-12);
            }
            const char* names[] = {"query", "key", "value", "positions", "u", "v"};
            for (size_t i = 0; i < grads[0].size(); ++i) {
              EXPECT_LE(max_abs_diff(grads[0][i], grads[1][i]), 1e-10) << names[i];
            }
          }
        }
      }
    }
  }
}

// Longformer's global keys (NeMo's global_tokens), transcribed index by index in float64: each
// query's window with Transformer-XL's score, then every global key that is not padding with
// the content score of the global projections alone, one softmax over both lists (a global key in
// the window counts twice), the values of the keys themselves.
TEST(RelativeAttention, GlobalKeysIndexByIndex) {
  torch::manual_seed(11);
  const int64_t b = 2, h = 2, l = 11, s = 11, e = 4, left = 2, right = 2;
  const std::vector<int64_t> globals = {0, 4, 8};
  const auto lengths = torch::tensor({11L, 7L});
  for (const bool separate : {false, true}) {
    SCOPED_TRACE(separate ? "separate projections" : "the query's and keys' own");
    auto p = random_problem(b, h, l, s, e, RelativeLayout::kShifted, true);
    p.mask = AttentionMask().key_lengths(lengths);
    p.window_left = left;
    p.window_right = right;
    p.strip_rows = 3;
    p.global_positions = torch::tensor(globals);
    if (separate) {
      p.global_query = torch::randn({b, h, l, e}, torch::kDouble);
      p.global_key = torch::randn({b, h, 3, e}, torch::kDouble);
    }
    auto expected = torch::zeros({b, h, l, e + 1}, torch::kDouble);
    for (int64_t n = 0; n < b; ++n) {
      const int64_t valid = lengths[n].item<int64_t>();
      for (int64_t hh = 0; hh < h; ++hh) {
        const auto q = p.query[n][hh], k = p.key[n][hh], v = p.value[n][hh];
        const auto pos = p.positions[0][hh];
        const auto u = p.content_bias[hh], vb = p.position_bias[hh];
        for (int64_t i = 0; i < l; ++i) {
          std::vector<torch::Tensor> scores, values;
          for (int64_t j = std::max<int64_t>(i - left, 0); j <= std::min(i + right, s - 1); ++j) {
            if (j >= valid) continue;
            scores.push_back(p.scale *
                             ((q[i] + u).dot(k[j]) + (q[i] + vb).dot(pos[l - 1 - i + j])));
            values.push_back(v[j]);
          }
          for (size_t g = 0; g < globals.size(); ++g) {
            const int64_t j = globals[g];
            if (j >= valid) continue;
            const auto gq = separate ? p.global_query[n][hh][i] : q[i];
            const auto gk = separate ? p.global_key[n][hh][g] : k[j];
            scores.push_back(p.scale * gq.dot(gk));
            values.push_back(v[j]);
          }
          if (scores.empty()) continue;
          expected[n][hh][i] =
              torch::matmul(torch::softmax(torch::stack(scores), 0), torch::stack(values));
        }
      }
    }
    EXPECT_LE(max_abs_diff(relative_position_attention(p), expected), 1e-12);
    EXPECT_LE(max_abs_diff(torch::matmul(relative_position_probabilities(p), p.value), expected),
              1e-12);
  }
}

// The strips with global keys against the materialised probabilities: outputs and the gradients
// of every input (the global projections included), under every mask case, with and without a
// window, strips down to one row.
TEST(RelativeAttention, GlobalKeysMatchTheMaterialisedProbabilitiesForwardAndBackward) {
  torch::manual_seed(12);
  const int64_t b = 2, h = 2, l = 10, s = 10, e = 4;
  for (const auto& [left, right] : {std::pair<int64_t, int64_t>{2, 2}, {1, 3}, {-1, -1}}) {
    for (const bool separate : {false, true}) {
      for (const auto& [name, mask] : all_mask_cases(b, h, l, s, torch::kDouble)) {
        for (const int64_t rows : {1, 4, 0}) {
          SCOPED_TRACE("window " + std::to_string(left) + "," + std::to_string(right) +
                       (separate ? " separate " : " shared ") + name +
                       " rows=" + std::to_string(rows));
          auto base = random_problem(b, h, l, s, e, RelativeLayout::kShifted, true);
          base.mask = mask;
          base.strip_rows = rows;
          base.window_left = left;
          base.window_right = right;
          base.global_positions = torch::tensor({1L, 5L, 9L});
          if (separate) {
            base.global_query = torch::randn({b, h, l, e}, torch::kDouble);
            base.global_key = torch::randn({b, h, 3, e}, torch::kDouble);
          }
          const auto d_out = torch::randn({b, h, l, e + 1}, torch::kDouble);
          std::vector<torch::Tensor> outs, grads[2];
          for (int path = 0; path < 2; ++path) {
            auto p = base;
            std::vector<torch::Tensor> inputs;
            for (auto* t : {&p.query, &p.key, &p.value, &p.positions, &p.content_bias,
                            &p.position_bias, &p.global_query, &p.global_key}) {
              if (!t->defined()) continue;
              *t = t->detach().requires_grad_();
              inputs.push_back(*t);
            }
            const auto out = path == 0 ? relative_position_attention(p)
                                       : torch::matmul(relative_position_probabilities(p), p.value);
            outs.push_back(out.detach());
            grads[path] = torch::autograd::grad({out}, inputs, {d_out});
          }
          ASSERT_FALSE(torch::isnan(outs[0]).any().item<bool>());
          EXPECT_LE(max_abs_diff(outs[0], outs[1]), 1e-12);
          {
            torch::NoGradGuard inference;
            EXPECT_LE(max_abs_diff(relative_position_attention(base), outs[1]), 1e-12);
          }
          const char* names[] = {"query", "key", "value",        "positions",
                                 "u",     "v",   "global_query", "global_key"};
          for (size_t i = 0; i < grads[0].size(); ++i) {
            ASSERT_FALSE(torch::isnan(grads[1][i]).any().item<bool>()) << names[i];
            EXPECT_LE(max_abs_diff(grads[0][i], grads[1][i]), 1e-10) << names[i];
          }
        }
      }
    }
  }
}

// Without global keys the probabilities are the materialised path's.
TEST(RelativeAttention, ProbabilitiesWithoutGlobalKeysAreTheMaterialisedPaths) {
  torch::manual_seed(13);
  for (const auto& [name, mask] : all_mask_cases(2, 2, 6, 9, torch::kDouble)) {
    SCOPED_TRACE(name);
    auto p = random_problem(2, 2, 6, 9, 3, RelativeLayout::kShifted, false);
    p.mask = mask;
    p.window_left = 2;
    p.window_right = 1;
    auto banded = p;
    banded.window_left = banded.window_right = -1;
    const auto band = band_attention_mask(6, 9, 2, 1);
    banded.mask.attn_mask(mask.attn_mask().defined() ? mask.attn_mask().logical_or(band) : band);
    EXPECT_LE(max_abs_diff(torch::matmul(relative_position_probabilities(p), p.value),
                           materialised(banded)),
              1e-12);
  }
}

TEST(RelativeAttention, DropoutRedrawsTheSameMasksInTheBackward) {
  // With the default generator reseeded before each call, the output is a fixed function of the
  // inputs; its analytic gradient must match central differences of that function.
  for (const bool globals : {false, true}) {
    SCOPED_TRACE(globals ? "with global keys" : "without global keys");
    torch::manual_seed(4);
    auto p = random_problem(1, 2, 5, 6, 3, RelativeLayout::kShifted, true);
    p.dropout_p = 0.3;
    p.strip_rows = 2;
    if (globals) {
      p.window_left = p.window_right = 1;
      p.global_positions = torch::tensor({0L, 3L});
    }
    const auto d_out = torch::randn({1, 2, 5, 4}, torch::kDouble);
    auto loss = [&](const RelativeAttentionProblem& problem) {
      torch::manual_seed(77);
      return (relative_position_attention(problem) * d_out).sum();
    };
    auto without = p;
    without.dropout_p = 0.0;
    EXPECT_GT(max_abs_diff(loss(p), loss(without)), 1e-3) << "dropout dropped nothing";
    EXPECT_EQ(loss(p).item<double>(), loss(p).item<double>());

    auto with_grad = p;
    with_grad.query = p.query.detach().requires_grad_();
    with_grad.positions = p.positions.detach().requires_grad_();
    const auto grads =
        torch::autograd::grad({loss(with_grad)}, {with_grad.query, with_grad.positions});
    const double step = 1e-6;
    for (const auto& [which, where] : std::vector<std::pair<int, std::vector<int64_t>>>{
             {0, {0, 1, 2, 1}}, {0, {0, 0, 4, 0}}, {1, {0, 1, 3, 2}}, {1, {0, 0, 7, 1}}}) {
      auto plus = p, minus = p;
      auto& tp = which == 0 ? plus.query : plus.positions;
      auto& tm = which == 0 ? minus.query : minus.positions;
      tp = tp.clone();
      tm = tm.clone();
      const auto index = where;  // a copy: C++17 lambdas cannot capture structured bindings
      const auto at = [&](torch::Tensor& t) { return t[index[0]][index[1]][index[2]][index[3]]; };
      at(tp).add_(step);
      at(tm).sub_(step);
      const double numeric = (loss(plus) - loss(minus)).item<double>() / (2 * step);
      const auto analytic = grads[which][index[0]][index[1]][index[2]][index[3]].item<double>();
      EXPECT_NEAR(analytic, numeric, 1e-6) << (which == 0 ? "query" : "positions");
    }
  }
}

TEST(RelativeAttention, InferenceAndTrainingPathsAgreeAndFloat32IsClose) {
  torch::manual_seed(5);
  auto p = random_problem(2, 4, 40, 40, 16, RelativeLayout::kShifted, true, torch::kFloat);
  p.mask = AttentionMask().key_lengths(torch::tensor({40, 23}));
  const auto inference = relative_position_attention(p);
  auto q = p;
  q.query = p.query.detach().requires_grad_();
  const auto training = relative_position_attention(q);
  // The two paths sum in different orders, and the vectorised reductions differ between CPUs
  // (AVX2, AVX-512): a few float32 ulps of the largest output apart (1.19e-6 on an AVX2 EPYC).
  const double ulp = std::numeric_limits<float>::epsilon() * inference.abs().max().item<double>();
  EXPECT_LE(max_abs_diff(inference, training), 16 * ulp)
      << "max |output| " << ulp / std::numeric_limits<float>::epsilon();
  auto d = p;
  for (auto* t : {&d.query, &d.key, &d.value, &d.positions, &d.content_bias, &d.position_bias}) {
    *t = t->to(torch::kDouble);
  }
  EXPECT_LE(max_abs_diff(inference.to(torch::kDouble), materialised(d)), 1e-5);
}

// Inference in float32 and bfloat16 with key lengths takes the CPU kernel
// (flash_attention_relative_cpu); float64 and an explicit strip size take the strips. Both against
// the materialised float64 path; the kernel within its dtype's rounding, and not the strips' bits.
TEST(RelativeAttention, InferenceInFloat32AndBfloat16TakesTheCpuKernel) {
  if (kernels::flash_attention_cpu_vector_width() == 0) GTEST_SKIP() << "no AVX2 + FMA";
  torch::manual_seed(8);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto p = random_problem(2, 4, 50, 50, 16, RelativeLayout::kShifted, true, dtype);
    p.value = p.value.narrow(3, 0, 16).contiguous();
    p.mask = AttentionMask().key_lengths(torch::tensor({50, 31}));
    auto d = p;
    for (auto* t : {&d.query, &d.key, &d.value, &d.positions, &d.content_bias, &d.position_bias}) {
      *t = t->to(torch::kDouble);
    }
    const auto expected = materialised(d);
    const auto kernel = relative_position_attention(p);
    auto forced = p;
    forced.strip_rows = 16;
    const auto strips = relative_position_attention(forced);
    ASSERT_EQ(kernel.sizes(), expected.sizes());
    ASSERT_EQ(kernel.scalar_type(), dtype);
    const double largest = expected.abs().max().item<double>();
    const double bound = dtype == torch::kFloat ? 1e-5 : 4 * 0.0078125 * largest;
    EXPECT_LE(max_abs_diff(kernel.to(torch::kDouble), expected), bound);
    EXPECT_LE(max_abs_diff(strips.to(torch::kDouble), expected), bound);
    EXPECT_FALSE(torch::equal(kernel, strips));
  }
}

TEST(RelativeAttention, FullyMaskedRowsAreZeroAndNanInputsStayVisible) {
  torch::manual_seed(6);
  auto p = random_problem(2, 1, 4, 4, 3, RelativeLayout::kShifted, true);
  p.mask = AttentionMask().key_lengths(torch::tensor({4, 0}));
  const auto out = relative_position_attention(p);
  EXPECT_EQ(out[1].abs().max().item<double>(), 0.0);
  EXPECT_GT(out[0].abs().max().item<double>(), 0.0);
  // A NaN in the input is not a masked row: it must not turn into zeros.
  p.query[0][0][2][1] = NAN;
  EXPECT_TRUE(torch::isnan(relative_position_attention(p)[0][0][2]).all().item<bool>());
}

int64_t peak_bytes(const RelativeAttentionProblem& base, bool backward) {
  auto p = base;
  p.query = p.query.detach().requires_grad_(backward);
  p.positions = p.positions.detach().requires_grad_(backward);
  install_cpu_memory_tracking();
  PeakMemoryScope scope(torch::kCPU);
  {
    const auto out = relative_position_attention(p);
    if (backward) out.sum().backward();
  }
  return scope.peak_above_start();
}

TEST(RelativeAttention, PeakMemoryIsLinearInTheLength) {
  // Doubling T doubles the peak (strips of a fixed budget), where the materialised path's
  // [T, 2T − 1] position scores alone would quadruple it. At T = 4096, 2 heads, the float32
  // position scores alone are 256 MiB.
  torch::manual_seed(7);
  std::vector<int64_t> peaks;
  for (const int64_t t : {2048, 4096}) {
    auto p = random_problem(1, 2, t, t, 16, RelativeLayout::kShifted, true, torch::kFloat);
    p.mask = AttentionMask().key_lengths(torch::tensor({t - 10}));
    for (const bool backward : {false, true}) {
      const auto peak = peak_bytes(p, backward);
      RecordProperty("peak_bytes_T" + std::to_string(t) + (backward ? "_backward" : "_forward"),
                     std::to_string(peak));
      const int64_t position_scores = 2 * t * (2 * t - 1) * 4;
      if (t == 4096) {
        EXPECT_LE(peak, position_scores / 16) << "T = " << t;
      }
      if (backward) peaks.push_back(peak);
    }
  }
  EXPECT_LE(static_cast<double>(peaks[1]) / static_cast<double>(peaks[0]), 2.6)
      << peaks[0] << " then " << peaks[1];
}

TEST(RelativeAttention, AWindowKeepsThePeakLinear) {
  // With a window of 64 on each side a strip holds its keys in reach, not all T: doubling T at
  // most doubles the peak (plus the strips' fixed part), and T = 8192 stays far below what one
  // strip of the unwindowed path holds over all keys.
  torch::manual_seed(8);
  std::vector<int64_t> peaks;
  for (const int64_t t : {4096, 8192}) {
    auto p = random_problem(1, 2, t, t, 16, RelativeLayout::kShifted, true, torch::kFloat);
    p.window_left = p.window_right = 64;
    peaks.push_back(peak_bytes(p, /*backward=*/true));
  }
  EXPECT_LE(static_cast<double>(peaks[1]) / static_cast<double>(peaks[0]), 2.3)
      << peaks[0] << " then " << peaks[1];
}

TEST(RelativeAttention, RefusalsNameTheArgument) {
  auto p = random_problem(1, 2, 4, 4, 3, RelativeLayout::kShifted, true);
  auto bad = p;
  bad.positions = torch::randn({1, 2, 4, 3}, torch::kDouble);
  EXPECT_NE(error_of([&] { relative_position_attention(bad); }).find("positions must be"),
            std::string::npos);
  bad = p;
  bad.key = torch::randn({1, 2, 3, 3}, torch::kDouble);
  bad.value = torch::randn({1, 2, 3, 4}, torch::kDouble);
  bad.positions = torch::randn({1, 2, 6, 3}, torch::kDouble);
  EXPECT_NE(error_of([&] { relative_position_attention(bad); }).find("at least as many keys"),
            std::string::npos);
  bad = p;
  bad.content_bias = torch::randn({3, 3}, torch::kDouble);
  EXPECT_NE(error_of([&] { relative_position_attention(bad); }).find("content_bias must be"),
            std::string::npos);
  bad = p;
  bad.dropout_p = 1.0;
  EXPECT_NE(error_of([&] { relative_position_attention(bad); }).find("dropout_p"),
            std::string::npos);
  bad = p;
  bad.mask = AttentionMask().key_lengths(torch::tensor({1, 2}));
  EXPECT_FALSE(error_of([&] { relative_position_attention(bad); }).empty());
  bad = p;
  bad.global_positions = torch::tensor({2L, 1L});
  EXPECT_NE(error_of([&] { relative_position_attention(bad); }).find("strictly increasing"),
            std::string::npos);
  bad.global_positions = torch::tensor({1L, 4L});
  EXPECT_NE(error_of([&] { relative_position_attention(bad); }).find("global_positions"),
            std::string::npos);
  bad.global_positions = torch::tensor({1L, 2L});
  bad.global_key = torch::randn({1, 2, 3, 3}, torch::kDouble);
  EXPECT_NE(error_of([&] { relative_position_attention(bad); }).find("global_key must be"),
            std::string::npos);
  bad.global_key = torch::Tensor();
  EXPECT_NE(error_of([&] { relative_position_bias(bad); }).find("relative_position_probabilities"),
            std::string::npos);
  bad = p;
  bad.global_key = torch::randn({1, 2, 2, 3}, torch::kDouble);
  EXPECT_NE(error_of([&] { relative_position_attention(bad); }).find("need global_positions"),
            std::string::npos);
  auto q = p;
  q.query = p.query.detach().requires_grad_();
  const auto out = relative_position_attention(q);
  const auto message = error_of([&] {
    torch::autograd::grad({out.pow(2).sum()}, {q.query}, {}, /*retain_graph=*/true,
                          /*create_graph=*/true);
  });
  EXPECT_NE(message.find("double backward"), std::string::npos) << message;
}

}  // namespace test_attention_relative
}  // namespace attnzoo
