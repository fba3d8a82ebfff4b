// Conformer against torchaudio (weights from its state_dict, mapped), against its own per-utterance
// output (padding must not leak), and relative-position attention against the paper's equations.
#include <attnzoo/layers/attention.h>
#include <attnzoo/models/checkpoint.h>
#include <attnzoo/models/conformer.h>
#include <attnzoo/models/conformer_checkpoint.h>
#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

namespace attnzoo {
namespace test_conformer {
using testing::error_of;
using testing::max_abs_diff;

using ::testing::AllOf;
using ::testing::HasSubstr;

// The torchaudio fixture's architecture (make_conformer_reference.py).
constexpr int64_t kDim = 24, kHeads = 4, kFfn = 40, kLayers = 2, kKernel = 7;
const std::vector<int64_t> kLengths = {11, 7, 3};

ConformerOptions fixture_options(bool convolution_first, bool group_norm) {
  return ConformerOptions(kDim, kHeads, kFfn, kLayers, kKernel)
      .convolution_first(convolution_first)
      .conv_norm(group_norm ? ConvNormKind::kGroupNorm : ConvNormKind::kBatchNorm);
}

struct Reference {
  io::Safetensors weights;
  io::Safetensors io;
};

Reference reference(bool convolution_first, bool group_norm) {
  const std::string dir = ATTNZOO_MODELS_REFERENCE_DIR;
  const std::string name = dir + "/torchaudio_conformer_cf" +
                           std::to_string(int(convolution_first)) + "_gn" +
                           std::to_string(int(group_norm));
  return {io::load_safetensors(name + ".weights.safetensors"),
          io::load_safetensors(name + ".io.safetensors")};
}

// Utterance b of a padded batch, alone and unpadded: ([1, L, D], [1]).
std::pair<torch::Tensor, torch::Tensor> utterance(const torch::Tensor& x,
                                                  const torch::Tensor& lengths, int64_t b) {
  const int64_t length = lengths[b].item<int64_t>();
  return {x.narrow(0, b, 1).narrow(1, 0, length).contiguous(), lengths.narrow(0, b, 1)};
}

// Largest difference, over the valid frames of every utterance, between the batched output and
// the model run on each utterance alone.
double batched_vs_single(Conformer& model, const torch::Tensor& x, const torch::Tensor& lengths) {
  const auto batched = std::get<0>(model->forward(x, lengths));
  double worst = 0.0;
  for (int64_t b = 0; b < x.size(0); ++b) {
    const auto [one, one_length] = utterance(x, lengths, b);
    const auto single = std::get<0>(model->forward(one, one_length));
    worst =
        std::max(worst, max_abs_diff(batched.narrow(0, b, 1).narrow(1, 0, one.size(1)), single));
  }
  return worst;
}

Conformer load_torchaudio(bool convolution_first, bool group_norm, const Reference& ref) {
  Conformer model(fixture_options(convolution_first, group_norm));
  EXPECT_EQ(detect_conformer_format(ref.weights.tensors), ConformerCheckpointFormat::kTorchaudio);
  const auto mapped =
      to_conformer_layout(ref.weights.tensors, ConformerCheckpointFormat::kTorchaudio);
  load_state_dict(*model, mapped.tensors, {{}, {}, "torchaudio"});
  model->eval();
  return model;
}

class TorchaudioParity : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(TorchaudioParity, MatchesEachUtteranceAloneOnValidFrames) {
  const auto [convolution_first, group_norm] = GetParam();
  const auto ref = reference(convolution_first, group_norm);
  auto model = load_torchaudio(convolution_first, group_norm, ref);
  torch::NoGradGuard no_grad;
  const auto& x = ref.io.tensors["input"];
  const auto& lengths = ref.io.tensors["lengths"];
  const auto [out, out_lengths] = model->forward(x, lengths);
  EXPECT_EQ(out.sizes(), x.sizes());
  EXPECT_TRUE(torch::equal(out_lengths, lengths));
  for (int64_t b = 0; b < x.size(0); ++b) {
    SCOPED_TRACE("utterance " + std::to_string(b));
    const auto& single = ref.io.tensors["single_" + std::to_string(b)];
    const int64_t length = kLengths[b];
    ASSERT_EQ(single.size(1), length);
    EXPECT_LE(max_abs_diff(out.narrow(0, b, 1).narrow(1, 0, length), single), 1e-4);
  }
}

// bfloat16 inference against torchaudio's float32 output per utterance: within 3% of the
// output's scale on the valid frames (measured: 0.5 to 1.2%; one bfloat16 rounding is 0.4%).
TEST_P(TorchaudioParity, Bfloat16MatchesTorchaudioWithinItsRounding) {
  const auto [convolution_first, group_norm] = GetParam();
  const auto ref = reference(convolution_first, group_norm);
  auto model = load_torchaudio(convolution_first, group_norm, ref);
  model->to(torch::kBFloat16);
  torch::NoGradGuard no_grad;
  const auto& x = ref.io.tensors["input"];
  const auto out = std::get<0>(model->forward(x.to(torch::kBFloat16), ref.io.tensors["lengths"]))
                       .to(torch::kFloat);
  for (int64_t b = 0; b < x.size(0); ++b) {
    SCOPED_TRACE("utterance " + std::to_string(b));
    const auto& single = ref.io.tensors["single_" + std::to_string(b)];
    const double scale = single.abs().max().item<double>();
    const double error = max_abs_diff(out.narrow(0, b, 1).narrow(1, 0, kLengths[b]), single);
    EXPECT_LE(error, 0.03 * scale);
    EXPECT_GT(error, 0.0);
  }
}

TEST_P(TorchaudioParity, TorchaudioLeaksPaddingWeDoNot) {
  const auto [convolution_first, group_norm] = GetParam();
  const auto ref = reference(convolution_first, group_norm);
  auto model = load_torchaudio(convolution_first, group_norm, ref);
  torch::NoGradGuard no_grad;
  const auto& x = ref.io.tensors["input"];
  const auto& lengths = ref.io.tensors["lengths"];
  // torchaudio on the padded batch differs from torchaudio on each shorter utterance alone
  // (pytorch/audio#4205): the padding reaches valid frames through the convolution module.
  const auto& theirs = ref.io.tensors["batched"];
  for (int64_t b = 1; b < x.size(0); ++b) {
    const auto& single = ref.io.tensors["single_" + std::to_string(b)];
    EXPECT_GT(max_abs_diff(theirs.narrow(0, b, 1).narrow(1, 0, kLengths[b]), single), 1e-2)
        << "utterance " << b;
  }
  // The longest utterance has no padding: there torchaudio's batch is right, and so are we.
  EXPECT_LE(max_abs_diff(theirs.narrow(0, 0, 1), ref.io.tensors["single_0"]), 1e-5);
  EXPECT_LE(batched_vs_single(model, x, lengths), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Conformer, TorchaudioParity,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "ConvFirst" : "AttnFirst") +
                                  (std::get<1>(info.param) ? "GroupNorm" : "BatchNorm");
                         });

// Random inputs with garbage (large values) in the padding.
std::pair<torch::Tensor, torch::Tensor> padded_batch(int64_t dim, std::vector<int64_t> lengths,
                                                     int64_t extra_frames = 0) {
  const int64_t frames = *std::max_element(lengths.begin(), lengths.end()) + extra_frames;
  auto x = torch::randn({static_cast<int64_t>(lengths.size()), frames, dim});
  const auto length_tensor = torch::tensor(lengths, torch::kLong);
  const auto padding = torch::arange(frames).unsqueeze(0) >= length_tensor.unsqueeze(1);
  x = torch::where(padding.unsqueeze(-1), 100.0 * torch::randn_like(x), x);
  return {x, length_tensor};
}

void perturb(torch::nn::Module& module, double scale = 0.1) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) p.add_(scale * torch::randn_like(p));
}

