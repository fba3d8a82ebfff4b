// Parity of attnzoo::MultiheadAttention with LibTorch's own torch::nn::MultiheadAttention, weights
// copied across, for self- and cross-attention and every mask kind LibTorch supports.
#include "attention_test_util.h"

#include <cmath>

namespace attnzoo {
namespace test_attention_parity {

using testing::max_abs_diff;

constexpr double kTol = 1e-5;

// A torch MHA with random weights (biases included, drawn non-zero) and our layer holding the same
// weights.
std::pair<torch::nn::MultiheadAttention, MultiheadAttention> make_pair(int64_t d, int64_t heads,
                                                                       int64_t kv_dim,
                                                                       const std::string& backend) {
  const bool cross = kv_dim > 0;
  auto mha_options = torch::nn::MultiheadAttentionOptions(d, heads);
  if (cross) mha_options.kdim(kv_dim).vdim(kv_dim);
  torch::nn::MultiheadAttention mha(mha_options);
  auto ours_options = MultiheadAttentionOptions(d, heads).backend(backend);
  if (cross) ours_options.cross_attention(true).kv_dim(kv_dim);
  MultiheadAttention ours(ours_options);
  torch::NoGradGuard no_grad;
  mha->in_proj_bias.normal_();
  mha->out_proj->bias.normal_();
  if (cross && kv_dim != d) {
    ours->q->weight.copy_(mha->q_proj_weight);
    ours->kv->weight.copy_(torch::cat({mha->k_proj_weight, mha->v_proj_weight}, 0));
  } else if (cross) {
    ours->q->weight.copy_(mha->in_proj_weight.narrow(0, 0, d));
    ours->kv->weight.copy_(mha->in_proj_weight.narrow(0, d, 2 * d));
  } else {
    ours->qkv->weight.copy_(mha->in_proj_weight);
  }
  if (cross) {
    ours->q->bias.copy_(mha->in_proj_bias.narrow(0, 0, d));
    ours->kv->bias.copy_(mha->in_proj_bias.narrow(0, d, 2 * d));
  } else {
    ours->qkv->bias.copy_(mha->in_proj_bias);
  }
  ours->proj->weight.copy_(mha->out_proj->weight);
  ours->proj->bias.copy_(mha->out_proj->bias);
  mha->eval();
  ours->eval();
  return {mha, ours};
}

// The masks of one case, for torch's layer and for ours.
//
// LibTorch's C++ MultiheadAttention supports key_padding_mask and a 2-D additive float attn_mask;
// it adds a bool attn_mask as 0/1 instead of excluding keys, and rejects 3-D masks (unlike the
// Python module). So a bool mask is handed to it as the equivalent -inf float mask, and 3-D/4-D
// masks are covered against the explicit float64 loop in test_attention_backends.cpp.
struct MaskCase {
  std::string name;
  torch::Tensor torch_padding;  // [B, S] bool, true = padding
  torch::Tensor torch_mask;     // [L, S] float, additive
  AttentionMask ours;
};

torch::Tensor as_additive(const torch::Tensor& excluded) {
  return torch::zeros(excluded.sizes()).masked_fill(excluded, -INFINITY);
}

std::vector<MaskCase> mask_cases(int64_t b, int64_t l, int64_t s) {
  // Padding and masks that leave every query at least one key (torch gives NaN otherwise).
  auto lengths = torch::randint(1, s + 1, {b}, torch::kLong);
  lengths[0] = s;
  const auto padding = torch::arange(s).unsqueeze(0) >= lengths.unsqueeze(1);
  auto excluded = torch::rand({l, s}) < 0.3;
  excluded.select(1, 0).fill_(false);
  const auto bias = torch::randn({l, s});
  return {
      {"none", {}, {}, AttentionMask()},
      {"key_padding_mask", padding, {}, AttentionMask().key_padding_mask(padding)},
      {"key_lengths", padding, {}, AttentionMask().key_lengths(lengths)},
      {"bool_attn_mask", {}, as_additive(excluded), AttentionMask().attn_mask(excluded)},
      {"float_mask_as_bias", {}, bias, AttentionMask().bias(bias)},
      {"padding_and_bool_mask", padding, as_additive(excluded),
       AttentionMask().key_padding_mask(padding).attn_mask(excluded)},
      {"padding_and_float_mask", padding, bias, AttentionMask().key_lengths(lengths).bias(bias)},
  };
}

void check_parity(int64_t b, int64_t l, int64_t s, int64_t d, int64_t heads, int64_t kv_dim,
                  const std::string& backend) {
  auto [mha, ours] = make_pair(d, heads, kv_dim, backend);
  const bool cross = kv_dim > 0;
  // Ours takes [B, L, D]; torch [L, B, D]. Feeding ours a transposed view also covers
  // non-contiguous inputs.
  const auto query_lbd = torch::randn({l, b, d});
  const auto memory_sbd = cross ? torch::randn({s, b, kv_dim}) : query_lbd;
  for (const auto& c : mask_cases(b, l, s)) {
    SCOPED_TRACE("mask case " + c.name + ", backend " + backend);
    auto [ref_out, ref_weights] =
        mha->forward(query_lbd, memory_sbd, memory_sbd, c.torch_padding,
                     /*need_weights=*/true, c.torch_mask, /*average_attn_weights=*/false);
    const auto& mask = c.ours;
    const auto query = query_lbd.transpose(0, 1);
    const auto memory = cross ? memory_sbd.transpose(0, 1) : torch::Tensor();
    const auto out = cross ? ours->forward_cross(query, memory, mask) : ours(query, mask);
    EXPECT_LE(max_abs_diff(out, ref_out.transpose(0, 1)), kTol);
    const auto with_weights = ours->forward_with_weights(query, memory, mask);
    EXPECT_LE(max_abs_diff(with_weights.output, ref_out.transpose(0, 1)), kTol);
    ASSERT_EQ(with_weights.weights.sizes(), (std::vector<int64_t>{b, heads, l, s}));
    EXPECT_LE(max_abs_diff(with_weights.weights, ref_weights), kTol);
  }
}

class ParityWithTorchMha : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { torch::manual_seed(1234); }
};

TEST_P(ParityWithTorchMha, SelfAttention) { check_parity(3, 9, 9, 64, 4, 0, GetParam()); }

TEST_P(ParityWithTorchMha, SelfAttentionBatchOneSingleQuery) {
  check_parity(1, 1, 1, 32, 2, 0, GetParam());
}

TEST_P(ParityWithTorchMha, CrossAttentionSameWidth) {
  check_parity(2, 5, 11, 48, 4, 48, GetParam());
}

TEST_P(ParityWithTorchMha, CrossAttentionOtherWidth) {
  check_parity(7, 4, 13, 64, 8, 40, GetParam());
}

TEST_P(ParityWithTorchMha, CausalEqualsTriangularMask) {
  auto [mha, ours] = make_pair(32, 4, 0, GetParam());
  const auto x = torch::randn({2, 6, 32});
  const auto above_diagonal = torch::ones({6, 6}, torch::kBool).triu(1);
  auto [ref, unused] = mha->forward(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), {},
                                    false, as_additive(above_diagonal));
  const auto out = ours(x, AttentionMask().causal());
  EXPECT_LE(max_abs_diff(out, ref.transpose(0, 1)), kTol);
}

INSTANTIATE_TEST_SUITE_P(Backends, ParityWithTorchMha, ::testing::Values("math", "sdpa", "auto"));

}  // namespace test_attention_parity
}  // namespace attnzoo
