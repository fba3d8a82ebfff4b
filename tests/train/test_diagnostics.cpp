// Training diagnostics: the attention probabilities an AttentionRecorder collects against float64
// references computed here from the layers' weights (plain and Transformer-XL relative-position
// attention, key padding), the statistics on cases whose values are known (uniform: log n, one-hot:
// 0), padding that changes nothing, recording that changes no output, attention rollout and
// gradient norms against hand computations, and the JSON/text forms.
#include <attnzoo/train/diagnostics.h>
#include "common/test_util.h"

#include <attnzoo/layers/conformer_parts.h>
#include <attnzoo/models/conformer.h>
#include <attnzoo/models/vit.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace attnzoo {
namespace test_diagnostics {
using testing::error_of;
using testing::max_abs_diff;

using ::testing::HasSubstr;

// q and k of a self-attention layer's fused projection, in float64: 2 × [B, H, L, E].
std::pair<torch::Tensor, torch::Tensor> reference_qk(MultiheadAttentionImpl& mha,
                                                     const torch::Tensor& x) {
  const int64_t b = x.size(0), l = x.size(1), h = mha.options.num_heads(), e = mha.head_dim();
  const auto w = mha.qkv->weight.to(torch::kDouble), bias = mha.qkv->bias.to(torch::kDouble);
  const auto qkv = (torch::matmul(x.to(torch::kDouble), w.t()) + bias).view({b, l, 3, h, e});
  return {qkv.select(2, 0).transpose(1, 2), qkv.select(2, 1).transpose(1, 2)};
}

// Softmax over keys of float64 scores [B, H, L, S] with keys j >= lengths[b] excluded.
torch::Tensor masked_softmax(torch::Tensor scores, const torch::Tensor& lengths) {
  const int64_t s = scores.size(3);
  const auto padded = torch::arange(s).view({1, s}) >= lengths.view({-1, 1});  // [B, S]
  scores = scores.masked_fill(padded.view({-1, 1, 1, s}), -std::numeric_limits<double>::infinity());
  return torch::softmax(scores, -1);
}

// A ViT small enough for unit tests; the configured backend is sdpa, not math.
VisionTransformer small_vit() {
  return VisionTransformer(ViTOptions()
                               .img_size(16)
                               .patch_size(4)
                               .embed_dim(16)
                               .depth(3)
                               .num_heads(2)
                               .num_classes(5)
                               .attention_backend("sdpa"));
}

ConformerEncoder small_encoder(double dropout = 0.0) {
  return ConformerEncoder(
      ConformerEncoderOptions(12, ConformerOptions(16, 4, 32, 2, 3).dropout(dropout))
          .subsampling(Subsampling::kConv2d4)
          .position(ConformerPosition::kRelPos)
          .vocab_size(6));
}

TEST(AttentionRecorder, UniformAttentionHasEntropyLogNOverTheValidKeys) {
  torch::manual_seed(0);
  MultiheadAttention mha(MultiheadAttentionOptions(8, 2).backend("sdpa"));
  {
    torch::NoGradGuard no_grad;
    mha->qkv->weight.narrow(0, 0, 16).zero_();  // q and k rows: every score is 0
  }
  const auto x = torch::randn({2, 5, 8});
  const auto lengths = torch::tensor({5, 3}, torch::kLong);
  AttentionRecorder recorder;
  mha(x, AttentionMask().key_lengths(lengths));
  ASSERT_EQ(recorder.records().size(), 1u);
  const auto& r = recorder.records()[0];
  ASSERT_EQ(r.weights.sizes(), (std::vector<int64_t>{2, 2, 5, 5}));
  // Uniform over the valid keys, zero on padded ones.
  EXPECT_LT(max_abs_diff(r.weights[0], torch::full({2, 5, 5}, 0.2)), 1e-7);
  EXPECT_LT(max_abs_diff(r.weights[1].narrow(-1, 0, 3), torch::full({2, 5, 3}, 1.0 / 3)), 1e-7);
  EXPECT_EQ(r.weights[1].narrow(-1, 3, 2).abs().max().item<float>(), 0.0f);
  EXPECT_TRUE(
      torch::equal(r.valid_queries,
                   torch::tensor({1, 1, 1, 1, 1, 1, 1, 1, 0, 0}).view({2, 5}).to(torch::kBool)));

  const auto s = attention_statistics(recorder.records());
  ASSERT_EQ(s.layers(), 1);
  ASSERT_EQ(s.heads(), 2);
  // 5 valid queries seeing 5 keys, 3 seeing 3; the 2 padded queries do not count.
  const double expected = (5 * std::log(5.0) + 3 * std::log(3.0)) / 8;
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_NEAR(s.entropy[0][h].item<double>(), expected, 1e-6);
    EXPECT_NEAR(s.normalized_entropy[0][h].item<double>(), 1.0, 1e-6);
    EXPECT_NEAR(s.min_weight[0][h].item<double>(), 0.2, 1e-7);  // padded keys' zeros excluded
    EXPECT_NEAR(s.max_weight[0][h].item<double>(), 1.0 / 3, 1e-7);
    EXPECT_NEAR(s.mean_max_weight[0][h].item<double>(), (5 * 0.2 + 3 / 3.0) / 8, 1e-7);
  }
}