TEST(Conformer, BatchedEqualsPerUtteranceInTrainingForEveryNormAndPosition) {
  // Training mode (dropout 0): GroupNorm and LayerNorm statistics are per utterance, so each
  // utterance must compute alone what it computes in the batch.
  torch::manual_seed(1);
  for (const auto norm : {ConvNormKind::kGroupNorm, ConvNormKind::kLayerNorm}) {
    for (const auto position :
         {ConformerPosition::kNone, ConformerPosition::kRelPos, ConformerPosition::kRelPosWenet}) {
      SCOPED_TRACE(std::string(to_string(norm)) + " " + to_string(position));
      Conformer model(ConformerOptions(16, 2, 32, 2, 5).conv_norm(norm).position(position));
      perturb(*model);
      model->train();
      const auto [x, lengths] = padded_batch(16, {9, 4, 1, 6});
      EXPECT_LE(batched_vs_single(model, x, lengths), 1e-5);
    }
  }
}

TEST(Conformer, EvalBatchedEqualsPerUtteranceWithRelativePositionsAndCausalConv) {
  torch::manual_seed(2);
  for (const auto position : {ConformerPosition::kRelPos, ConformerPosition::kRelPosWenet}) {
    for (const bool causal : {false, true}) {
      SCOPED_TRACE(std::string(to_string(position)) + (causal ? " causal" : ""));
      Conformer model(
          ConformerOptions(16, 4, 32, 2, 4).position(position).causal_conv(causal));  // even K
      perturb(*model);
      model->eval();
      torch::NoGradGuard no_grad;
      const auto [x, lengths] = padded_batch(16, {8, 5, 2});
      EXPECT_LE(batched_vs_single(model, x, lengths), 1e-5);
    }
  }
}

TEST(Conformer, BatchNormTrainingStatisticsUseValidFramesOnly) {
  torch::manual_seed(3);
  // The masked norm equals torch's BatchNorm1d on the valid frames of all utterances concatenated:
  // output and running statistics.
  ConvNorm ours(ConvNormOptions(6));
  torch::nn::BatchNorm1d theirs(6);
  perturb(*ours);
  {
    torch::NoGradGuard no_grad;
    theirs->weight.copy_(ours->weight);
    theirs->bias.copy_(ours->bias);
  }
  ours->train();
  theirs->train();
  const std::vector<int64_t> lengths = {7, 3, 5};
  auto x = torch::randn({3, 6, 7});
  const auto valid = valid_frames(torch::tensor(lengths), 7);
  x = torch::where(valid.unsqueeze(1), x, 1e3 * torch::ones_like(x));  // loud padding
  const auto y = ours(x, valid);
  std::vector<torch::Tensor> frames;
  for (int64_t b = 0; b < 3; ++b) frames.push_back(x[b].narrow(1, 0, lengths[b]));
  const auto expected = theirs(torch::cat(frames, 1).unsqueeze(0))[0];  // [C, sum L]
  int64_t offset = 0;
  for (int64_t b = 0; b < 3; ++b) {
    EXPECT_LE(max_abs_diff(y[b].narrow(1, 0, lengths[b]), expected.narrow(1, offset, lengths[b])),
              1e-5);
    offset += lengths[b];
  }
  EXPECT_LE(max_abs_diff(ours->running_mean, theirs->running_mean), 1e-6);
  EXPECT_LE(max_abs_diff(ours->running_var, theirs->running_var), 1e-6);
  EXPECT_EQ(ours->num_batches_tracked.item<int64_t>(), 1);

  // The whole model in training: more (and louder) padding changes neither the valid outputs nor
  // the running statistics.
  Conformer model(ConformerOptions(16, 2, 32, 2, 5));
  perturb(*model);
  auto twin = std::dynamic_pointer_cast<ConformerImpl>(model->clone());
  model->train();
  twin->train();
  const auto [tight, tight_lengths] = padded_batch(16, {9, 4, 6});
  auto loose = torch::cat({tight, 100.0 * torch::randn({3, 4, 16})}, 1);
  const auto a = std::get<0>(model->forward(tight, tight_lengths));
  const auto b = std::get<0>(twin->forward(loose, tight_lengths));
  const auto padding = ~valid_frames(tight_lengths, 9).unsqueeze(-1);
  EXPECT_LE(max_abs_diff(a.masked_fill(padding, 0.0), b.narrow(1, 0, 9).masked_fill(padding, 0.0)),
            1e-5);
  const auto running = [](torch::nn::Module& m) {
    std::vector<torch::Tensor> out;
    for (const auto& item : m.named_buffers()) {
      if (item.key().find("running_") != std::string::npos) out.push_back(item.value());
    }
    return torch::cat(out);
  };
  EXPECT_LE(max_abs_diff(running(*model), running(*twin)), 1e-6);
  EXPECT_GT(max_abs_diff(running(*model), torch::zeros_like(running(*model))), 0.0);
}

