// The attention decoders' training loss (train/attention_training.h): WeNet's label-smoothed loss
// against LibTorch's own kl_div and cross_entropy in float64, the decoders' teacher-forced inputs
// and targets, and the batch loss against the decoders' own scores of the transcripts
// (AttentionDecoderImpl::score, the scorer of attention rescoring, which tests/api and
// tests/models compare with WeNet's).
#include "common/test_util.h"
#include "trainer_test_util.h"

#include <attnzoo/models/attention_decoder.h>
#include <attnzoo/train/attention_training.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace attnzoo {
namespace test_attention_training {

using testing::error_of;
using ::testing::HasSubstr;

// Random logits [B, L, V] spread widely (so that the loss depends on every entry) and targets
// with -1 beyond a random length of each row.
struct Case {
  torch::Tensor logits, targets;
};

Case random_case(int64_t batch, int64_t length, int64_t vocab, uint64_t seed) {
  torch::manual_seed(static_cast<int64_t>(seed));
  Case c;
  c.logits = torch::randn({batch, length, vocab}) * 4.0;
  c.targets = torch::randint(0, vocab, {batch, length}, torch::kLong);
  const auto lengths = torch::randint(0, length + 1, {batch}, torch::kLong);
  for (int64_t b = 0; b < batch; ++b) {
    c.targets[b]
        .narrow(0, lengths[b].item<int64_t>(), length - lengths[b].item<int64_t>())
        .fill_(-1);
  }
  return c;
}

// LibTorch's KL divergence (kl_div: target · (log target − input), 0 where the target is 0) of
// the smoothed one-hot distribution from log_softmax(logits), in float64, summed over the rows
// with a target and divided by the batch size.
double kl_div_reference(const Case& c, double smoothing) {
  const auto vocab = c.logits.size(2);
  const auto log_probs = torch::log_softmax(c.logits.to(torch::kDouble), -1);
  auto q = torch::full_like(log_probs, smoothing / static_cast<double>(vocab - 1));
  q.scatter_(-1, c.targets.clamp_min(0).unsqueeze(-1), 1.0 - smoothing);
  const auto kl = torch::kl_div(log_probs, q, at::Reduction::None).sum(-1);
  return kl.masked_fill(c.targets.eq(-1), 0.0).sum().item<double>() /
         static_cast<double>(c.logits.size(0));
}

TEST(LabelSmoothingLoss, IsLibTorchsKlDivergenceOfTheSmoothedTargets) {
  for (const double smoothing : {0.1, 0.3}) {
    const auto c = random_case(4, 7, 11, 3);
    const double ours = label_smoothing_loss(c.logits, c.targets, smoothing).item<double>();
    const double theirs = kl_div_reference(c, smoothing);
    EXPECT_NEAR(ours, theirs, 1e-5 * std::abs(theirs)) << "smoothing " << smoothing;
    // Smoothing moves the loss: the test would see a constant or a dropped term.
    EXPECT_GT(std::abs(theirs - kl_div_reference(c, 0.0)), 0.1);
  }
}

TEST(LabelSmoothingLoss, WithoutSmoothingIsTheSummedCrossEntropyOverTheBatch) {
  const auto c = random_case(3, 5, 9, 4);
  const double ours = label_smoothing_loss(c.logits, c.targets, 0.0).item<double>();
  namespace F = torch::nn::functional;
  const double theirs =
      F::cross_entropy(c.logits.to(torch::kDouble).reshape({-1, 9}), c.targets.reshape({-1}),
                       F::CrossEntropyFuncOptions().ignore_index(-1).reduction(torch::kSum))
          .item<double>() /
      3.0;
  EXPECT_NEAR(ours, theirs, 1e-5 * std::abs(theirs));
}

TEST(LabelSmoothingLoss, BadArgumentsAreNamed) {
  const auto c = random_case(2, 3, 5, 5);
  EXPECT_THAT(error_of<c10::ValueError>([&] { label_smoothing_loss(c.logits, c.targets, 1.0); }),
              HasSubstr("smoothing must be in [0, 1), got 1"));
  EXPECT_THAT(error_of<c10::ValueError>(
                  [&] { label_smoothing_loss(c.logits, torch::full_like(c.targets, 5), 0.1); }),
              HasSubstr("targets must be in [-1, 5)"));
  EXPECT_THAT(error_of<c10::ValueError>(
                  [&] { label_smoothing_loss(c.logits, c.targets.narrow(1, 0, 2), 0.1); }),
              HasSubstr("targets must be int64 [B = 2, L = 3]"));
}

TEST(TeacherForcing, SosBeforeTheTokensEosAfterThemPaddingIgnored) {
  const std::vector<std::vector<int64_t>> sequences = {{3, 1, 2}, {}, {4}};
  const auto f = teacher_forcing(sequences, 9, false);
  EXPECT_TRUE(torch::equal(
      f.inputs, torch::tensor({9, 3, 1, 2, 9, 9, 9, 9, 9, 4, 9, 9}, torch::kLong).view({3, 4})));
  EXPECT_TRUE(torch::equal(
      f.targets,
      torch::tensor({3, 1, 2, 9, 9, -1, -1, -1, 4, 9, -1, -1}, torch::kLong).view({3, 4})));
  EXPECT_EQ(testing::values(f.lengths), (std::vector<int64_t>{4, 1, 2}));
  const auto r = teacher_forcing(sequences, 9, true);
  EXPECT_TRUE(torch::equal(r.inputs.narrow(0, 0, 1), torch::tensor({{9, 2, 1, 3}}, torch::kLong)));
  EXPECT_TRUE(torch::equal(r.targets.narrow(0, 0, 1), torch::tensor({{2, 1, 3, 9}}, torch::kLong)));
}

// A bitransformer decoder with random weights, its output layers scaled so that the tokens'
// probabilities differ widely, in eval mode (no dropout).
AttentionDecoder scaled_decoder(int64_t vocab, int64_t dim) {
  torch::manual_seed(7);
  AttentionDecoder decoder(
      AttentionDecoderOptions(vocab, dim).num_heads(2).ffn_dim(32).num_blocks(2).right_blocks(1));
  torch::NoGradGuard no_grad;
  decoder->left->output_layer->weight.mul_(20.0);
  decoder->right->output_layer->weight.mul_(20.0);
  decoder->eval();
  return decoder;
}

// Without smoothing, the batch loss is −Σ_b ((1 − r)·left_b + r·right_b) / B, where left_b and
// right_b are the decoders' log-probabilities of transcript b and <eos> as attention rescoring
// scores them, over utterance b's valid frames alone: the padded frames and tokens of the batch
// change nothing.
TEST(AttentionBatchLoss, IsMinusTheDecodersScoresOfTheTranscripts) {
  const int64_t vocab = 8, dim = 16;
  auto decoder = scaled_decoder(vocab, dim);
  const auto encoded = torch::randn({3, 12, dim});
  const auto lengths = torch::tensor({12, 7, 9}, torch::kLong);
  const std::vector<std::vector<int64_t>> transcripts = {{1, 2, 3, 2}, {5}, {}};
  auto targets = torch::full({3, 4}, 6, torch::kLong);  // padding: any token
  for (size_t b = 0; b < transcripts.size(); ++b) {
    for (size_t j = 0; j < transcripts[b].size(); ++j) {
      targets[static_cast<int64_t>(b)][static_cast<int64_t>(j)] = transcripts[b][j];
    }
  }
  const auto target_lengths = torch::tensor({4, 1, 0}, torch::kLong);
  for (const double r : {0.0, 0.3}) {
    double expected = 0.0;
    for (int64_t b = 0; b < 3; ++b) {
      const auto memory = encoded[b].narrow(0, 0, lengths[b].item<int64_t>());
      const auto scores = decoder->score(memory, {transcripts[static_cast<size_t>(b)]}, r);
      expected -= (1.0 - r) * scores.left[0] + (r > 0.0 ? r * scores.right[0] : 0.0);
    }
    expected /= 3.0;
    const double loss = attention_batch_loss(*decoder, encoded, lengths, targets, target_lengths,
                                             {/*label_smoothing=*/0.0, r})
                            .item<double>();
    EXPECT_NEAR(loss, expected, 1e-4 * std::abs(expected)) << "reverse_weight " << r;
  }
  // The right decoder counts: its weight moves the loss.
  const auto left_only =
      attention_batch_loss(*decoder, encoded, lengths, targets, target_lengths, {0.0, 0.0});
  const auto both =
      attention_batch_loss(*decoder, encoded, lengths, targets, target_lengths, {0.0, 0.5});
  EXPECT_GT(std::abs(left_only.item<double>() - both.item<double>()), 0.1);
}

TEST(AttentionBatchLoss, GradientsReachBothDecodersAndTheEncoderOutput) {
  auto decoder = scaled_decoder(8, 16);
  decoder->train();
  const auto encoded = torch::randn({2, 6, 16}).requires_grad_();
  const auto loss = attention_batch_loss(*decoder, encoded, torch::tensor({6, 4}, torch::kLong),
                                         torch::tensor({{1, 2}, {3, 0}}, torch::kLong),
                                         torch::tensor({2, 1}, torch::kLong), {0.1, 0.3});
  loss.backward();
  ASSERT_TRUE(encoded.grad().defined());
  EXPECT_GT(encoded.grad().abs().sum().item<double>(), 0.0);
  // The padded frames of the second utterance are masked: no gradient flows to them.
  EXPECT_EQ(encoded.grad()[1].narrow(0, 4, 2).abs().sum().item<double>(), 0.0);
  EXPECT_GT(decoder->left->embed->weight.grad().abs().sum().item<double>(), 0.0);
  EXPECT_GT(decoder->right->embed->weight.grad().abs().sum().item<double>(), 0.0);
}

TEST(AttentionBatchLoss, ReverseWeightNeedsARightDecoder) {
  AttentionDecoder one_way(AttentionDecoderOptions(6, 8).num_heads(2).ffn_dim(16).num_blocks(1));
  EXPECT_THAT(error_of<c10::ValueError>([&] {
                attention_batch_loss(*one_way, torch::randn({1, 3, 8}),
                                     torch::tensor({3}, torch::kLong),
                                     torch::tensor({{1}}, torch::kLong),
                                     torch::tensor({1}, torch::kLong), {0.0, 0.3});
              }),
              HasSubstr("needs a right-to-left decoder"));
}

}  // namespace test_attention_training
}  // namespace attnzoo