TEST(AttentionStatistics, OneHotAndKnownDistributions) {
  // Head 0 one-hot, head 1 [1/2, 1/4, 1/4, 0] with the last key masked out.
  auto w = torch::zeros({1, 2, 2, 4}, torch::kDouble);
  w[0][0][0][2] = 1.0;
  w[0][0][1][0] = 1.0;
  for (int64_t i = 0; i < 2; ++i) {
    w[0][1][i][0] = 0.5;
    w[0][1][i][1] = 0.25;
    w[0][1][i][2] = 0.25;
  }
  AttentionRecord r;
  r.weights = w;
  r.allowed = torch::tensor({true, true, true, false}).view({1, 1, 1, 4});
  const auto s = attention_statistics({r});
  EXPECT_NEAR(s.entropy[0][0].item<double>(), 0.0, 1e-12);
  EXPECT_NEAR(s.normalized_entropy[0][0].item<double>(), 0.0, 1e-12);
  EXPECT_EQ(s.max_weight[0][0].item<double>(), 1.0);
  EXPECT_EQ(s.min_weight[0][0].item<double>(), 0.0);
  EXPECT_EQ(s.mean_max_weight[0][0].item<double>(), 1.0);
  EXPECT_NEAR(s.entropy[0][1].item<double>(), 1.5 * std::log(2.0), 1e-12);
  EXPECT_NEAR(s.normalized_entropy[0][1].item<double>(), 1.5 * std::log(2.0) / std::log(3.0),
              1e-12);
  EXPECT_EQ(s.min_weight[0][1].item<double>(), 0.25);  // the masked key's 0 does not count
  EXPECT_EQ(s.mean_max_weight[0][1].item<double>(), 0.5);
}

TEST(AttentionRecorder, ViTProbabilitiesEqualAFloat64ReferenceAndForwardWithWeights) {
  torch::manual_seed(1);
  auto vit = small_vit();
  vit->eval();
  const auto images = torch::randn({2, 3, 16, 16});
  const auto records = record_attention(*vit, images);
  ASSERT_EQ(records.size(), 3u);  // one per block

  ViTIntermediates inter;
  {
    torch::NoGradGuard no_grad;
    vit->forward_features(images, &inter, /*attention_weights=*/true);
  }
  for (size_t l = 0; l < 3; ++l) {
    EXPECT_EQ(records[l].weights.sizes(), (std::vector<int64_t>{2, 2, 17, 17}));
    EXPECT_LT(max_abs_diff(records[l].weights, inter.attention[l]), 1e-6) << "block " << l;
    EXPECT_FALSE(records[l].allowed.defined());
    EXPECT_FALSE(records[l].valid_queries.defined());
  }
  // Block 1 from its input (block 0's output), in float64 from the weights.
  auto& block = *vit->blocks[1]->as<ViTBlockImpl>();
  torch::Tensor normed;
  {
    torch::NoGradGuard no_grad;
    normed = block.norm1(inter.blocks[0]);
  }
  const auto [q, k] = reference_qk(*block.attn, normed);
  const auto reference = torch::softmax(torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0), -1);
  EXPECT_LT(max_abs_diff(records[1].weights, reference), 1e-5);
}