// The paper's equations in float64, with the encoding R_r of relative position r written out
// (Vaswani et al. 2017 sinusoids) and indexed directly by i − j: no rel_shift, no [L, 2L − 1]
// matrix. For WeNet's variant the encoding index is the key position j.
torch::Tensor paper_attention(ConformerAttentionImpl& attn, const torch::Tensor& x,
                              const std::vector<int64_t>& lengths, bool wenet) {
  const int64_t batch = x.size(0), frames = x.size(1), dim = x.size(2);
  const int64_t heads = attn.options.num_heads(), e = dim / heads;
  const auto& w = attn.mha->qkv->weight;  // [3D, D]: q, k, v rows
  const auto& bqkv = attn.mha->qkv->bias;
  const auto q_all = torch::matmul(x, w.narrow(0, 0, dim).t()) + bqkv.narrow(0, 0, dim);
  const auto k_all = torch::matmul(x, w.narrow(0, dim, dim).t()) + bqkv.narrow(0, dim, dim);
  const auto v_all = torch::matmul(x, w.narrow(0, 2 * dim, dim).t()) + bqkv.narrow(0, 2 * dim, dim);
  const auto encoding = [&](double r) {
    auto out = torch::empty({dim}, torch::kDouble);
    for (int64_t k = 0; k < dim / 2; ++k) {
      const double omega = std::pow(10000.0, -2.0 * k / static_cast<double>(dim));
      out[2 * k] = std::sin(r * omega);
      out[2 * k + 1] = std::cos(r * omega);
    }
    return out;
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(e));
  auto merged = torch::zeros({batch, frames, dim}, torch::kDouble);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const auto u = attn.pos_bias_u[h], v = attn.pos_bias_v[h];
      for (int64_t i = 0; i < frames; ++i) {
        const auto q = q_all[b][i].narrow(0, h * e, e);
        auto scores = torch::full({frames}, -INFINITY, torch::kDouble);
        for (int64_t j = 0; j < lengths[b]; ++j) {
          const auto k = k_all[b][j].narrow(0, h * e, e);
          const auto p =
              torch::matmul(attn.linear_pos->weight, encoding(wenet ? double(j) : double(i - j)))
                  .narrow(0, h * e, e);
          scores[j] = scale * ((q + u).dot(k) + (q + v).dot(p));
        }
        const auto probs = torch::softmax(scores, 0);
        const auto values = v_all[b].narrow(1, h * e, e);  // [T, E]
        merged[b][i].narrow(0, h * e, e).copy_(torch::matmul(probs, values));
      }
    }
  }
  return attn.mha->proj(merged);
}

TEST(ConformerAttention, RelativePositionsMatchThePaperEquationsInFloat64) {
  torch::manual_seed(4);
  for (const auto position : {ConformerPosition::kRelPos, ConformerPosition::kRelPosWenet}) {
    SCOPED_TRACE(to_string(position));
    ConformerAttention attn(ConformerAttentionOptions(12, 3).position(position).backend("math"));
    perturb(*attn, 0.3);
    attn->to(torch::kDouble);
    attn->eval();
    torch::NoGradGuard no_grad;
    const std::vector<int64_t> lengths = {7, 4};
    const auto x = torch::randn({2, 7, 12}, torch::kDouble);
    const auto ours = attn(x, AttentionMask().key_lengths(torch::tensor(lengths)));
    const auto expected =
        paper_attention(*attn, x, lengths, position == ConformerPosition::kRelPosWenet);
    EXPECT_LE(max_abs_diff(ours, expected), 1e-10);
    // The positional term matters: without it the output differs.
    const auto plain = attn->mha(x, AttentionMask().key_lengths(torch::tensor(lengths)));
    EXPECT_GT(max_abs_diff(plain, expected), 1e-3);
  }
}

TEST(ConformerAttention, EncodingsAndShiftLayout) {
  const auto rel = relative_position_encoding(4, 6, ConformerPosition::kRelPos, torch::kDouble);
  ASSERT_EQ(rel.sizes(), (std::vector<int64_t>{1, 7, 6}));
  // Row r is relative position T − 1 − r: row 3 is position 0, i.e. [0, 1, 0, 1, 0, 1].
  EXPECT_LE(max_abs_diff(rel[0][3], torch::tensor({0.0, 1.0, 0.0, 1.0, 0.0, 1.0})), 1e-12);
  EXPECT_NEAR(rel[0][0][0].item<double>(), std::sin(3.0), 1e-12);
  EXPECT_NEAR(rel[0][6][0].item<double>(), std::sin(-3.0), 1e-12);
  const auto wenet =
      relative_position_encoding(4, 6, ConformerPosition::kRelPosWenet, torch::kDouble);
  EXPECT_LE(max_abs_diff(wenet[0], rel[0].narrow(0, 0, 4).flip(0)), 1e-12);
  const auto scores = torch::arange(3 * 5, torch::kDouble).view({1, 1, 3, 5});
  const auto shifted = rel_shift(scores);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      EXPECT_EQ(shifted[0][0][i][j].item<double>(), scores[0][0][i][2 - i + j].item<double>());
    }
  }
}

TEST(Conformer, RelativePositionsGiveTheSameOutputOnEveryBackend) {
  torch::manual_seed(5);
  const auto [x, lengths] = padded_batch(24, {13, 6, 1});
  for (const auto position : {ConformerPosition::kRelPos, ConformerPosition::kRelPosWenet}) {
    SCOPED_TRACE(to_string(position));
    torch::Tensor expected;
    Conformer base(ConformerOptions(24, 4, 32, 2, 5).position(position).attention_backend("math"));
    perturb(*base);
    base->eval();
    const auto weights = state_dict(*base);
    // "auto" on the CPU: the relative term inside the attention, in strips (no whole bias).
    for (const char* backend : {"math", "sdpa", "chunked", "auto"}) {
      Conformer model(ConformerOptions(24, 4, 32, 2, 5)
                          .position(position)
                          .attention_backend(backend)
                          .attention_options(AttentionBackendOptions().chunk_size(4)));
      load_state_dict(*model, weights);
      model->eval();
      torch::NoGradGuard no_grad;
      const auto out = std::get<0>(model->forward(x, lengths));
      if (!expected.defined()) {
        expected = out;
        continue;
      }
      const auto valid = valid_frames(lengths, x.size(1)).unsqueeze(-1);
      EXPECT_LE(max_abs_diff(out.masked_fill(~valid, 0.0), expected.masked_fill(~valid, 0.0)), 1e-5)
          << backend;
    }
  }
}

