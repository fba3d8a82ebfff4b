// Bad input: every mistake is an exception whose message names the argument, and the expected and
// actual shapes or values.
#include "attention_test_util.h"

#include <gmock/gmock.h>

namespace attnzoo {
namespace test_attention_errors {

using ::testing::AllOf;
using testing::error_of;
using ::testing::HasSubstr;

TEST(AttentionErrors, HeadsThatDoNotDivideTheWidth) {
  EXPECT_THAT(error_of([] { MultiheadAttention(MultiheadAttentionOptions(100, 3)); }),
              AllOf(HasSubstr("embed_dim 100"), HasSubstr("num_heads 3"), HasSubstr("head_dim")));
  // An explicit head_dim lifts the restriction.
  EXPECT_NO_THROW(MultiheadAttention(MultiheadAttentionOptions(100, 3).head_dim(32)));
}

TEST(AttentionErrors, BadOptions) {
  EXPECT_THAT(error_of([] { MultiheadAttention(MultiheadAttentionOptions(0, 1)); }),
              HasSubstr("embed_dim must be > 0, got 0"));
  EXPECT_THAT(error_of([] { MultiheadAttention(MultiheadAttentionOptions(8, -2)); }),
              HasSubstr("num_heads must be > 0, got -2"));
  EXPECT_THAT(
      error_of([] { MultiheadAttention(MultiheadAttentionOptions(8, 2).backend("flashy")); }),
      AllOf(HasSubstr("unknown attention backend 'flashy'"), HasSubstr("math"), HasSubstr("sdpa")));
  EXPECT_THAT(error_of([] { MultiheadAttention(MultiheadAttentionOptions(8, 2).attn_drop(1.0)); }),
              HasSubstr("attn_drop must lie in [0, 1), got 1"));
  EXPECT_THAT(error_of([] { MultiheadAttention(MultiheadAttentionOptions(8, 2).kv_dim(4)); }),
              HasSubstr("kv_dim 4 is set but cross_attention is off"));
}

TEST(AttentionErrors, WrongFeatureSize) {
  MultiheadAttention layer(MultiheadAttentionOptions(64, 4));
  EXPECT_THAT(
      error_of([&] {
        layer(torch::randn({2, 5, 32}));
      }),
      AllOf(HasSubstr("query"), HasSubstr("[B, L, embed_dim = 64]"), HasSubstr("got [2, 5, 32]")));
  EXPECT_THAT(error_of([&] { layer(torch::randn({5, 64})); }), HasSubstr("got [5, 64]"));
}

TEST(AttentionErrors, CrossAttentionMemory) {
  MultiheadAttention layer(MultiheadAttentionOptions(16, 2).cross_attention(true).kv_dim(12));
  EXPECT_THAT(error_of([&] {
                layer->forward_cross(torch::randn({2, 3, 16}), torch::randn({2, 4, 16}));
              }),
              AllOf(HasSubstr("memory"), HasSubstr("kv_dim = 12"), HasSubstr("got [2, 4, 16]")));
  EXPECT_THAT(error_of([&] {
                layer->forward_cross(torch::randn({2, 3, 16}), torch::randn({3, 4, 12}));
              }),
              AllOf(HasSubstr("batch mismatch"), HasSubstr("query has B = 2"),
                    HasSubstr("memory has B = 3")));
  EXPECT_THAT(error_of([&] {
                layer(torch::randn({2, 3, 16}));
              }),
              HasSubstr("cross-attention layer"));
  MultiheadAttention self(MultiheadAttentionOptions(16, 2));
  EXPECT_THAT(error_of([&] {
                self->forward_cross(torch::randn({2, 3, 16}), torch::randn({2, 4, 16}));
              }),
              HasSubstr("self-attention layer"));
}

TEST(AttentionErrors, MasksOfTheWrongShape) {
  MultiheadAttention layer(MultiheadAttentionOptions(16, 2));
  const auto x = torch::randn({2, 7, 16});
  EXPECT_THAT(
      error_of([&] {
        layer(x, AttentionMask().key_padding_mask(torch::zeros({2, 8}, torch::kBool)));
      }),
      AllOf(HasSubstr("key_padding_mask"), HasSubstr("[B, S] = [2, 7]"), HasSubstr("got [2, 8]")));
  EXPECT_THAT(error_of([&] {
                layer(x, AttentionMask().key_padding_mask(torch::zeros({3, 7}, torch::kBool)));
              }),
              AllOf(HasSubstr("key_padding_mask"), HasSubstr("got [3, 7]")));
  EXPECT_THAT(error_of([&] { layer(x, AttentionMask().key_lengths(torch::tensor({7L}))); }),
              AllOf(HasSubstr("key_lengths"), HasSubstr("[B] = [2]"), HasSubstr("got [1]")));
  EXPECT_THAT(error_of([&] {
                layer(x, AttentionMask().key_lengths(torch::tensor({7L, 8L})));
              }),
              AllOf(HasSubstr("key_lengths"), HasSubstr("[0, 7]"), HasSubstr("[7, 8]")));
  EXPECT_THAT(error_of([&] {
                layer(x, AttentionMask().attn_mask(torch::zeros({7, 6}, torch::kBool)));
              }),
              AllOf(HasSubstr("attn_mask"), HasSubstr("[B, H, L, S] = [2, 2, 7, 7]"),
                    HasSubstr("got [7, 6]")));
  EXPECT_THAT(error_of([&] {
                layer(x, AttentionMask().attn_mask(torch::zeros({1, 2, 2, 7, 7}, torch::kBool)));
              }),
              AllOf(HasSubstr("attn_mask"), HasSubstr("got [1, 2, 2, 7, 7]")));
  EXPECT_THAT(error_of([&] {
                layer(x, AttentionMask().bias(torch::zeros({3, 7, 7})));
              }),
              AllOf(HasSubstr("bias"), HasSubstr("got [3, 7, 7]")));
}

TEST(AttentionErrors, MasksOfTheWrongDtype) {
  MultiheadAttention layer(MultiheadAttentionOptions(16, 2));
  const auto x = torch::randn({2, 7, 16});
  EXPECT_THAT(error_of([&] {
                layer(x, AttentionMask().attn_mask(torch::zeros({7, 7})));
              }),
              AllOf(HasSubstr("attn_mask must be bool"), HasSubstr("Float"), HasSubstr("bias")));
  EXPECT_THAT(error_of([&] {
                layer(x, AttentionMask().key_padding_mask(torch::zeros({2, 7}, torch::kLong)));
              }),
              AllOf(HasSubstr("key_padding_mask must be bool"), HasSubstr("Long")));
  EXPECT_THAT(error_of([&] {
                layer(x, AttentionMask().bias(torch::zeros({7, 7}, torch::kBool)));
              }),
              AllOf(HasSubstr("bias must be floating point"), HasSubstr("Bool")));
  EXPECT_THAT(error_of([&] { layer(x, AttentionMask().key_lengths(torch::ones({2}))); }),
              AllOf(HasSubstr("key_lengths must be an integer tensor"), HasSubstr("Float")));
}

TEST(AttentionErrors, FunctionalInputs) {
  const auto t = testing::random_qkv(2, 2, 3, 4, 8);
  EXPECT_THAT(error_of([&] {
                testing::run_backend({t.q, t.k.narrow(0, 0, 1), t.v}, {}, "math");
              }),
              AllOf(HasSubstr("batch mismatch"), HasSubstr("key B = 1")));
  EXPECT_THAT(error_of([&] {
                testing::run_backend({t.q, t.k, t.v.to(torch::kDouble)}, {}, "sdpa");
              }),
              HasSubstr("share a dtype"));
  EXPECT_THAT(error_of([&] { testing::run_backend(t, {}, "nope"); }),
              AllOf(HasSubstr("unknown backend 'nope'"),
                    HasSubstr("auto, flash, sdpa, chunked, math, block_local, linear")));
  EXPECT_THAT(error_of([&] { testing::run_backend(t, {}, "sdpa", /*need_weights=*/true); }),
              AllOf(HasSubstr("backend 'sdpa' cannot run"), HasSubstr("need_weights")));
}

}  // namespace test_attention_errors
}  // namespace attnzoo
