// YAML configs of family conformer: every key read into ConformerEncoderOptions, features and
// streaming; every relation between values reported at its key; the attention backends selected
// from YAML and --set reach the blocks; the analytic size and cost.
#include <attnzoo/configs/model_config.h>
#include <attnzoo/configs/model_stats.h>
#include <attnzoo/configs/registry.h>

#include "config_test_util.h"

#include <torch/torch.h>

namespace attnzoo {
namespace test_conformer_config {

using testing::expect_error;
using testing::expect_override_error;
using ::testing::HasSubstr;
using testing::parse_error;
using testing::with;

// Line and column of every value are relied on below: edit with care.
const char* const kConformer = R"(name: conformer_test
family: conformer
architecture:
  input_dim: 20
  encoder_dim: 16
  num_layers: 2
  num_heads: 4
  ffn_dim: 24
  depthwise_conv_kernel_size: 5
  conv_norm: layer_norm
  convolution_first: true
  causal_conv: true
  subsampling: conv2d6
  subsampling_channels: 8
  position: rel_pos
  global_cmvn: true
  final_norm: false
  vocab_size: 9
  dropout: 0.2
  norm_eps: 1.0e-12
  conv_norm_eps: 1.0e-3
attention:
  backend: math
streaming:
  chunk_size: 4
  num_left_chunks: 2
features:
  kind: fbank
  sample_rate: 8000
  num_mel_bins: 20
  frame_length_ms: 32
  frame_shift_ms: 16
  dither: 0.5
  preemphasis: 0.9
  remove_dc_offset: false
  window: hamming
  snip_edges: false
  energy_floor: 1.0
  low_freq: 40
  high_freq: -400
  int16_scale: false
checkpoint:
  format: wenet
)";

TEST(ConformerConfig, ReadsEveryKey) {
  const auto config = parse_model_config(kConformer, "test.yaml");
  EXPECT_EQ(config.family, "conformer");
  EXPECT_EQ(model_family(config.family).input_kind(), InputKind::kAudioFeatures);
  const auto& o = config.options<ConformerEncoderOptions>();
  EXPECT_EQ(o.input_dim(), 20);
  EXPECT_EQ(o.subsampling(), Subsampling::kConv2d6);
  EXPECT_EQ(o.subsampling_channels(), 8);
  EXPECT_EQ(o.position(), ConformerPosition::kRelPos);
  EXPECT_TRUE(o.global_cmvn());
  EXPECT_FALSE(o.final_norm());
  EXPECT_EQ(o.vocab_size(), 9);
  const auto& b = o.blocks();
  EXPECT_EQ(b.input_dim(), 16);
  EXPECT_EQ(b.num_layers(), 2);
  EXPECT_EQ(b.num_heads(), 4);
  EXPECT_EQ(b.ffn_dim(), 24);
  EXPECT_EQ(b.depthwise_conv_kernel_size(), 5);
  EXPECT_EQ(b.conv_norm(), ConvNormKind::kLayerNorm);
  EXPECT_TRUE(b.convolution_first());
  EXPECT_TRUE(b.causal_conv());
  EXPECT_DOUBLE_EQ(b.dropout(), 0.2);
  EXPECT_DOUBLE_EQ(b.norm_eps(), 1e-12);
  EXPECT_DOUBLE_EQ(b.conv_norm_eps(), 1e-3);
  EXPECT_EQ(b.attention_backend(), "math");
  EXPECT_EQ(config.streaming.chunk_size, 4);
  EXPECT_EQ(config.streaming.num_left_chunks, 2);
  ASSERT_TRUE(config.features.has_value());
  const auto& f = *config.features;
  EXPECT_EQ(f.kind, AudioFeatureKind::kFbank);
  EXPECT_EQ(f.sample_rate, 8000);
  EXPECT_EQ(f.num_mel_bins, 20);
  EXPECT_DOUBLE_EQ(f.frame_length_ms, 32.0);
  EXPECT_DOUBLE_EQ(f.frame_shift_ms, 16.0);
  EXPECT_DOUBLE_EQ(f.dither, 0.5);
  EXPECT_DOUBLE_EQ(f.preemphasis, 0.9);
  EXPECT_FALSE(f.remove_dc_offset);
  EXPECT_EQ(f.window, FrameWindow::kHamming);
  EXPECT_FALSE(f.snip_edges);
  EXPECT_DOUBLE_EQ(f.energy_floor, 1.0);
  EXPECT_DOUBLE_EQ(f.low_freq, 40.0);
  EXPECT_DOUBLE_EQ(f.high_freq, -400.0);
  EXPECT_FALSE(f.int16_scale);
  EXPECT_DOUBLE_EQ(f.frames_per_second(), 62.5);
  EXPECT_EQ(config.checkpoint_format, "wenet");

  // The built model is what the config says.
  torch::manual_seed(0);
  auto model = build_model(config);
  ASSERT_NE(model.module->as<ConformerEncoderImpl>(), nullptr);
  EXPECT_EQ(model.module->as<VisionTransformerImpl>(), nullptr);
  EXPECT_TRUE(model.module->as<ConformerEncoderImpl>()->global_cmvn);
  EXPECT_EQ(model.module->as<ConformerEncoderImpl>()->embed->factor(), 6);
  EXPECT_EQ(model.module->as<ConformerEncoderImpl>()->ctc->weight.sizes(),
            (torch::IntArrayRef{9, 16}));
}

TEST(ConformerConfig, AbsentKeysTakeWenetsLibrispeechConformer) {
  const auto config =
      parse_model_config("name: c\nfamily: conformer\narchitecture: {}\n", "defaults.yaml");
  const auto& o = config.options<ConformerEncoderOptions>();
  EXPECT_EQ(o.input_dim(), 80);
  EXPECT_EQ(o.blocks().input_dim(), 256);
  EXPECT_EQ(o.blocks().num_layers(), 12);
  EXPECT_EQ(o.blocks().num_heads(), 4);
  EXPECT_EQ(o.blocks().ffn_dim(), 2048);
  EXPECT_EQ(o.blocks().depthwise_conv_kernel_size(), 15);
  EXPECT_EQ(o.subsampling(), Subsampling::kConv2d4);
  EXPECT_EQ(o.position(), ConformerPosition::kRelPosWenet);
  EXPECT_EQ(o.blocks().attention_backend(), "auto");
  EXPECT_FALSE(config.features.has_value());  // no features section: features made elsewhere
  EXPECT_EQ(config.streaming.chunk_size, 0);
  EXPECT_TRUE(config.checkpoint_format.empty());
}

TEST(ConformerConfig, RelationsAreReportedAtTheirKeys) {
  expect_error(parse_error(with(kConformer, "num_heads: 4", "num_heads: 3")),
               "architecture.encoder_dim", 5, 16, "encoder_dim 16 is not divisible by num_heads 3");
  expect_override_error(parse_error(kConformer, {"architecture.num_heads=3"}),
                        "architecture.num_heads", "architecture.num_heads=3",
                        "encoder_dim 16 is not divisible by num_heads 3");
  expect_error(parse_error(with(with(kConformer, "encoder_dim: 16", "encoder_dim: 15"),
                                "num_heads: 4", "num_heads: 5")),
               "architecture.encoder_dim", 5, 16,
               "sinusoidal encodings, which need an even encoder_dim");
  expect_error(parse_error(with(kConformer, "subsampling: conv2d6", "subsampling: none")),
               "architecture.input_dim", 4, 14, "input_dim 20 must equal encoder_dim 16");
  expect_override_error(
      parse_error(kConformer, {"architecture.input_dim=10", "features.num_mel_bins=10"}),
      "architecture.input_dim", "architecture.input_dim=10",
      "subsampling conv2d6 leaves no features of input_dim 10");
  expect_override_error(parse_error(kConformer, {"architecture.global_tokens=2"}),
                        "architecture.global_tokens", "architecture.global_tokens=2",
                        "global tokens widen a limited window of relative attention");
  expect_error(parse_error(with(kConformer, "num_mel_bins: 20", "num_mel_bins: 40")),
               "features.num_mel_bins", 30, 17, "must equal architecture.input_dim 20");
  expect_error(parse_error(with(kConformer, "high_freq: -400", "high_freq: 5000")),
               "features.high_freq", 40, 14, "need 0 <= low_freq < high_freq <= sample_rate / 2");
  expect_error(parse_error(with(kConformer, "frame_shift_ms: 16", "frame_shift_ms: 40")),
               "features.frame_shift_ms", 32, 19, "must not exceed frame_length_ms");
  expect_error(parse_error(with(kConformer, "kind: fbank", "kind: mfcc")), "features.kind", 28, 9,
               "expected one of fbank, whisper_log_mel, stft_log_mel");
  // Streaming needs what can stream.
  expect_error(parse_error(with(kConformer, "causal_conv: true", "causal_conv: false")),
               "streaming.chunk_size", 25, 15, "needs architecture.causal_conv: true");
  expect_error(parse_error(with(kConformer, "conv_norm: layer_norm", "conv_norm: group_norm")),
               "streaming.chunk_size", 25, 15, "a conv_norm other than group_norm");
  expect_error(parse_error(kConformer, {"architecture.subsampling=dw_striding8"}),
               "streaming.chunk_size", 25, 15, "a subsampling without padding");
  expect_error(parse_error(kConformer, {"attention.head_gating=true"}), "streaming.chunk_size", 25,
               15, "attention.head_gating: false");
  expect_error(parse_error(with(kConformer, "num_left_chunks: 2", "num_left_chunks: -2")),
               "streaming.num_left_chunks", 26, 20, "expected an integer in [-1, 1048576]");
  // Family-specific values.
  expect_error(parse_error(with(kConformer, "format: wenet", "format: timm")), "checkpoint.format",
               43, 11, "expected one of attnzoo, torchaudio, wenet, espnet, nemo, got 'timm'");
  expect_error(parse_error(std::string(kConformer) + "labels: imagenet\n"), "labels", 44, 9,
               "imagenet labels are for image classifiers");
  expect_error(parse_error(with(kConformer, "position: rel_pos", "position: relative")),
               "architecture.position", 15, 13,
               "expected one of none, abs_pos, rel_pos, rel_pos_wenet");
  expect_error(
      parse_error(with(kConformer, "  vocab_size: 9", "  vocab_size: 9\n  patch_size: 16")),
      "architecture.patch_size", 19, 3, "unknown key 'patch_size'");
}

// ESPnet's STFT log-mel: its own keys (n_fft; librosa's fmin default 0), not fbank's.
TEST(ConformerConfig, StftLogMelFeatures) {
  const std::string stft = R"(name: stft_test
family: conformer
architecture:
  input_dim: 20
  encoder_dim: 16
  num_layers: 1
  num_heads: 4
  ffn_dim: 16
  depthwise_conv_kernel_size: 3
features:
  kind: stft_log_mel
  num_mel_bins: 20
  frame_length_ms: 25
  frame_shift_ms: 10
  n_fft: 512
)";
  const auto config = parse_model_config(stft, "stft.yaml");
  ASSERT_TRUE(config.features.has_value());
  EXPECT_EQ(config.features->kind, AudioFeatureKind::kStftLogMel);
  EXPECT_EQ(config.features->n_fft, 512);
  EXPECT_EQ(config.features->low_freq, 0.0);
  EXPECT_EQ(config.features->high_freq, 0.0);
  expect_error(parse_error(with(stft, "n_fft: 512", "n_fft: 256")), "features.n_fft", 15, 10,
               "n_fft 256 is shorter than the 400-sample window of frame_length_ms");
  expect_error(parse_error(with(stft, "n_fft: 512", "dither: 1.0")), "features.dither", 15, 3,
               "unknown key");
}