// Longformer's global tokens (NeMo's rel_pos_local_attn with global_tokens): the CPU's strips
// and the materialised form every other backend takes give the same frames and gradients; a
// padded batch gives what each utterance gives alone (each with the global frames within its
// length); a recorder sees probabilities that sum to one, the global frames attending everything
// and the others their window and the global frames.
TEST(Conformer, GlobalTokensAgreeAcrossPathsBatchesAndTheRecorder) {
  torch::manual_seed(15);
  const auto [x, lengths] = padded_batch(24, {17, 9, 1, 6});
  const auto valid = valid_frames(lengths, x.size(1)).unsqueeze(-1);
  for (const bool separate : {false, true}) {
    SCOPED_TRACE(separate ? "projections of their own" : "the attention's projections");
    auto options = ConformerOptions(24, 4, 32, 2, 5)
                       .position(ConformerPosition::kRelPos)
                       .attention_left(2)
                       .attention_right(2)
                       .global_tokens(3)
                       .global_spacing(4)
                       .global_separate(separate);
    Conformer strips(ConformerOptions(options).attention_backend("auto"));
    perturb(*strips);
    Conformer math(ConformerOptions(options).attention_backend("math"));
    load_state_dict(*math, state_dict(*strips));
    EXPECT_EQ(strips->named_parameters().contains("layers.0.attn.global_qkv.weight"), separate);
    {
      strips->eval();
      math->eval();
      torch::NoGradGuard no_grad;
      const auto ours = std::get<0>(strips->forward(x, lengths)).masked_fill(~valid, 0.0);
      const auto materialised = std::get<0>(math->forward(x, lengths)).masked_fill(~valid, 0.0);
      EXPECT_LE(max_abs_diff(ours, materialised), 1e-5);
      EXPECT_LE(batched_vs_single(strips, x, lengths), 1e-5);
      EXPECT_LE(batched_vs_single(math, x, lengths), 1e-5);
      // Without the global frames the output changes: they take part.
      Conformer local(ConformerOptions(options).global_tokens(0));
      LoadOptions without_global;
      for (const auto& item : strips->named_parameters()) {
        if (item.key().find("global_qkv") != std::string::npos) {
          without_global.ignore.insert(item.key());
        }
      }
      load_state_dict(*local, state_dict(*strips), without_global);
      local->eval();
      EXPECT_GT(
          max_abs_diff(std::get<0>(local->forward(x, lengths)).masked_fill(~valid, 0.0), ours),
          1e-3);
    }
    std::vector<torch::Tensor> grads[2];
    for (int path = 0; path < 2; ++path) {
      auto& model = path == 0 ? strips : math;
      model->train();  // dropout 0
      model->zero_grad();
      std::get<0>(model->forward(x, lengths)).masked_fill(~valid, 0.0).square().sum().backward();
      for (const auto& p : model->parameters()) grads[path].push_back(p.grad().clone());
    }
    for (size_t i = 0; i < grads[0].size(); ++i) {
      ASSERT_TRUE(torch::isfinite(grads[0][i]).all().item<bool>());
      EXPECT_LE(max_abs_diff(grads[0][i], grads[1][i]), 1e-4) << i;
    }

    strips->eval();
    torch::NoGradGuard no_grad;
    AttentionRecorder recorder;
    const auto recorded = std::get<0>(strips->forward(x, lengths)).masked_fill(~valid, 0.0);
    ASSERT_EQ(recorder.records().size(), 2u);
    const auto& weights = recorder.records()[0].weights;  // [B, H, T, T]
    const auto row_sums = weights[0].sum(-1);             // the 17-frame utterance
    EXPECT_LE(max_abs_diff(row_sums, torch::ones_like(row_sums)), 1e-5);
    EXPECT_GT(weights[0].select(1, 0).select(1, 16).min().item<double>(), 0.0)
        << "the global frame 0 attends frame 16";
    EXPECT_GT(weights[0].select(1, 10).select(1, 0).min().item<double>(), 0.0)
        << "frame 10 attends the global frame 0";
    EXPECT_EQ(weights[0].select(1, 10).select(1, 1).abs().max().item<double>(), 0.0)
        << "frame 10 does not attend frame 1, outside its window";
    EXPECT_LE(
        max_abs_diff(recorded, std::get<0>(strips->forward(x, lengths)).masked_fill(~valid, 0.0)),
        0.0)
        << "recording changes nothing";
  }
}

TEST(Conformer, GradientsAreFiniteAndReachEveryParameter) {
  torch::manual_seed(6);
  for (const auto position :
       {ConformerPosition::kNone, ConformerPosition::kRelPos, ConformerPosition::kRelPosWenet}) {
    SCOPED_TRACE(to_string(position));
    Conformer model(ConformerOptions(16, 2, 32, 2, 32).position(position).dropout(0.1));
    model->train();
    const auto [x, lengths] = padded_batch(16, {10, 3, 1});
    const auto valid = valid_frames(lengths, x.size(1)).unsqueeze(-1);
    const auto xg = x.clone().requires_grad_(true);
    const auto out = std::get<0>(model->forward(xg, lengths));
    out.masked_fill(~valid, 0.0).square().sum().backward();
    for (const auto& item : model->named_parameters()) {
      ASSERT_TRUE(item.value().grad().defined()) << item.key();
      EXPECT_TRUE(torch::isfinite(item.value().grad()).all().item<bool>()) << item.key();
    }
    EXPECT_TRUE(torch::isfinite(xg.grad()).all().item<bool>());
    // The padding does not reach the valid outputs, so it gets no gradient.
    EXPECT_EQ(xg.grad().masked_fill(valid, 0.0).abs().max().item<double>(), 0.0);
  }
}

TEST(Conformer, AnEmptyUtteranceInTheBatchIsHarmless) {
  // Length 0: its queries see no key (zeros from attention), its frames count in no statistic.
  torch::manual_seed(8);
  for (const auto norm : {ConvNormKind::kBatchNorm, ConvNormKind::kGroupNorm}) {
    SCOPED_TRACE(to_string(norm));
    Conformer model(
        ConformerOptions(16, 2, 32, 2, 3).conv_norm(norm).position(ConformerPosition::kRelPos));
    perturb(*model);
    model->train();
    const auto [x, lengths] = padded_batch(16, {6, 0});
    const auto out = std::get<0>(model->forward(x, lengths));
    EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
    const auto alone = std::get<0>(model->forward(x.narrow(0, 0, 1), lengths.narrow(0, 0, 1)));
    EXPECT_LE(max_abs_diff(out.narrow(0, 0, 1), alone), 1e-5);
  }
}

// Which output frames change when input frame `s` does (eval: BatchNorm is per frame then).
std::vector<int64_t> receptive_field(ConformerConvModule& conv, int64_t frames, int64_t s) {
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({1, frames, conv->options.dim()});
  auto changed_x = x.clone();
  changed_x[0][s] +=
      torch::randn({conv->options.dim()});  // not a constant: LayerNorm removes those
  const auto diff = (conv(changed_x) - conv(x)).abs().amax(-1)[0];
  std::vector<int64_t> out;
  for (int64_t t = 0; t < frames; ++t) {
    if (diff[t].item<double>() > 0.0) out.push_back(t);
  }
  return out;
}

