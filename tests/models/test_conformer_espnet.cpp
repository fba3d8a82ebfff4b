// ESPnet's own Conformer encoder (the pinned `espnet` package, make_espnet_reference.py) as the
// reference for the relative-position Conformer ("latest" rel_pos: 2T − 1 positions and
// rel_shift), and its checkpoint layouts: an ESPnet2 ASR model's state_dict and a bare encoder's.
#include <attnzoo/models/checkpoint.h>
#include <attnzoo/models/conformer.h>
#include <attnzoo/models/conformer_checkpoint.h>
#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <set>
#include <string>

namespace attnzoo {
namespace test_conformer_espnet {
using testing::max_abs_diff;

// Sizes shared with make_espnet_reference.py; ESPnet's LayerNorm eps is 1e-12, its BatchNorm's
// torch's default 1e-5.
ConformerEncoderOptions espnet_fixture_options() {
  return ConformerEncoderOptions(20, ConformerOptions(16, 4, 32, 2, 5).norm_eps(1e-12))
      .subsampling(Subsampling::kConv2d4)
      .position(ConformerPosition::kRelPos)
      .global_cmvn(true)
      .final_norm(true)
      .vocab_size(7);
}

std::string reference_dir() { return ATTNZOO_MODELS_REFERENCE_DIR; }

TEST(ConformerEncoder, EspnetModelLoadsAndMatchesEspnetOnValidFrames) {
  const auto weights =
      io::load_safetensors(reference_dir() + "/espnet_conformer.weights.safetensors");
  const auto ref = io::load_safetensors(reference_dir() + "/espnet_conformer.io.safetensors");
  EXPECT_EQ(detect_conformer_format(weights.tensors), ConformerCheckpointFormat::kEspnet);
  const auto mapped = to_conformer_layout(weights.tensors, ConformerCheckpointFormat::kEspnet);
  EXPECT_EQ(mapped.ignored, (std::set<std::string>{"decoder.embed.0.weight"}));
  ConformerEncoder model(espnet_fixture_options());
  load_state_dict(*model, mapped.tensors, {{}, {}, "espnet"});  // strict
  EXPECT_TRUE(torch::allclose(model->global_cmvn->istd,
                              weights.tensors["normalize.std"].reciprocal(), 0.0, 0.0));
  model->eval();
  torch::NoGradGuard no_grad;
  const auto x = ref.tensors["input"];
  const auto lengths = ref.tensors["lengths"];
  const auto [encoded, out_lengths] = model(x, lengths);
  const auto log_probs = model->ctc_log_probs(encoded);
  double worst = 0.0;
  for (int64_t b = 0; b < x.size(0); ++b) {
    SCOPED_TRACE("utterance " + std::to_string(b));
    const auto single = ref.tensors["single_" + std::to_string(b)];
    ASSERT_EQ(out_lengths[b].item<int64_t>(), single.size(1));
    const auto valid = [&](const torch::Tensor& t) {
      return t.narrow(0, b, 1).narrow(1, 0, single.size(1));
    };
    EXPECT_LE(max_abs_diff(valid(encoded), single), 1e-4);
    EXPECT_LE(max_abs_diff(valid(log_probs), ref.tensors["ctc_" + std::to_string(b)]), 1e-4);
    worst = std::max(worst, max_abs_diff(valid(encoded), single));
  }
  std::cout << "max |ours - ESPnet| on valid frames: " << worst << "\n";
  // The positions matter: WeNet's variant on the same weights is another model.
  ConformerEncoder wenet_style(espnet_fixture_options().position(ConformerPosition::kRelPosWenet));
  load_state_dict(*wenet_style, mapped.tensors, {{}, {}, "espnet"});
  wenet_style->eval();
  const auto single0 = ref.tensors["single_0"];
  const auto other = std::get<0>(wenet_style(x.narrow(0, 0, 1), lengths.narrow(0, 0, 1)));
  EXPECT_GT(max_abs_diff(other.narrow(1, 0, single0.size(1)), single0), 1e-3);
}

TEST(ConformerEncoder, BareEspnetEncoderStateDictLoadsTheSameWeights) {
  const auto model_weights =
      io::load_safetensors(reference_dir() + "/espnet_conformer.weights.safetensors");
  const auto bare = io::load_safetensors(reference_dir() + "/espnet_encoder.weights.safetensors");
  EXPECT_EQ(detect_conformer_format(bare.tensors), ConformerCheckpointFormat::kWenet);
  ConformerEncoder from_model(espnet_fixture_options());
  load_state_dict(
      *from_model,
      to_conformer_layout(model_weights.tensors, ConformerCheckpointFormat::kEspnet).tensors,
      {{}, {}, "espnet"});
  // The bare encoder has no CMVN statistics and no CTC head.
  ConformerEncoder from_bare(espnet_fixture_options().global_cmvn(false).vocab_size(0));
  load_state_dict(*from_bare,
                  to_conformer_layout(bare.tensors, ConformerCheckpointFormat::kEspnet).tensors,
                  {{}, {}, "espnet"});
  const auto expected = from_model->named_parameters();
  for (const auto& item : from_bare->named_parameters()) {
    ASSERT_TRUE(expected.contains(item.key())) << item.key();
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()])) << item.key();
  }
}

}  // namespace test_conformer_espnet
}  // namespace attnzoo