// NeMo's log-mel: AudioToMelSpectrogramPreprocessor's defaults (20 ms, hanning, per_feature, no
// low cut) and keys; a choice NeMo lacks, or exact_pad with an odd hop, is refused at its key.
// architecture.transducer (NeMo's RNN-T and TDT heads), ctc_head and decoding.head.
TEST(ConformerConfig, TransducerHeads) {
  const std::string tdt = R"(name: t
family: conformer
architecture:
  input_dim: 20
  encoder_dim: 16
  num_heads: 4
  num_layers: 1
  vocab_size: 6
  ctc_head: false
  transducer:
    pred_hidden: 12
    pred_layers: 2
    joint_hidden: 10
    activation: tanh
    durations: [0, 1, 2]
decoding:
  tokens: [a, b, c, d, e, <blank>]
)";
  const auto config = parse_model_config(tdt, "t.yaml");
  const auto& o = config.options<ConformerEncoderOptions>();
  ASSERT_TRUE(o.transducer().has_value());
  EXPECT_FALSE(o.ctc_head());
  EXPECT_EQ(o.transducer()->vocab_size(), 6);
  EXPECT_EQ(o.transducer()->encoder_dim(), 16);
  EXPECT_EQ(o.transducer()->pred_layers(), 2);
  EXPECT_EQ(o.transducer()->activation(), "tanh");
  EXPECT_EQ(o.transducer()->durations(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(config.decoding.head, decoding::DecodingHead::kTransducer);
  EXPECT_EQ(model_family("conformer").ctc_vocab(config), 0);
  EXPECT_EQ(model_family("conformer").token_vocab(config), 6);
  // The built model: no CTC Linear, the transducer with its TDT outputs; its parameters are the
  // ones model_stats counts.
  torch::manual_seed(0);
  auto model = build_model(config);
  auto* encoder = model.module->as<ConformerEncoderImpl>();
  ASSERT_NE(encoder, nullptr);
  EXPECT_TRUE(encoder->ctc.is_empty());
  EXPECT_EQ(encoder->transducer->out->weight.sizes(), (torch::IntArrayRef{6 + 3, 10}));
  int64_t parameters = 0;
  for (const auto& p : model.module->parameters()) parameters += p.numel();
  EXPECT_EQ(model_family("conformer").stats(config).parameters, parameters);

  expect_error(parse_error(with(tdt, "durations: [0, 1, 2]", "durations: [3]")),
               "architecture.transducer.durations", 15, 16, "at least two durations");
  expect_error(parse_error(with(tdt, "activation: tanh", "activation: gelu")),
               "architecture.transducer.activation", 14, 17, "expected one of relu, sigmoid, tanh");
  EXPECT_THAT(parse_error(with(tdt, "vocab_size: 6", "vocab_size: 0")).what(),
              HasSubstr("a transducer predicts tokens and the blank"));
  EXPECT_THAT(parse_error(tdt, {"decoding.head=ctc"}).what(), HasSubstr("no CTC head"));
}

TEST(ConformerConfig, NemoMelFeatures) {
  const std::string nemo = R"(name: nemo_test
family: conformer
architecture:
  input_dim: 80
  encoder_dim: 16
  num_layers: 1
  num_heads: 4
  ffn_dim: 16
  depthwise_conv_kernel_size: 3
features:
  kind: nemo_mel
  num_mel_bins: 80
)";
  const auto defaults = parse_model_config(nemo, "nemo.yaml");
  ASSERT_TRUE(defaults.features.has_value());
  const auto& d = *defaults.features;
  EXPECT_EQ(d.kind, AudioFeatureKind::kNemoMel);
  EXPECT_EQ(d.frame_length_ms, 20.0);
  EXPECT_EQ(d.frame_shift_ms, 10.0);
  EXPECT_EQ(d.window, FrameWindow::kHanning);
  EXPECT_EQ(d.normalize, FeatureNormalize::kPerFeature);
  EXPECT_EQ(d.preemphasis, 0.97);
  EXPECT_EQ(d.low_freq, 0.0);
  EXPECT_EQ(d.mel_norm, MelNorm::kSlaney);
  EXPECT_EQ(d.log_guard, LogGuard::kAdd);
  EXPECT_EQ(d.log_guard_value, 0x1p-24);
  EXPECT_FALSE(d.exact_pad);
  const std::string keys = R"(  num_mel_bins: 80
  frame_length_ms: 25
  window: bartlett
  n_fft: 400
  preemphasis: 0.0
  low_freq: 60
  high_freq: 7600
  mel_norm: none
  mag_power: 1.0
  log: false
  log_guard: clamp
  log_guard_value: 1.0e-10
  normalize: all_features
  exact_pad: true
)";
  const auto config = parse_model_config(with(nemo, "  num_mel_bins: 80\n", keys), "nemo.yaml");
  const auto& f = *config.features;
  EXPECT_EQ(f.frame_length_ms, 25.0);
  EXPECT_EQ(f.window, FrameWindow::kBartlett);
  EXPECT_EQ(f.n_fft, 400);
  EXPECT_EQ(f.preemphasis, 0.0);
  EXPECT_EQ(f.low_freq, 60.0);
  EXPECT_EQ(f.high_freq, 7600.0);
  EXPECT_EQ(f.mel_norm, MelNorm::kNone);
  EXPECT_EQ(f.mag_power, 1.0);
  EXPECT_FALSE(f.log);
  EXPECT_EQ(f.log_guard, LogGuard::kClamp);
  EXPECT_EQ(f.log_guard_value, 1e-10);
  EXPECT_EQ(f.normalize, FeatureNormalize::kAllFeatures);
  EXPECT_TRUE(f.exact_pad);
  expect_error(parse_error(with(nemo, "num_mel_bins: 80", "num_mel_bins: 80\n  window: povey")),
               "features.window", 13, 11, "bartlett");
  expect_error(
      parse_error(with(nemo, "num_mel_bins: 80", "num_mel_bins: 80\n  normalize: fixed_mean")),
      "features.normalize", 13, 14, "per_feature");
  expect_error(parse_error(with(nemo, "num_mel_bins: 80",
                                "num_mel_bins: 80\n  exact_pad: true\n  frame_shift_ms: 10.0625")),
               "features.exact_pad", 13, 14, "exact_pad needs an even hop");
  expect_error(parse_error(with(nemo, "num_mel_bins: 80", "num_mel_bins: 80\n  dither: 1.0e-5")),
               "features.dither", 13, 3, "unknown key");
}