TEST(ConformerConvModule, DepthwisePaddingRule) {
  torch::manual_seed(7);
  struct Case {
    int64_t kernel;
    bool causal;
    int64_t left, right;
    std::vector<int64_t> affected;  // outputs that input frame 5 of 12 reaches
  };
  for (const auto& c : std::vector<Case>{{5, false, 2, 2, {3, 4, 5, 6, 7}},
                                         {4, false, 1, 2, {3, 4, 5, 6}},  // t sees t−1 ... t+2
                                         {32, false, 15, 16, {}},
                                         {4, true, 3, 0, {5, 6, 7, 8}},  // no future input
                                         {1, false, 0, 0, {5}}}) {
    SCOPED_TRACE("kernel " + std::to_string(c.kernel) + (c.causal ? " causal" : ""));
    ConformerConvModule conv(ConformerConvModuleOptions(8, c.kernel).causal(c.causal));
    perturb(*conv);
    conv->eval();
    EXPECT_EQ(conv->left_padding(), c.left);
    EXPECT_EQ(conv->right_padding(), c.right);
    if (c.affected.empty()) {
      // K = 32 over 40 frames: output t sees inputs t − 15 ... t + 16.
      std::vector<int64_t> expected;
      for (int64_t t = 20 - 16; t <= 20 + 15; ++t) expected.push_back(t);
      EXPECT_EQ(receptive_field(conv, 40, 20), expected);
    } else {
      EXPECT_EQ(receptive_field(conv, 12, 5), c.affected);
    }
    torch::NoGradGuard no_grad;
    EXPECT_EQ(conv(torch::randn({2, 3, 8})).sizes(), (std::vector<int64_t>{2, 3, 8}));
  }
}

TEST(Conformer, CheckpointLayoutsAndStrictLoading) {
  const auto ref = reference(false, false);
  EXPECT_EQ(parse_conformer_format("torchaudio"), ConformerCheckpointFormat::kTorchaudio);
  EXPECT_STREQ(conformer_format_name(ConformerCheckpointFormat::kAttnzoo), "attnzoo");
  EXPECT_STREQ(conformer_format_name(ConformerCheckpointFormat::kWenet), "wenet");
  EXPECT_STREQ(conformer_format_name(ConformerCheckpointFormat::kEspnet), "espnet");
  EXPECT_STREQ(conformer_format_name(ConformerCheckpointFormat::kNemo), "nemo");
  EXPECT_THROW(parse_conformer_format("kaldi"), c10::Error);
  Conformer model(fixture_options(false, false));
  EXPECT_EQ(detect_conformer_format(state_dict(*model)), ConformerCheckpointFormat::kAttnzoo);
  const auto mapped =
      to_conformer_layout(ref.weights.tensors, ConformerCheckpointFormat::kTorchaudio);
  EXPECT_EQ(mapped.tensors.size(), ref.weights.tensors.size());
  EXPECT_TRUE(mapped.tensors.contains("layers.1.conv.conv_norm.num_batches_tracked"));
  EXPECT_TRUE(mapped.tensors.contains("layers.0.attn.mha.qkv.weight"));
  // A relative-position model lacks nothing torchaudio has but needs what torchaudio lacks.
  Conformer rel(fixture_options(false, false).position(ConformerPosition::kRelPos));
  try {
    load_state_dict(*rel, mapped.tensors, {{}, {}, "torchaudio"});
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("missing (6)"), HasSubstr("layers.0.attn.linear_pos.weight"),
                      HasSubstr("layers.1.attn.pos_bias_v")));
  }
  // GroupNorm weights into a BatchNorm model: the running statistics are missing.
  const auto gn = to_conformer_layout(reference(false, true).weights.tensors,
                                      ConformerCheckpointFormat::kTorchaudio);
  EXPECT_THROW(load_state_dict(*model, gn.tensors), CheckpointError);
}

TEST(Conformer, BadConfigurationsAndInputs) {
  Conformer model(ConformerOptions(16, 2, 32, 1, 3));
  const auto x = torch::randn({2, 5, 16});
  EXPECT_THAT(error_of<c10::Error>([&] {
                model->forward(torch::randn({2, 5, 15}), torch::tensor({5, 3}));
              }),
              AllOf(HasSubstr("x must be [B, T, input_dim = 16]"), HasSubstr("[2, 5, 15]")));
  EXPECT_THAT(error_of<c10::Error>([&] {
                model->forward(torch::randn({2, 0, 16}));
              }),
              HasSubstr("x must have at least one frame"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                model->forward(x, torch::tensor({{5, 3}}));
              }),
              AllOf(HasSubstr("lengths must be [B = 2]"), HasSubstr("[1, 2]")));
  EXPECT_THAT(error_of<c10::Error>([&] {
                model->forward(x, torch::tensor({5, 3, 1}));
              }),
              HasSubstr("lengths must be [B = 2], got [3]"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                model->forward(x, torch::tensor({6, 3}));
              }),
              HasSubstr("lengths must lie in [0, T = 5], got values from 3 to 6"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                model->forward(x, torch::tensor({5.0, 3.0}));
              }),
              HasSubstr("lengths must be integral"));
  EXPECT_THAT(error_of<c10::Error>([] { Conformer(ConformerOptions(16, 3, 32, 1, 3)); }),
              HasSubstr("input_dim 16 is not divisible by num_heads 3"));
  EXPECT_THAT(error_of<c10::Error>([] { Conformer(ConformerOptions(16, 2, 32, 1, 0)); }),
              HasSubstr("depthwise_conv_kernel_size must be > 0"));
  EXPECT_THAT(error_of<c10::Error>([] {
                Conformer(ConformerOptions(16, 2, 32, 1, 3).position(ConformerPosition::kAbsPos));
              }),
              HasSubstr("position abs_pos belongs to ConformerEncoderOptions"));
  ConformerAttention attn(ConformerAttentionOptions(16, 2).position(ConformerPosition::kRelPos));
  EXPECT_THAT(error_of<c10::Error>([&] {
                attn(x, AttentionMask(), torch::randn({1, 5, 16}));
              }),
              HasSubstr("pos_emb must be [1 or B, 9 (rel_pos for T = 5), embed_dim = 16]"));
  // No lengths: every frame valid, lengths T returned.
  torch::NoGradGuard no_grad;
  model->eval();
  const auto [out, lengths] = model->forward(x);
  EXPECT_TRUE(torch::equal(lengths, torch::tensor({5, 5})));
  EXPECT_LE(max_abs_diff(out, std::get<0>(model->forward(x, torch::tensor({5, 5})))), 0.0);
}

// ---------------------------------------------------------------------------------------------
// Front end and encoder.