TEST(AttentionRecorder, RelativePositionProbabilitiesAreTheRealOnes) {
  // Transformer-XL scores, written out per (i, j) in float64: ((q_i + u)·k_j + (q_i + v)·W·R_{i−j})
  // / sqrt(E), R_{i−j} being row T − 1 − (i − j) of the 2T − 1 encodings; padded keys excluded.
  torch::manual_seed(2);
  const int64_t b = 2, t = 6, d = 8, h = 2, e = 4;
  ConformerAttention attn(
      ConformerAttentionOptions(d, h).position(ConformerPosition::kRelPos).backend("sdpa"));
  attn->eval();
  const auto x = torch::randn({b, t, d});
  const auto lengths = torch::tensor({6, 4}, torch::kLong);
  AttentionRecorder recorder;
  {
    torch::NoGradGuard no_grad;
    attn(x, AttentionMask().key_lengths(lengths));
  }
  ASSERT_EQ(recorder.records().size(), 1u);
  const auto& recorded = recorder.records()[0].weights;

  const auto [q, k] = reference_qk(*attn->mha, x);  // [B, H, T, E]
  const auto pos = relative_position_encoding(t, d, ConformerPosition::kRelPos)
                       .to(torch::kDouble)[0];  // [2T-1, D]
  const auto p =
      torch::matmul(pos, attn->linear_pos->weight.to(torch::kDouble).t()).view({2 * t - 1, h, e});
  const auto u = attn->pos_bias_u.to(torch::kDouble), v = attn->pos_bias_v.to(torch::kDouble);
  auto scores = torch::zeros({b, h, t, t}, torch::kDouble);
  auto acc = scores.accessor<double, 4>();
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t j = 0; j < t; ++j) {
          const auto qi = q[bi][hi][i];
          const auto content = torch::dot(qi + u[hi], k[bi][hi][j]);
          const auto position = torch::dot(qi + v[hi], p[t - 1 - (i - j)][hi]);
          acc[bi][hi][i][j] = (content + position).item<double>() / std::sqrt(double(e));
        }
      }
    }
  }
  const auto reference = masked_softmax(scores, lengths);
  EXPECT_LT(max_abs_diff(recorded, reference), 1e-5);
  EXPECT_EQ(recorded[1].narrow(-1, 4, 2).abs().max().item<float>(), 0.0f);
  // Without the relative term (plain attention) the probabilities would differ: the reference
  // tests something.
  EXPECT_GT(
      max_abs_diff(masked_softmax(torch::matmul(q, k.transpose(-2, -1)) / 2.0, lengths), reference),
      1e-3);
}

TEST(AttentionRecorder, RecordingChangesNoOutputNorTheRandomStream) {
  // Training mode with dropout: the recorded forward draws the same dropout masks.
  torch::manual_seed(3);
  auto encoder = small_encoder(/*dropout=*/0.2);
  encoder->train();
  const auto features = torch::randn({2, 40, 12});
  const auto lengths = torch::tensor({40, 29}, torch::kLong);
  torch::manual_seed(10);
  const auto plain = std::get<0>(encoder(features, lengths));
  torch::manual_seed(10);
  torch::Tensor with_recorder;
  size_t recorded = 0;
  {
    AttentionRecorder recorder;
    with_recorder = std::get<0>(encoder(features, lengths));
    recorded = recorder.records().size();
  }
  EXPECT_EQ(recorded, 2u);
  EXPECT_TRUE(torch::equal(plain, with_recorder));
  // The gradient flows as without a recorder.
  EXPECT_TRUE(with_recorder.requires_grad());

  auto vit = small_vit();
  vit->eval();
  const auto images = torch::randn({1, 3, 16, 16});
  const auto logits = vit(images);
  AttentionRecorder recorder;
  EXPECT_TRUE(torch::equal(logits, vit(images)));
  EXPECT_EQ(recorder.records().size(), 3u);
}