// Every attention backend, chosen in YAML or with --set, reach every block of
// a Conformer (relative positions arrive as the attention's bias, which every backend takes).
TEST(ConformerConfig, AttentionBackendsFromYamlAndOverridesReachTheBlocks) {
  const std::vector<std::string> offline = {"streaming.chunk_size=0"};
  const auto reference_config = parse_model_config(kConformer, "t.yaml", offline);
  torch::manual_seed(0);
  auto reference = build_model(reference_config);
  reference.module->eval();
  const auto features = torch::randn({2, 60, 20});
  const auto lengths = torch::tensor({60, 41});
  torch::NoGradGuard no_grad;
  const auto expected =
      std::get<0>(reference.module->as<ConformerEncoderImpl>()->forward(features, lengths));
  const auto run = [&](const std::vector<std::string>& overrides) {
    auto all = offline;
    all.insert(all.end(), overrides.begin(), overrides.end());
    const auto config = parse_model_config(kConformer, "t.yaml", all);
    torch::manual_seed(0);
    auto model = build_model(config);
    model.module->eval();
    for (const auto& layer : *model.module->as<ConformerEncoderImpl>()->conformer->layers) {
      const auto* block = layer->as<ConformerBlockImpl>();
      EXPECT_EQ(block->attn->mha->options.backend(),
                config.options<ConformerEncoderOptions>().blocks().attention_backend());
    }
    return std::get<0>(model.module->as<ConformerEncoderImpl>()->forward(features, lengths));
  };
  const auto valid = [&](const torch::Tensor& t) {
    return torch::cat({t[0], t[1].narrow(0, 0, 5)});  // 41 frames -> 5 after x6
  };
  for (const auto& exact : std::vector<std::vector<std::string>>{
           {"attention.backend=chunked", "attention.chunk_size=3"},
           {"attention.backend=sdpa"},
           {"attention.backend=block_local", "attention.block_size=64"}}) {
    EXPECT_LE((valid(run(exact)) - valid(expected)).abs().max().item<double>(), 1e-5) << exact[0];
  }
  // Linear attention approximates softmax attention and takes no additive bias: with absolute
  // positions it runs (another output, still finite); relative positions are refused up front.
  const auto linear = run({"attention.backend=linear", "architecture.position=abs_pos"});
  EXPECT_TRUE(torch::isfinite(linear).all().item<bool>());
  EXPECT_GT((valid(linear) - valid(expected)).abs().max().item<double>(), 1e-3);
  expect_override_error(parse_error(kConformer, {"attention.backend=linear"}), "attention.backend",
                        "attention.backend=linear",
                        "linear attention cannot add the relative-position bias of position "
                        "rel_pos; use position abs_pos or none");
  // Head gating: a gate per block, uniform at initialisation (the output unchanged).
  const auto gated_config = parse_model_config(
      kConformer, "t.yaml", {"streaming.chunk_size=0", "attention.head_gating=true"});
  torch::manual_seed(0);
  auto gated = build_model(gated_config);
  gated.module->eval();
  int64_t gates = 0;
  for (const auto& item : gated.module->named_parameters()) {
    gates += item.key().find("head_gate") != std::string::npos;
  }
  EXPECT_EQ(gates, 2 * 2);  // weight and bias in each of 2 blocks
  EXPECT_EQ(model_stats(gated_config).parameters,
            model_stats(reference_config).parameters + 2 * (16 * 4 + 4));
}