// WeNet's mask subsampling (x_mask[:, :, 2::2][:, :, 2::2] for ×4, [2::2][4::3] for ×6, [2::2]
// three times for ×8): the number of valid frames it keeps of `frames`.
int64_t wenet_mask_length(Subsampling kind, int64_t frames) {
  auto mask = torch::ones({frames});
  const auto every = [&](int64_t start, int64_t step) {
    mask = start < mask.size(0) ? mask.slice(0, start, mask.size(0), step) : mask.slice(0, 0, 0);
  };
  every(2, 2);
  if (kind == Subsampling::kConv2d6) {
    every(4, 3);
  } else {
    every(2, 2);
    if (kind == Subsampling::kConv2d8) every(2, 2);
  }
  return mask.size(0);
}

TEST(ConformerSubsampling, LengthsFollowTheConvolutionsAndWeNetsMasks) {
  torch::NoGradGuard no_grad;
  const std::vector<std::pair<Subsampling, int64_t>> minimum = {
      {Subsampling::kConv2d4, 7},     {Subsampling::kConv2d6, 11},    {Subsampling::kConv2d8, 15},
      {Subsampling::kDwStriding8, 1}, {Subsampling::kDwStriding4, 1}, {Subsampling::kStriding4, 1},
      {Subsampling::kStriding8, 1},   {Subsampling::kVggnet4, 1},     {Subsampling::kVggnet8, 1}};
  for (const auto& [kind, min_frames] : minimum) {
    SCOPED_TRACE(to_string(kind));
    ConformerSubsampling sub(ConformerSubsamplingOptions(kind, 20, 8).channels(3));
    EXPECT_EQ(sub->min_frames(), min_frames);
    const bool nemo = kind == Subsampling::kDwStriding8 || kind == Subsampling::kDwStriding4 ||
                      kind == Subsampling::kStriding4 || kind == Subsampling::kStriding8 ||
                      kind == Subsampling::kVggnet4 || kind == Subsampling::kVggnet8;
    EXPECT_EQ(sub->factor(), kind == Subsampling::kConv2d6 ? 6
                             : kind == Subsampling::kConv2d4 || kind == Subsampling::kDwStriding4 ||
                                     kind == Subsampling::kStriding4 ||
                                     kind == Subsampling::kVggnet4
                                 ? 4
                                 : 8);
    for (int64_t t = 1; t <= 50; ++t) {
      if (!nemo) {
        EXPECT_EQ(sub->output_length(t), wenet_mask_length(kind, t)) << "T = " << t;
      }
      if (t < min_frames) {
        EXPECT_EQ(sub->output_length(t), 0);
        continue;
      }
      // The convolutions themselves produce exactly that many frames.
      const auto [y, lengths] = sub(torch::randn({1, t, 20}), torch::tensor({t}));
      EXPECT_EQ(y.size(1), sub->output_length(t)) << "T = " << t;
      EXPECT_EQ(lengths.item<int64_t>(), y.size(1));
    }
    // Frequencies: F' from the same arithmetic, channels major in `out`.
    EXPECT_EQ(sub->out->weight.size(1), 3 * sub->output_length(20));
  }
  // NeMo's calc_length for dw_striding, striding and vggnet (its pools in ceil mode): ceil(L / 2)
  // per factor of 2.
  for (const auto kind :
       {Subsampling::kDwStriding8, Subsampling::kStriding8, Subsampling::kVggnet8}) {
    ConformerSubsampling sub(ConformerSubsamplingOptions(kind, 20, 8));
    for (int64_t t = 1; t <= 50; ++t) {
      EXPECT_EQ(sub->output_length(t), (((t + 1) / 2 + 1) / 2 + 1) / 2) << "T = " << t;
    }
  }
  for (const auto kind :
       {Subsampling::kDwStriding4, Subsampling::kStriding4, Subsampling::kVggnet4}) {
    ConformerSubsampling sub(ConformerSubsamplingOptions(kind, 20, 8));
    for (int64_t t = 1; t <= 50; ++t) {
      EXPECT_EQ(sub->output_length(t), ((t + 1) / 2 + 1) / 2) << "T = " << t;
    }
  }
}

TEST(ConformerSubsampling, TooShortInputNamesTheMinimum) {
  ConformerSubsampling sub(ConformerSubsamplingOptions(Subsampling::kConv2d8, 20, 8));
  EXPECT_THAT(error_of<c10::Error>([&] {
                sub(torch::randn({2, 14, 20}), torch::tensor({14, 9}));
              }),
              HasSubstr("conv2d8 (factor 8) needs at least 15 input frames, got 14"));
  ConformerEncoder encoder(ConformerEncoderOptions(20, ConformerOptions(8, 2, 16, 1, 3))
                               .subsampling(Subsampling::kConv2d6));
  EXPECT_THAT(error_of<c10::Error>([&] {
                encoder(torch::randn({1, 10, 20}));
              }),
              HasSubstr("conv2d6 (factor 6) needs at least 11 input frames, got 10"));
  EXPECT_THAT(error_of<c10::Error>([] {
                ConformerSubsampling(ConformerSubsamplingOptions(Subsampling::kConv2d4, 6, 8));
              }),
              HasSubstr("needs at least 7 input features, got input_dim 6"));
  EXPECT_THAT(error_of<c10::Error>([] {
                ConformerSubsampling(ConformerSubsamplingOptions(Subsampling::kNone, 20, 8));
              }),
              HasSubstr("kind none builds no module"));
}

// Largest difference, over the valid output frames, between the batched encoder and each
// utterance alone.
double encoder_batched_vs_single(ConformerEncoder& model, const torch::Tensor& x,
                                 const torch::Tensor& lengths) {
  const auto [batched, out_lengths] = model->forward(x, lengths);
  double worst = 0.0;
  for (int64_t b = 0; b < x.size(0); ++b) {
    const auto [one, one_length] = utterance(x, lengths, b);
    const auto [single, single_length] = model->forward(one, one_length);
    EXPECT_EQ(single_length.item<int64_t>(), out_lengths[b].item<int64_t>());
    EXPECT_EQ(single.size(1), single_length.item<int64_t>());
    worst =
        std::max(worst, max_abs_diff(batched.narrow(0, b, 1).narrow(1, 0, single.size(1)), single));
  }
  return worst;
}

ConformerEncoder perturbed_encoder(const ConformerEncoderOptions& options) {
  ConformerEncoder model(options);
  perturb(*model);
  if (model->global_cmvn) {
    torch::NoGradGuard no_grad;
    model->global_cmvn->mean.copy_(torch::randn({options.input_dim()}));
    model->global_cmvn->istd.copy_(torch::rand({options.input_dim()}) + 0.5);
  }
  return model;
}