TEST(AttentionStatistics, PaddedFramesChangeNothing) {
  // An utterance alone and the same utterance padded with garbage frames: equal statistics.
  torch::manual_seed(4);
  Conformer blocks(ConformerOptions(16, 4, 32, 2, 3).position(ConformerPosition::kRelPos));
  const auto x = torch::randn({1, 9, 16});
  const auto padded = torch::cat({x, 100 * torch::randn({1, 5, 16})}, 1);
  const auto alone = attention_statistics(*blocks, x);
  const auto batch = attention_statistics(*blocks, padded, torch::tensor({9}, torch::kLong));
  ASSERT_EQ(alone.layers(), 2);
  ASSERT_EQ(alone.heads(), 4);
  for (const auto& [a, c] : {std::pair{alone.entropy, batch.entropy},
                             std::pair{alone.normalized_entropy, batch.normalized_entropy},
                             std::pair{alone.min_weight, batch.min_weight},
                             std::pair{alone.max_weight, batch.max_weight},
                             std::pair{alone.mean_max_weight, batch.mean_max_weight}}) {
    EXPECT_LT(max_abs_diff(a, c), 1e-5);
  }
  // Entropy lies in [0, log 9] and the normalised one in [0, 1].
  EXPECT_GE(alone.entropy.min().item<double>(), 0.0);
  EXPECT_LE(alone.entropy.max().item<double>(), std::log(9.0) + 1e-9);
  EXPECT_LE(alone.normalized_entropy.max().item<double>(), 1.0 + 1e-9);
}

TEST(AttentionStatistics, EncoderRecordsFollowTheSubsampledLengths) {
  torch::manual_seed(5);
  auto encoder = small_encoder();
  encoder->train();  // record_attention evaluates in eval mode and restores the mode
  const auto features = torch::randn({2, 40, 12});
  const auto lengths = torch::tensor({40, 23}, torch::kLong);
  const auto records = record_attention(*encoder, features, lengths);
  EXPECT_TRUE(encoder->is_training());
  ASSERT_EQ(records.size(), 2u);
  torch::Tensor out_lengths;
  {
    torch::NoGradGuard no_grad;
    encoder->eval();
    out_lengths = std::get<1>(encoder(features, lengths));
  }
  const int64_t t = records[0].weights.size(2), valid = out_lengths[1].item<int64_t>();
  ASSERT_LT(valid, t);
  EXPECT_EQ(records[0].valid_queries[1].sum().item<int64_t>(), valid);
  EXPECT_EQ(records[0].weights[1].narrow(-1, valid, t - valid).abs().max().item<float>(), 0.0f);
  // Each valid query's probabilities sum to 1.
  EXPECT_LT(
      max_abs_diff(records[1].weights[1].narrow(1, 0, valid).sum(-1), torch::ones({4, valid})),
      1e-5);
}

TEST(AttentionStatistics, ApproximatingBackendsHaveNoProbabilities) {
  torch::manual_seed(6);
  MultiheadAttention exact(MultiheadAttentionOptions(8, 2).backend("math"));
  MultiheadAttention approximate(MultiheadAttentionOptions(8, 2).backend("linear"));
  const auto x = torch::randn({1, 4, 8});
  AttentionRecorder recorder;
  exact(x);
  approximate(x);
  const auto s = attention_statistics(recorder.records());
  ASSERT_EQ(s.layers(), 2);
  EXPECT_FALSE(std::isnan(s.entropy[0][0].item<double>()));
  EXPECT_TRUE(std::isnan(s.entropy[1][0].item<double>()));
  const auto j = to_json(s);
  EXPECT_EQ(j["layers"], 2);
  EXPECT_EQ(j["heads"], 2);
  EXPECT_TRUE(j["entropy"][1][0].is_null());
  EXPECT_NEAR(j["entropy"][0][1].get<double>(), s.entropy[0][1].item<double>(), 1e-12);
  const auto text = to_text(s);
  EXPECT_THAT(text, HasSubstr("layer 0 entropy "));
  EXPECT_THAT(text, HasSubstr("layer 1 entropy nan nan"));

  // Only the innermost recorder records.
  AttentionRecorder inner;
  exact(x);
  EXPECT_EQ(inner.records().size(), 1u);
  EXPECT_EQ(recorder.records().size(), 2u);
}