int64_t built_parameters(const ConformerEncoderOptions& options) {
  ConformerEncoder model(options);
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  return n;
}

TEST(ConformerStats, ParameterCountEqualsTheBuiltModelForEveryLayoutOption) {
  const auto base = [] { return ConformerEncoderOptions(40, ConformerOptions(16, 4, 24, 2, 5)); };
  const std::vector<std::pair<std::string, ConformerEncoderOptions>> cases = {
      {"wenet defaults", base()},
      {"conv2d6", base().subsampling(Subsampling::kConv2d6)},
      {"conv2d8", base().subsampling(Subsampling::kConv2d8)},
      {"dw_striding8 with 8 channels",
       base().subsampling(Subsampling::kDwStriding8).subsampling_channels(8)},
      {"no subsampling", ConformerEncoderOptions(16, ConformerOptions(16, 4, 24, 2, 5))
                             .subsampling(Subsampling::kNone)},
      {"rel_pos", base().position(ConformerPosition::kRelPos)},
      {"abs_pos", base().position(ConformerPosition::kAbsPos)},
      {"no positions", base().position(ConformerPosition::kNone)},
      {"cmvn, ctc, no final norm", base().global_cmvn(true).vocab_size(11).final_norm(false)},
      {"group_norm",
       ConformerEncoderOptions(
           40, ConformerOptions(16, 4, 24, 2, 5).conv_norm(ConvNormKind::kGroupNorm))},
      {"head gating",
       ConformerEncoderOptions(40, ConformerOptions(16, 4, 24, 3, 4).head_gating(true))},
      {"vggnet4", base().subsampling(Subsampling::kVggnet4).subsampling_channels(6)},
      {"vggnet8", base().subsampling(Subsampling::kVggnet8).subsampling_channels(6)},
      {"global tokens",
       ConformerEncoderOptions(
           40,
           ConformerOptions(16, 4, 24, 2, 5).attention_left(3).attention_right(3).global_tokens(2))
           .position(ConformerPosition::kRelPos)},
      {"global tokens with projections of their own, no biases",
       ConformerEncoderOptions(40, ConformerOptions(16, 4, 24, 2, 5)
                                       .attention_left(3)
                                       .attention_right(3)
                                       .global_tokens(2)
                                       .global_separate(true)
                                       .bias(false))
           .position(ConformerPosition::kRelPos)},
  };
  for (const auto& [name, options] : cases) {
    EXPECT_EQ(conformer_parameter_count(options), built_parameters(options)) << name;
  }
}