TEST(ConformerEncoder, BatchedEqualsPerUtteranceThroughEverySubsampling) {
  // Padded frames hold large random values (padded_batch); the lengths hit every remainder of the
  // factors, so the last valid output frames sit at the subsampling boundary.
  torch::manual_seed(3);
  for (const auto subsampling :
       {Subsampling::kConv2d4, Subsampling::kConv2d6, Subsampling::kConv2d8,
        Subsampling::kDwStriding8, Subsampling::kDwStriding4, Subsampling::kStriding4,
        Subsampling::kVggnet4}) {
    for (const auto position : {ConformerPosition::kAbsPos, ConformerPosition::kRelPos,
                                ConformerPosition::kRelPosWenet}) {
      SCOPED_TRACE(std::string(to_string(subsampling)) + " " + to_string(position));
      auto model = perturbed_encoder(
          ConformerEncoderOptions(
              20, ConformerOptions(16, 4, 32, 2, 5).conv_norm(ConvNormKind::kLayerNorm))
              .subsampling(subsampling)
              .subsampling_channels(6)
              .position(position)
              .global_cmvn(true)
              .vocab_size(7));
      model->train();  // dropout 0; layer_norm statistics are per frame
      const auto [x, lengths] = padded_batch(20, {40, 23, 16, 31, 37, 17}, 3);
      EXPECT_LE(encoder_batched_vs_single(model, x, lengths), 1e-5);
    }
  }
}

TEST(ConformerEncoder, TorchaudioStyleWithoutSubsamplingIsTheBlockStack) {
  torch::manual_seed(4);
  auto model = perturbed_encoder(ConformerEncoderOptions(16, ConformerOptions(16, 2, 32, 2, 3))
                                     .subsampling(Subsampling::kNone)
                                     .position(ConformerPosition::kNone)
                                     .final_norm(false));
  model->eval();
  torch::NoGradGuard no_grad;
  const auto [x, lengths] = padded_batch(16, {9, 4, 6});
  const auto [encoded, out_lengths] = model(x, lengths);
  const auto [blocks, block_lengths] = model->conformer(x, lengths);
  EXPECT_LE(max_abs_diff(encoded, blocks), 0.0);
  EXPECT_TRUE(torch::equal(out_lengths, lengths));
  EXPECT_LE(encoder_batched_vs_single(model, x, lengths), 1e-5);
}

TEST(ConformerEncoder, CmvnBuffersLoadByNameAndNormaliseTheFeatures) {
  torch::manual_seed(5);
  const auto options = ConformerEncoderOptions(12, ConformerOptions(8, 2, 16, 1, 3))
                           .subsampling(Subsampling::kConv2d4)
                           .position(ConformerPosition::kAbsPos);
  auto with_cmvn = perturbed_encoder(ConformerEncoderOptions(options).global_cmvn(true));
  ConformerEncoder without(options);
  // Everything but the CMVN buffers copied by name; loading must accept them by their names.
  const auto mean = torch::randn({12}), istd = torch::rand({12}) + 0.5;
  io::TensorDict tensors, blocks_only;
  for (const auto& item : state_dict(*with_cmvn)) {
    if (item.key().rfind("global_cmvn.", 0) == 0) continue;
    tensors.insert(item.key(), item.value());
    blocks_only.insert(item.key(), item.value());
  }
  tensors.insert("global_cmvn.mean", mean);
  tensors.insert("global_cmvn.istd", istd);
  load_state_dict(*with_cmvn, tensors);
  load_state_dict(*without, blocks_only);
  with_cmvn->eval();
  without->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 30, 12});
  const auto lengths = torch::tensor({30, 21});
  const auto a = std::get<0>(with_cmvn(x, lengths));
  const auto b = std::get<0>(without(((x - mean) * istd), lengths));
  EXPECT_LE(max_abs_diff(a, b), 1e-5);
  EXPECT_GT(max_abs_diff(a, std::get<0>(without(x, lengths))), 1e-2);
}

TEST(ConformerEncoder, CtcHeadAndUtteranceEmbedding) {
  torch::manual_seed(6);
  auto model = perturbed_encoder(ConformerEncoderOptions(20, ConformerOptions(16, 4, 32, 1, 5))
                                     .subsampling(Subsampling::kConv2d4)
                                     .vocab_size(11));
  model->eval();
  torch::NoGradGuard no_grad;
  const auto [x, lengths] = padded_batch(20, {30, 12});
  const auto [encoded, out_lengths] = model(x, lengths);
  EXPECT_TRUE(torch::equal(out_lengths, torch::tensor({6, 2})));
  const auto log_probs = model->ctc_log_probs(encoded);
  EXPECT_EQ(log_probs.sizes(), (std::vector<int64_t>{2, encoded.size(1), 11}));
  EXPECT_LE(max_abs_diff(log_probs.exp().sum(-1), torch::ones({2, encoded.size(1)})), 1e-5);
  EXPECT_LE(
      max_abs_diff(log_probs, torch::log_softmax(torch::nn::functional::linear(
                                                     encoded, model->ctc->weight, model->ctc->bias),
                                                 -1)),
      1e-6);
  // A bfloat16 model's log-probabilities are normalised in float32: they sum to 1 to float32's
  // precision, not bfloat16's, and none is above 0.
  model->to(torch::kBFloat16);
  const auto reduced = model->ctc_log_probs(encoded.to(torch::kBFloat16));
  EXPECT_EQ(reduced.scalar_type(), torch::kFloat);
  EXPECT_LE(max_abs_diff(reduced.exp().sum(-1), torch::ones({2, encoded.size(1)})), 1e-5);
  EXPECT_LE(reduced.max().item<double>(), 0.0);
  model->to(torch::kFloat);
  const auto embedding = ConformerEncoderImpl::utterance_embedding(encoded, out_lengths);
  EXPECT_LE(max_abs_diff(embedding[0], encoded[0].narrow(0, 0, 6).mean(0)), 1e-6);
  EXPECT_LE(max_abs_diff(embedding[1], encoded[1].narrow(0, 0, 2).mean(0)), 1e-6);
  ConformerEncoder no_head(ConformerEncoderOptions(20, ConformerOptions(16, 4, 32, 1, 5)));
  const torch::Tensor features = encoded;  // a structured binding cannot be captured in C++17
  EXPECT_THAT(error_of<c10::Error>([&] { no_head->ctc_log_probs(features); }),
              HasSubstr("no CTC head"));
  EXPECT_THAT(error_of<c10::Error>([] {
                ConformerEncoder(ConformerEncoderOptions(20, ConformerOptions(16, 4, 32, 1, 5))
                                     .subsampling(Subsampling::kNone));
              }),
              HasSubstr("input_dim 20 != 16"));
  EXPECT_THAT(error_of<c10::Error>([] {
                ConformerEncoder(ConformerEncoderOptions(20, ConformerOptions(15, 3, 32, 1, 5))
                                     .position(ConformerPosition::kAbsPos));
              }),
              HasSubstr("abs_pos needs an even model width, got 15"));
  EXPECT_THAT(error_of<c10::Error>([&] {
                model(torch::randn({2, 30, 19}));
              }),
              HasSubstr("features must be [B, T, input_dim = 20]"));
}

