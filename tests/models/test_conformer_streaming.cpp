// Streaming Conformer: chunk masks, the attention and convolution caches, and the promise that
// encoding chunk by chunk equals the offline forward under the same chunk mask.
#include <attnzoo/models/conformer.h>
#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ostream>
#include <string>
#include <tuple>
#include <vector>

namespace attnzoo {
namespace test_conformer_streaming {
using testing::error_of;
using testing::max_abs_diff;

using ::testing::HasSubstr;

constexpr int64_t kFeatures = 20;  // conv2d8 needs at least 15

ConformerEncoder streaming_encoder(Subsampling subsampling, ConformerPosition position,
                                   ConvNormKind norm = ConvNormKind::kBatchNorm,
                                   bool convolution_first = false) {
  torch::manual_seed(7);
  // Without subsampling the features are the model width.
  ConformerEncoder encoder(
      ConformerEncoderOptions(subsampling == Subsampling::kNone ? 16 : kFeatures,
                              ConformerOptions(16, 4, 24, 2, 5)
                                  .causal_conv(true)
                                  .conv_norm(norm)
                                  .convolution_first(convolution_first)
                                  .attention_backend("math"))
          .subsampling(subsampling)
          .position(position)
          .global_cmvn(true));
  encoder->eval();
  // Non-trivial running statistics and CMVN, so the caches meet realistic values.
  torch::NoGradGuard no_grad;
  for (auto& buffer : encoder->named_buffers()) {
    if (buffer.key().find("running_mean") != std::string::npos) buffer.value().normal_(0.0, 0.2);
    if (buffer.key().find("running_var") != std::string::npos) buffer.value().uniform_(0.5, 2.0);
    if (buffer.key().find("global_cmvn.mean") != std::string::npos) buffer.value().normal_();
    if (buffer.key().find("global_cmvn.istd") != std::string::npos) {
      buffer.value().uniform_(0.5, 1.5);
    }
  }
  return encoder;
}

TEST(ChunkAttentionMask, FollowsWenetsSubsequentChunkMask) {
  // WeNet's subsequent_chunk_mask(5, 2, num_left_chunks) with 1 = attend; ours says excluded.
  const auto full = chunk_attention_mask(5, 2, -1).logical_not().to(torch::kInt);
  const auto expected_full = torch::tensor({1, 1, 0, 0, 0,  //
                                            1, 1, 0, 0, 0,  //
                                            1, 1, 1, 1, 0,  //
                                            1, 1, 1, 1, 0,  //
                                            1, 1, 1, 1, 1},
                                           torch::kInt)
                                 .view({5, 5});
  EXPECT_TRUE(torch::equal(full, expected_full)) << full;
  const auto left0 = chunk_attention_mask(5, 2, 0).logical_not().to(torch::kInt);
  const auto expected_left0 = torch::tensor({1, 1, 0, 0, 0,  //
                                             1, 1, 0, 0, 0,  //
                                             0, 0, 1, 1, 0,  //
                                             0, 0, 1, 1, 0,  //
                                             0, 0, 0, 0, 1},
                                            torch::kInt)
                                  .view({5, 5});
  EXPECT_TRUE(torch::equal(left0, expected_left0)) << left0;
  EXPECT_FALSE(chunk_attention_mask(5, 0, -1).defined());
}

TEST(RelShift, RectangularShiftMatchesItsDefinition) {
  // Lq queries over Lk keys: out[i, j] = in[i, Lq − 1 − i + j].
  for (const auto& [lq, lk] : std::vector<std::pair<int64_t, int64_t>>{{3, 3}, {2, 7}, {4, 9}}) {
    const auto in = torch::randn({2, 3, lq, lq + lk - 1}, torch::kDouble);
    const auto out = rel_shift(in);
    ASSERT_EQ(out.sizes(), (torch::IntArrayRef{2, 3, lq, lk}));
    for (int64_t i = 0; i < lq; ++i) {
      for (int64_t j = 0; j < lk; ++j) {
        EXPECT_TRUE(
            torch::equal(out.select(2, i).select(2, j), in.select(2, i).select(2, lq - 1 - i + j)))
            << "Lq " << lq << " Lk " << lk << " i " << i << " j " << j;
      }
    }
  }
  EXPECT_THAT(error_of([] {
                rel_shift(torch::zeros({1, 1, 4, 6}));
              }),
              HasSubstr("[B, H, Lq, Lq + Lk - 1] with Lk >= Lq"));
}

TEST(RelativePositionEncoding, ChunkRowsAreRowsOfTheWholeSequence) {
  // rel_pos: the rows of a chunk of 3 queries over 7 keys are relative positions 6 ... −2, i.e.
  // rows (T − 1 − 6) ... (T − 1 + 2) of the encodings of a T = 10 sequence.
  const auto whole = relative_position_encoding(10, 8, ConformerPosition::kRelPos, torch::kDouble);
  const auto chunk =
      relative_position_encoding(3, 7, 0, 8, ConformerPosition::kRelPos, torch::kDouble);
  EXPECT_TRUE(torch::allclose(chunk, whole.narrow(1, 3, 9), 0.0, 1e-15));
  // rel_pos_wenet: keys at positions 4 ... 10.
  const auto wenet_whole =
      relative_position_encoding(11, 8, ConformerPosition::kRelPosWenet, torch::kDouble);
  const auto wenet_chunk =
      relative_position_encoding(3, 7, 4, 8, ConformerPosition::kRelPosWenet, torch::kDouble);
  EXPECT_TRUE(torch::allclose(wenet_chunk, wenet_whole.narrow(1, 4, 7), 0.0, 1e-15));
}

struct StreamingCase {
  Subsampling subsampling;
  ConformerPosition position;
  int64_t chunk_size, num_left_chunks;
};

void PrintTo(const StreamingCase& c, std::ostream* os) {
  *os << to_string(c.subsampling) << " " << to_string(c.position) << " chunk " << c.chunk_size
      << " left " << c.num_left_chunks;
}

class StreamingEqualsOffline : public ::testing::TestWithParam<StreamingCase> {};

TEST_P(StreamingEqualsOffline, ChunkByChunkEqualsTheChunkMaskedForward) {
  const auto& c = GetParam();
  auto encoder = streaming_encoder(c.subsampling, c.position);
  torch::NoGradGuard no_grad;
  const int64_t feats = encoder->options.input_dim();
  const auto features = torch::randn({2, 83, feats});
  const auto [offline, offline_lengths] =
      encoder->forward(features, {}, c.chunk_size, c.num_left_chunks);
  const auto [streamed, streamed_lengths] =
      encoder->forward_chunk_by_chunk(features, c.chunk_size, c.num_left_chunks);
  ASSERT_EQ(streamed.sizes(), offline.sizes());
  EXPECT_TRUE(torch::equal(streamed_lengths, offline_lengths));
  EXPECT_LE(max_abs_diff(streamed, offline), 1e-5);
  // The chunk mask matters: the full-context forward differs (so this test can fail).
  const auto full = std::get<0>(encoder->forward(features));
  EXPECT_GT(max_abs_diff(full, offline), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(
    Conformer, StreamingEqualsOffline,
    ::testing::Values(
        StreamingCase{Subsampling::kConv2d4, ConformerPosition::kRelPosWenet, 4, -1},
        StreamingCase{Subsampling::kConv2d4, ConformerPosition::kRelPosWenet, 4, 1},
        StreamingCase{Subsampling::kConv2d4, ConformerPosition::kRelPos, 4, -1},
        StreamingCase{Subsampling::kConv2d4, ConformerPosition::kRelPos, 3, 2},
        StreamingCase{Subsampling::kConv2d4, ConformerPosition::kAbsPos, 5, 0},
        StreamingCase{Subsampling::kConv2d4, ConformerPosition::kNone, 1, -1},
        StreamingCase{Subsampling::kConv2d6, ConformerPosition::kRelPosWenet, 2, 1},
        StreamingCase{Subsampling::kConv2d8, ConformerPosition::kRelPos, 2, -1},
        StreamingCase{Subsampling::kNone, ConformerPosition::kRelPos, 7, 1},
        StreamingCase{Subsampling::kNone, ConformerPosition::kRelPosWenet, 16, 0},
        // NeMo's cache-aware streaming: causal subsampling, whose chunks compute
        // two earlier frames again; chunk 1 is NeMo's att_context_size [L, 0].
        StreamingCase{Subsampling::kCausalDwStriding8, ConformerPosition::kRelPos, 3, 2},
        StreamingCase{Subsampling::kCausalDwStriding8, ConformerPosition::kRelPos, 1, 4},
        StreamingCase{Subsampling::kCausalDwStriding4, ConformerPosition::kRelPos, 2, -1},
        StreamingCase{Subsampling::kCausalStriding4, ConformerPosition::kRelPos, 5, 1},
        StreamingCase{Subsampling::kCausalStriding8, ConformerPosition::kRelPos, 2, 1}),
    [](const auto& info) {
      return std::string(to_string(info.param.subsampling)) + "_" + to_string(info.param.position) +
             "_chunk" + std::to_string(info.param.chunk_size) + "_left" +
             (info.param.num_left_chunks < 0 ? std::string("all")
                                             : std::to_string(info.param.num_left_chunks));
    });

TEST(ConformerEncoder, StreamLeadCoversTheFramesThatReadAChunksPadding) {
  EXPECT_EQ(streaming_encoder(Subsampling::kConv2d4, ConformerPosition::kRelPos)->stream_lead(), 0);
  EXPECT_EQ(streaming_encoder(Subsampling::kNone, ConformerPosition::kRelPos)->stream_lead(), 0);
  for (const auto kind : {Subsampling::kCausalDwStriding8, Subsampling::kCausalDwStriding4,
                          Subsampling::kCausalStriding4, Subsampling::kCausalStriding8}) {
    auto encoder = streaming_encoder(kind, ConformerPosition::kRelPos);
    torch::NoGradGuard no_grad;
    // NeMo's drop_extra_pre_encoded for a pre-encode cache of factor + 1 frames.
    EXPECT_EQ(encoder->stream_lead(), 2) << to_string(kind);
    EXPECT_EQ(encoder->right_context(), 0) << to_string(kind);
    // A chunk started `lead` frames early gives the whole utterance's frames from there on only
    // when lead covers the frames that read the padding: with one frame less, they differ.
    const int64_t rate = encoder->subsampling_rate();
    const auto features = torch::randn({1, 12 * rate + 1, kFeatures});
    const auto whole = encoder->embed(features, torch::Tensor{});
    const auto& frames = std::get<0>(whole);
    const auto from = [&](int64_t first_output) {
      return std::get<0>(encoder->embed(
          features.narrow(1, first_output * rate, features.size(1) - first_output * rate),
          torch::Tensor{}));
    };
    const auto late = from(4);  // output frames 4 ... 12
    EXPECT_LE(max_abs_diff(late.narrow(1, 2, late.size(1) - 2), frames.narrow(1, 6, 7)), 1e-5)
        << to_string(kind);
    EXPECT_GT(max_abs_diff(late.narrow(1, 1, 1), frames.narrow(1, 5, 1)), 1e-4) << to_string(kind);
  }
}

TEST(BandAttentionMask, LimitsEachFrameToItsNeighbours) {
  // Frame i sees i − 2 ... i + 1 (NeMo's _create_masks for att_context_size [2, 1], regular).
  const auto allowed = band_attention_mask(5, 5, 2, 1).logical_not().to(torch::kInt);
  const auto expected = torch::tensor({1, 1, 0, 0, 0,  //
                                       1, 1, 1, 0, 0,  //
                                       1, 1, 1, 1, 0,  //
                                       0, 1, 1, 1, 1,  //
                                       0, 0, 1, 1, 1},
                                      torch::kInt)
                            .view({5, 5});
  EXPECT_TRUE(torch::equal(allowed, expected)) << allowed;
  const auto left_only = band_attention_mask(4, 4, 1, -1).logical_not().to(torch::kInt);
  EXPECT_TRUE(torch::equal(
      left_only,
      torch::tensor({1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1}, torch::kInt).view({4, 4})))
      << left_only;
  // Two queries after three cached keys: they sit at key positions 3 and 4.
  const auto cached = band_attention_mask(2, 5, 1, 0).logical_not().to(torch::kInt);
  EXPECT_TRUE(
      torch::equal(cached, torch::tensor({0, 0, 1, 1, 0, 0, 0, 0, 1, 1}, torch::kInt).view({2, 5})))
      << cached;
  EXPECT_FALSE(band_attention_mask(5, 5, -1, -1).defined());
}

TEST(ConformerEncoder, LimitedAttentionContextMasksEveryForward) {
  auto blocks = ConformerOptions(16, 4, 24, 2, 5).causal_conv(true).attention_backend("math");
  const auto options = [&](const ConformerOptions& b) {
    return ConformerEncoderOptions(kFeatures, b)
        .subsampling(Subsampling::kConv2d4)
        .position(ConformerPosition::kRelPos);
  };
  torch::manual_seed(3);
  ConformerEncoder full(options(blocks));
  torch::manual_seed(3);  // the same weights
  ConformerEncoder limited(options(ConformerOptions(blocks).attention_left(3).attention_right(1)));
  torch::manual_seed(3);  // and on the CPU's strips, which compute only the keys in reach
  ConformerEncoder strips(options(
      ConformerOptions(blocks).attention_left(3).attention_right(1).attention_backend("auto")));
  full->eval();
  limited->eval();
  strips->eval();
  torch::NoGradGuard no_grad;
  const auto features = torch::randn({2, 80, kFeatures});
  const auto lengths = torch::tensor({80, 61});
  const int64_t frames = full->embed->output_length(80);
  // The context is a mask like any other: the same as passing it to the blocks by hand.
  const auto [embedded, embedded_lengths] = full->embed(features, lengths);
  const auto by_hand = full->after_norm(std::get<0>(full->conformer(
      embedded * 4.0, embedded_lengths, band_attention_mask(frames, frames, 3, 1))));  // x·√16
  const auto [masked, masked_lengths] = limited->forward(features, lengths);
  const auto [stripped, stripped_lengths] = strips->forward(features, lengths);
  const auto valid = [&](const torch::Tensor& y, int64_t b, int64_t n) {
    return y.select(0, b).narrow(0, 0, n);
  };
  for (int64_t b = 0; b < 2; ++b) {
    const int64_t n = masked_lengths[b].item<int64_t>();
    EXPECT_LE(max_abs_diff(valid(masked, b, n), valid(by_hand, b, n)), 1e-5);
    EXPECT_LE(max_abs_diff(valid(stripped, b, n), valid(by_hand, b, n)), 1e-5);
  }
  EXPECT_GT(max_abs_diff(masked, std::get<0>(full->forward(features, lengths))), 1e-3);
  EXPECT_THAT(error_of([&] { ConformerStream(limited, 4); }),
              HasSubstr("a limited attention context (attention_left/right) does not stream"));
}

TEST(ConformerStream, IrregularPushesGiveTheSameFramesAsOneCall) {
  for (const auto norm : {ConvNormKind::kBatchNorm, ConvNormKind::kLayerNorm}) {
    for (bool conv_first : {false, true}) {
      // The causal subsampling of NeMo's streaming models where the norm is theirs.
      const auto subsampling = norm == ConvNormKind::kLayerNorm ? Subsampling::kCausalDwStriding4
                                                                : Subsampling::kConv2d4;
      auto encoder = streaming_encoder(subsampling, ConformerPosition::kRelPos, norm, conv_first);
      torch::NoGradGuard no_grad;
      const auto features = torch::randn({1, 101, kFeatures});
      const auto reference = std::get<0>(encoder->forward(features, {}, 4, 2));
      ConformerStream stream(encoder, 4, 2);
      std::vector<torch::Tensor> pieces;
      int64_t start = 0;
      for (int64_t step : {0, 1, 5, 13, 2, 30, 9, 41}) {
        const int64_t n = std::min<int64_t>(step, features.size(1) - start);
        pieces.push_back(stream.push(features.narrow(1, start, n)));
        start += n;
      }
      ASSERT_EQ(start, features.size(1));
      pieces.push_back(stream.finish());
      const auto streamed = torch::cat(pieces, 1);
      ASSERT_EQ(streamed.sizes(), reference.sizes()) << to_string(norm);
      EXPECT_LE(max_abs_diff(streamed, reference), 1e-5)
          << to_string(norm) << " conv_first " << conv_first;
      EXPECT_EQ(stream.offset(), reference.size(1));
      EXPECT_THAT(error_of([&] { stream.push(features); }), HasSubstr("push after finish()"));
      stream.reset();
      const auto again = torch::cat({stream.push(features), stream.finish()}, 1);
      EXPECT_TRUE(torch::equal(again, streamed));
    }
  }
}

TEST(ConformerEncoder, ForwardChunkKeepsTheRequiredCacheAndShapes) {
  auto encoder = streaming_encoder(Subsampling::kConv2d4, ConformerPosition::kRelPosWenet);
  torch::NoGradGuard no_grad;
  // Window of chunk 4 for x4 subsampling: (4 − 1)·4 + 6 + 1 = 19 input frames.
  EXPECT_EQ(encoder->subsampling_rate(), 4);
  EXPECT_EQ(encoder->right_context(), 6);
  const auto window = torch::randn({3, 19, kFeatures});
  auto [y, att, cnn] = encoder->forward_chunk(window, 0, 8);
  EXPECT_EQ(y.sizes(), (torch::IntArrayRef{3, 4, 16}));
  EXPECT_EQ(att.sizes(), (torch::IntArrayRef{2, 3, 4, 4, 8}));  // [L, B, H, 4 frames, 2·E]
  EXPECT_EQ(cnn.sizes(), (torch::IntArrayRef{2, 3, 16, 4}));    // [L, B, D, K − 1]
  std::tie(y, att, cnn) = encoder->forward_chunk(window, 4, 8, att, cnn);
  EXPECT_EQ(att.size(3), 8);
  std::tie(y, att, cnn) = encoder->forward_chunk(window, 8, 8, att, cnn);
  EXPECT_EQ(att.size(3), 8);  // the last 8 of 12
  std::tie(y, att, cnn) = encoder->forward_chunk(window, 12, 0, att, cnn);
  EXPECT_EQ(att.size(3), 0);
  std::tie(y, att, cnn) = encoder->forward_chunk(window, 16, -1, att, cnn);
  EXPECT_EQ(att.size(3), 4);
  std::tie(y, att, cnn) = encoder->forward_chunk(window, 20, -1, att, cnn);
  EXPECT_EQ(att.size(3), 8);
}

TEST(ConformerEncoder, StreamingRefusesWhatCannotStream) {
  torch::NoGradGuard no_grad;
  const auto window = torch::randn({1, 19, kFeatures});
  {
    auto encoder = streaming_encoder(Subsampling::kConv2d4, ConformerPosition::kRelPos);
    encoder->train();
    EXPECT_THAT(error_of([&] { encoder->forward_chunk(window, 0, -1); }),
                HasSubstr("inference only; call eval() first"));
    encoder->eval();
    EXPECT_THAT(error_of([&] { encoder->forward_chunk(window.narrow(1, 0, 6), 0, -1); }),
                HasSubstr("a chunk needs at least 7 input frames (right context 6 + 1), got 6"));
    EXPECT_THAT(error_of([&] {
                  encoder->forward_chunk(window, 0, -1, torch::zeros({2, 1, 4}));
                }),
                HasSubstr("att_cache must be [num_layers = 2, B = 1, ...] with 5 dims"));
    EXPECT_THAT(error_of([&] {
                  encoder->forward_chunk(window, 3, -1, torch::zeros({2, 1, 4, 4, 8}));
                }),
                HasSubstr("att_cache holds 4 frames but offset is only 3"));
    EXPECT_THAT(error_of([&] {
                  encoder->forward_chunk(window, 0, -1, {}, torch::zeros({2, 1, 16, 3}));
                }),
                HasSubstr("cache must be [B = 1, D = 16, K - 1 = 4], got [1, 16, 3]"));
    EXPECT_THAT(error_of([&] { encoder->forward_chunk_by_chunk(window.narrow(1, 0, 5), 4); }),
                HasSubstr("input too short: 5 frames, the subsampling needs at least 7"));
    EXPECT_THAT(error_of([&] { ConformerStream(encoder, 0); }),
                HasSubstr("chunk_size must be > 0, got 0"));
  }
  {
    torch::manual_seed(0);
    ConformerEncoder centred(ConformerEncoderOptions(kFeatures, ConformerOptions(16, 4, 24, 1, 5)));
    centred->eval();
    EXPECT_THAT(error_of([&] { centred->forward_chunk(window, 0, -1); }),
                HasSubstr("streaming needs causal_conv"));
    ConformerEncoder group(ConformerEncoderOptions(
        kFeatures,
        ConformerOptions(16, 4, 24, 1, 5).causal_conv(true).conv_norm(ConvNormKind::kGroupNorm)));
    group->eval();
    EXPECT_THAT(error_of([&] { group->forward_chunk(window, 0, -1); }),
                HasSubstr("group_norm normalises over the whole utterance and cannot stream"));
    ConformerEncoder padded(
        ConformerEncoderOptions(kFeatures, ConformerOptions(16, 4, 24, 1, 5).causal_conv(true))
            .subsampling(Subsampling::kDwStriding8));
    padded->eval();
    EXPECT_THAT(error_of([&] {
                  padded->forward_chunk(torch::randn({1, 40, kFeatures}), 0, -1);
                }),
                HasSubstr("subsampling 'dw_striding8' pads its convolutions on both sides"));
  }
}

}  // namespace test_conformer_streaming
}  // namespace attnzoo