TEST(ConformerStats, MacsFollowTheConvention) {
  // No subsampling, no positions, no head: only the blocks. T = 10, D = 8, ffn 12, kernel 3.
  const auto plain = ConformerEncoderOptions(8, ConformerOptions(8, 2, 12, 1, 3))
                         .subsampling(Subsampling::kNone)
                         .position(ConformerPosition::kNone);
  const int64_t t = 10, d = 8;
  const int64_t block =
      2 * 2 * t * d * 12 + 4 * t * d * d + 2 * t * t * d + (t * d * 2 * d + t * d * 3 + t * d * d);
  EXPECT_EQ(conformer_macs(plain, t), block);
  // rel_pos adds linear_pos over 2T − 1 positions, (q + v)·p and u·k; WeNet's over T positions.
  EXPECT_EQ(conformer_macs(ConformerEncoderOptions(plain).position(ConformerPosition::kRelPos), t) -
                block,
            19 * d * d + t * 19 * d + t * d);
  EXPECT_EQ(
      conformer_macs(ConformerEncoderOptions(plain).position(ConformerPosition::kRelPosWenet), t) -
          block,
      t * d * d + t * t * d + t * d);
  // A window of one frame on each side: 3 keys per frame instead of T.
  auto windowed = ConformerOptions(8, 2, 12, 1, 3).attention_left(1).attention_right(1);
  EXPECT_EQ(conformer_macs(ConformerEncoderOptions(plain).blocks(windowed), t) - block,
            2 * t * 3 * d - 2 * t * t * d);
  // rel_pos within it: (q + v)·p over the 3 keys; global tokens (2 of them, every 4 frames, with
  // projections of their own): each frame with them, their own rows, and their q, k, v.
  const auto relative = ConformerEncoderOptions(plain).position(ConformerPosition::kRelPos);
  const int64_t windowed_relative =
      conformer_macs(ConformerEncoderOptions(relative).blocks(windowed), t);
  EXPECT_EQ(windowed_relative - block,
            2 * t * 3 * d - 2 * t * t * d + 19 * d * d + t * 3 * d + t * d);
  EXPECT_EQ(
      conformer_macs(
          ConformerEncoderOptions(relative).blocks(
              ConformerOptions(windowed).global_tokens(2).global_spacing(4).global_separate(true)),
          t) -
          windowed_relative,
      2 * t * 2 * d + 2 * 2 * t * d + 3 * t * d * d);
  // The CTC head: T' · D · vocab.
  EXPECT_EQ(conformer_macs(ConformerEncoderOptions(plain).vocab_size(5), t) - block, t * d * 5);
  // conv2d4 on 100 frames of 40 features, 8 channels: 49 x 19 then 24 x 9 outputs.
  const auto sub = ConformerEncoderOptions(40, ConformerOptions(8, 2, 12, 0, 3))
                       .subsampling(Subsampling::kConv2d4)
                       .position(ConformerPosition::kNone);
  EXPECT_EQ(conformer_macs(sub, 100), 49 * 19 * 8 * 9 + 24 * 9 * 8 * 8 * 9 + 24 * 8 * 9 * 8);
}

}  // namespace test_conformer_config
}  // namespace attnzoo