// The WeNet-layout fixture (make_wenet_reference.py): a synthetic checkpoint with WeNet's names and
// shapes, and OUR float64 transcription of WeNet's encoder run on each utterance alone.
ConformerEncoderOptions wenet_fixture_options() {
  return ConformerEncoderOptions(20, ConformerOptions(16, 4, 32, 2, 5))
      .subsampling(Subsampling::kConv2d4)
      .position(ConformerPosition::kRelPosWenet)
      .global_cmvn(true)
      .final_norm(true)
      .vocab_size(7);
}

// The padded batch of the fixture through `model` against each utterance encoded alone by the
// reference, on the valid frames: encoder output and CTC log-probabilities.
void expect_valid_frames_match(ConformerEncoder& model, const io::TensorDict& ref) {
  model->eval();
  torch::NoGradGuard no_grad;
  const auto x = ref["input"];
  const auto lengths = ref["lengths"];
  const auto [encoded, out_lengths] = model(x, lengths);
  const auto log_probs = model->ctc_log_probs(encoded);
  for (int64_t b = 0; b < x.size(0); ++b) {
    SCOPED_TRACE("utterance " + std::to_string(b));
    const auto single = ref["single_" + std::to_string(b)];
    ASSERT_EQ(out_lengths[b].item<int64_t>(), single.size(1));
    const auto valid = [&](const torch::Tensor& t) {
      return t.narrow(0, b, 1).narrow(1, 0, single.size(1));
    };
    EXPECT_LE(max_abs_diff(valid(encoded), single), 1e-4);
    EXPECT_LE(max_abs_diff(valid(log_probs), ref["ctc_" + std::to_string(b)]), 1e-4);
  }
}

TEST(ConformerEncoder, WenetLayoutLoadsAndMatchesTheReferenceOnValidFrames) {
  const std::string dir = ATTNZOO_MODELS_REFERENCE_DIR;
  const auto weights = io::load_safetensors(dir + "/wenet_conformer.weights.safetensors");
  const auto ref = io::load_safetensors(dir + "/wenet_conformer.io.safetensors");
  EXPECT_EQ(detect_conformer_format(weights.tensors), ConformerCheckpointFormat::kWenet);
  EXPECT_EQ(parse_conformer_format("wenet"), ConformerCheckpointFormat::kWenet);
  EXPECT_THAT(error_of<c10::Error>([] { parse_conformer_format("kaldi"); }),
              HasSubstr("expected attnzoo, torchaudio, wenet, espnet or nemo"));
  const auto mapped = to_conformer_layout(weights.tensors, ConformerCheckpointFormat::kWenet);
  // The fixture's one decoder tensor is mapped (models/attention_decoder.h); this model has no
  // decoder, so the loader is told to leave it, as ConformerFamily's does.
  EXPECT_TRUE(mapped.ignored.empty());
  EXPECT_TRUE(mapped.tensors.contains("decoder.left.embed.weight"));
  ConformerEncoder model(wenet_fixture_options());
  // strict: every other name accounted for
  load_state_dict(*model, mapped.tensors, {{}, {"decoder.left.embed.weight"}, "wenet"});
  expect_valid_frames_match(model, ref.tensors);
}

// U2++'s causal convolution with LayerNorm after it. WeNet pads the convolution module's input,
// before pointwise_conv1, so the depthwise kernel sees the GLU of that convolution's bias left of
// the first frame; zeros there instead (what attnzoo did before) put the output 0.08 off.
TEST(ConformerEncoder, WenetCausalLayoutMatchesTheReferenceOnValidFrames) {
  const std::string dir = ATTNZOO_MODELS_REFERENCE_DIR;
  const auto weights = io::load_safetensors(dir + "/wenet_conformer_causal.weights.safetensors");
  const auto ref = io::load_safetensors(dir + "/wenet_conformer_causal.io.safetensors");
  auto options = wenet_fixture_options();
  options.blocks().causal_conv(true).conv_norm(ConvNormKind::kLayerNorm);
  ConformerEncoder model(options);
  const auto mapped = to_conformer_layout(weights.tensors, ConformerCheckpointFormat::kWenet);
  load_state_dict(*model, mapped.tensors, {{}, {"decoder.left.embed.weight"}, "wenet"});
  expect_valid_frames_match(model, ref.tensors);
}

TEST(ConformerEncoder, WenetLayoutIncompleteQkvIsReportedByTheStrictLoader) {
  const std::string dir = ATTNZOO_MODELS_REFERENCE_DIR;
  const auto weights = io::load_safetensors(dir + "/wenet_conformer.weights.safetensors");
  io::TensorDict partial;
  for (const auto& item : weights.tensors) {
    if (item.key() != "encoder.encoders.1.self_attn.linear_v.weight") {
      partial.insert(item.key(), item.value());
    }
  }
  ConformerEncoder model(wenet_fixture_options());
  const auto mapped = to_conformer_layout(partial, ConformerCheckpointFormat::kWenet);
  try {
    load_state_dict(*model, mapped.tensors, {{}, {}, "wenet"});
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("conformer.layers.1.attn.mha.qkv.weight"));
  }
  // Conv2dSubsampling8 names its projection `linear`, ×4 and ×6 `out.0`.
  io::TensorDict x8;
  x8.insert("encoder.embed.linear.weight", torch::zeros({2, 2}));
  x8.insert("encoder.embed.conv.4.bias", torch::zeros({2}));
  x8.insert("encoder.embed.pos_enc.pe", torch::zeros({1, 5, 2}));
  const auto renamed = to_conformer_layout(x8, ConformerCheckpointFormat::kWenet);
  EXPECT_TRUE(renamed.tensors.contains("embed.out.weight"));
  EXPECT_TRUE(renamed.tensors.contains("embed.conv.4.bias"));
  EXPECT_EQ(renamed.ignored, (std::set<std::string>{"encoder.embed.pos_enc.pe"}));
}

}  // namespace test_conformer
}  // namespace attnzoo