TEST(AttentionRollout, MatchesTheHandComputation) {
  // One layer: mean over heads, plus I, rows renormalised.
  auto w = torch::zeros({1, 2, 2, 2}, torch::kDouble);
  w[0][0] = torch::tensor({{1.0, 0.0}, {0.5, 0.5}}, torch::kDouble);
  w[0][1] = torch::tensor({{0.0, 1.0}, {0.5, 0.5}}, torch::kDouble);
  // mean: [[0.5, 0.5], [0.5, 0.5]]; + I: [[1.5, 0.5], [0.5, 1.5]]; rows / 2.
  const auto a = torch::tensor({{0.75, 0.25}, {0.25, 0.75}}, torch::kDouble);
  EXPECT_LT(max_abs_diff(attention_rollout({w})[0], a), 1e-7);
  // Second layer attends token 1 only: mean [[0, 1], [0, 1]] + I -> [[.5, .5], [0, 1]].
  auto w2 = torch::zeros({1, 1, 2, 2}, torch::kDouble);
  w2[0][0] = torch::tensor({{0.0, 1.0}, {0.0, 1.0}}, torch::kDouble);
  const auto a2 = torch::tensor({{0.5, 0.5}, {0.0, 1.0}}, torch::kDouble);
  const auto rollout = attention_rollout({w, w2});
  EXPECT_EQ(rollout.scalar_type(), torch::kFloat);
  EXPECT_LT(max_abs_diff(rollout[0], torch::matmul(a2, a)), 1e-7);
  EXPECT_LT(max_abs_diff(rollout[0].sum(-1), torch::ones({2})), 1e-6);
  // Tokens that attend only themselves leave the identity.
  EXPECT_LT(max_abs_diff(attention_rollout({torch::eye(3).expand({2, 4, 3, 3})}),
                         torch::eye(3).expand({2, 3, 3})),
            1e-7);
  EXPECT_THAT(error_of<c10::Error>([] { attention_rollout({}); }), HasSubstr("no layers"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                attention_rollout({w, torch::zeros({1, 2, 3, 3})});
              }),
              HasSubstr("layer 1"));
}

TEST(GradientNorms, EqualTheHandComputation) {
  torch::OrderedDict<std::string, torch::Tensor> params;
  auto a = torch::zeros({2, 2}, torch::requires_grad());
  auto b = torch::zeros({3}, torch::requires_grad());
  auto c = torch::zeros({1}, torch::requires_grad());
  a.mutable_grad() = torch::tensor({{3.0f, 4.0f}, {0.0f, 0.0f}});
  b.mutable_grad() = torch::tensor({1.0f, 2.0f, 2.0f});
  params.insert("a", a);
  params.insert("b", b);
  params.insert("c", c);
  const auto norms = gradient_norms(params);
  ASSERT_EQ(norms.parameters.size(), 2u);
  EXPECT_EQ(norms.parameters[0].first, "a");
  EXPECT_DOUBLE_EQ(norms.parameters[0].second, 5.0);
  EXPECT_DOUBLE_EQ(norms.parameters[1].second, 3.0);
  EXPECT_DOUBLE_EQ(norms.total, std::sqrt(34.0));
  EXPECT_EQ(norms.without_gradient, std::vector<std::string>{"c"});
  const auto j = to_json(norms);
  EXPECT_DOUBLE_EQ(j["total"].get<double>(), std::sqrt(34.0));
  EXPECT_DOUBLE_EQ(j["parameters"]["b"].get<double>(), 3.0);
  EXPECT_EQ(j["without_gradient"], nlohmann::json::array({"c"}));
  EXPECT_THAT(to_text(norms, 1), HasSubstr("| a 5"));
  EXPECT_THAT(to_text(norms, 1), HasSubstr("1 no grad"));

  // A model after backward: the total is the norm of all gradients concatenated.
  torch::manual_seed(7);
  auto vit = small_vit();
  vit(torch::randn({2, 3, 16, 16})).square().sum().backward();
  const auto model_norms = gradient_norms(vit->named_parameters());
  std::vector<torch::Tensor> flat;
  for (const auto& p : vit->parameters()) flat.push_back(p.grad().flatten());
  EXPECT_NEAR(model_norms.total, torch::cat(flat).to(torch::kDouble).norm().item<double>(),
              1e-6 * model_norms.total);
  EXPECT_TRUE(model_norms.without_gradient.empty());
  EXPECT_EQ(model_norms.parameters.size(), vit->parameters().size());
  EXPECT_EQ(model_norms.parameters[0].first, vit->named_parameters().begin()->key());
}

}  // namespace test_diagnostics
}  // namespace attnzoo
