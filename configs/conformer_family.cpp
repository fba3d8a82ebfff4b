// The family conformer: the Conformer encoder (models/conformer.h) on audio features, with the
// checkpoint layouts of attnzoo, torchaudio, WeNet and ESPnet.
#include <attnzoo/configs/config_sections.h>
#include <attnzoo/configs/families.h>
#include <attnzoo/io/cmvn_stats.h>
#include <attnzoo/layers/attention_mask.h>
#include <attnzoo/models/checkpoint.h>
#include <attnzoo/models/conformer.h>
#include <attnzoo/models/conformer_checkpoint.h>
#include <attnzoo/models/conformer_frontend.h>

#include <torch/torch.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace attnzoo {
namespace {

using namespace detail;

// `architecture:` of family conformer: ConformerEncoderOptions and its blocks' ConformerOptions.
// Absent keys take WeNet's LibriSpeech conformer (80 fbank, 256 wide, 12 blocks, 4 heads, 2048
// feed-forward units, kernel 15, conv2d x4, WeNet's relative positions).
// `architecture.decoder:` (models/attention_decoder.h), WeNet's decoder_conf in our names:
// kind transformer (U2) or bitransformer (U2++, with right_blocks), over the encoder's width and
// the CTC head's vocabulary.
AttentionDecoderOptions read_attention_decoder(MapReader decoder,
                                               const ConformerEncoderOptions& encoder) {
  const auto kind = decoder.choice("kind", std::nullopt, {"transformer", "bitransformer"});
  AttentionDecoderOptions d(encoder.vocab_size(), encoder.blocks().input_dim());
  d.num_heads(decoder.integer("num_heads", d.num_heads(), 1, kMaxHeads));
  d.ffn_dim(decoder.integer("ffn_dim", d.ffn_dim(), 1, 8 * kMaxEmbedDim));
  d.num_blocks(decoder.integer("num_blocks", d.num_blocks(), 1, kMaxDepth));
  if (kind == "bitransformer") {
    d.right_blocks(decoder.integer("right_blocks", std::nullopt, 1, kMaxDepth));
  } else if (decoder.has("right_blocks")) {
    decoder.fail("right_blocks", "a right-to-left decoder goes with kind: bitransformer");
  }
  d.dropout(decoder.number("dropout", d.dropout(), 0.0, kBelowOne));
  d.positional_dropout(
      decoder.number("positional_dropout", d.positional_dropout(), 0.0, kBelowOne));
  d.self_attention_dropout(
      decoder.number("self_attention_dropout", d.self_attention_dropout(), 0.0, kBelowOne));
  d.src_attention_dropout(
      decoder.number("src_attention_dropout", d.src_attention_dropout(), 0.0, kBelowOne));
  decoder.finish();
  if (encoder.vocab_size() < 2) {
    decoder.fail_here(
        "an attention decoder predicts the CTC head's tokens: it needs "
        "architecture.vocab_size >= 2 (<sos/eos> is the last token)");
  }
  if (d.dim() % d.num_heads() != 0) {
    decoder.fail("num_heads", "the decoder's width is encoder_dim " + std::to_string(d.dim()) +
                                  ", which is not divisible by num_heads " +
                                  std::to_string(d.num_heads()));
  }
  if (d.dim() % 2 != 0) {
    decoder.fail_here("the decoder's sinusoidal positions need an even encoder_dim, got " +
                      std::to_string(d.dim()));
  }
  return d;
}

// `architecture.transducer:` (models/transducer.h), NeMo's RNNTDecoder and RNNTJoint in our
// names, over the model's vocab_size.
TransducerOptions read_transducer(MapReader transducer, const ConformerEncoderOptions& o) {
  TransducerOptions t(o.vocab_size(), o.blocks().input_dim());
  t.pred_hidden(transducer.integer("pred_hidden", t.pred_hidden(), 1, kMaxEmbedDim));
  t.pred_layers(transducer.integer("pred_layers", t.pred_layers(), 1, kMaxDepth));
  t.joint_hidden(transducer.integer("joint_hidden", t.joint_hidden(), 1, kMaxEmbedDim));
  t.activation(transducer.choice("activation", t.activation(), {"relu", "sigmoid", "tanh"}));
  if (transducer.has("durations")) {
    t.durations(*transducer.integer_list("durations", 0, 0, kMaxDepth));
    if (t.durations().size() < 2) {
      transducer.fail("durations", "a TDT joint has at least two durations");
    }
  }
  transducer.finish();
  if (o.vocab_size() < 2) {
    transducer.fail_here(
        "a transducer predicts tokens and the blank: it needs "
        "architecture.vocab_size >= 2");
  }
  return t;
}

ConformerEncoderOptions read_conformer_architecture(MapReader arch) {
  ConformerOptions blocks(256, 4, 2048, 12, 15);
  const int64_t input_dim = arch.integer("input_dim", 80, 1, kMaxFeatures);
  blocks.input_dim(arch.integer("encoder_dim", blocks.input_dim(), 1, kMaxEmbedDim));
  blocks.num_layers(arch.integer("num_layers", blocks.num_layers(), 1, kMaxDepth));
  blocks.num_heads(arch.integer("num_heads", blocks.num_heads(), 1, kMaxHeads));
  blocks.ffn_dim(arch.integer("ffn_dim", blocks.ffn_dim(), 1, 8 * kMaxEmbedDim));
  blocks.depthwise_conv_kernel_size(arch.integer(
      "depthwise_conv_kernel_size", blocks.depthwise_conv_kernel_size(), 1, kMaxKernel));
  blocks.conv_norm(arch.enumeration(
      "conv_norm", blocks.conv_norm(),
      {ConvNormKind::kBatchNorm, ConvNormKind::kGroupNorm, ConvNormKind::kLayerNorm}));
  blocks.convolution_first(arch.boolean("convolution_first", blocks.convolution_first()));
  blocks.causal_conv(arch.boolean("causal_conv", blocks.causal_conv()));
  blocks.causal_padding(
      arch.enumeration("causal_padding", blocks.causal_padding(),
                       {CausalPadding::kModuleInput, CausalPadding::kDepthwiseInput}));
  blocks.dropout(arch.number("dropout", blocks.dropout(), 0.0, kBelowOne));
  blocks.norm_eps(arch.number("norm_eps", blocks.norm_eps(), 0.0, 1.0, true));
  blocks.conv_norm_eps(arch.number("conv_norm_eps", blocks.conv_norm_eps(), 0.0, 1.0, true));
  blocks.bias(arch.boolean("bias", blocks.bias()));
  blocks.attention_left(arch.integer("attention_left", blocks.attention_left(), -1, kMaxChunk));
  blocks.attention_right(arch.integer("attention_right", blocks.attention_right(), -1, kMaxChunk));
  blocks.global_tokens(arch.integer("global_tokens", blocks.global_tokens(), 0, kMaxChunk));
  blocks.global_spacing(
      arch.integer("global_tokens_spacing", blocks.global_spacing(), 1, kMaxChunk));
  blocks.global_separate(arch.boolean("global_attention_separate", blocks.global_separate()));
  ConformerEncoderOptions o(input_dim, blocks);
  o.subsampling(arch.enumeration(
      "subsampling", o.subsampling(),
      {Subsampling::kNone, Subsampling::kConv2d4, Subsampling::kConv2d6, Subsampling::kConv2d8,
       Subsampling::kDwStriding4, Subsampling::kDwStriding8, Subsampling::kStriding4,
       Subsampling::kStriding8, Subsampling::kCausalDwStriding4, Subsampling::kCausalDwStriding8,
       Subsampling::kCausalStriding4, Subsampling::kCausalStriding8, Subsampling::kVggnet4,
       Subsampling::kVggnet8}));
  o.subsampling_channels(
      arch.integer("subsampling_channels", o.subsampling_channels(), 0, kMaxEmbedDim));
  o.position(arch.enumeration("position", o.position(),
                              {ConformerPosition::kNone, ConformerPosition::kAbsPos,
                               ConformerPosition::kRelPos, ConformerPosition::kRelPosWenet}));
  o.xscaling(arch.boolean("xscaling", o.xscaling()));
  o.global_cmvn(arch.boolean("global_cmvn", o.global_cmvn()));
  o.final_norm(arch.boolean("final_norm", o.final_norm()));
  o.vocab_size(arch.integer("vocab_size", o.vocab_size(), 0, kMaxClasses));
  o.num_classes(arch.integer("num_classes", o.num_classes(), 0, kMaxClasses));
  o.ctc_head(arch.boolean("ctc_head", o.ctc_head()));
  if (arch.has("decoder")) o.decoder(read_attention_decoder(arch.map("decoder", true), o));
  if (arch.has("transducer")) o.transducer(read_transducer(arch.map("transducer", true), o));
  arch.finish();

  // Relations between values, checked once every value is known to be well-formed, reported at
  // MapReader::relation_key.
  const int64_t d = blocks.input_dim();
  if (d % blocks.num_heads() != 0) {
    arch.fail(arch.relation_key("encoder_dim", "num_heads"),
              "encoder_dim " + std::to_string(d) + " is not divisible by num_heads " +
                  std::to_string(blocks.num_heads()) +
                  " (each head takes encoder_dim / num_heads)");
  }
  if (o.position() != ConformerPosition::kNone && d % 2 != 0) {
    arch.fail(arch.relation_key("encoder_dim", "position"),
              "position " + std::string(to_string(o.position())) +
                  " uses sinusoidal encodings, which need an even "
                  "encoder_dim; got " +
                  std::to_string(d));
  }
  if (blocks.global_tokens() > 0 &&
      (blocks.attention_left() < 0 || blocks.attention_right() < 0 ||
       o.position() == ConformerPosition::kNone || o.position() == ConformerPosition::kAbsPos)) {
    arch.fail(arch.relation_key("global_tokens", "attention_left"),
              "global tokens widen a limited window of relative attention (Longformer): they need "
              "attention_left and attention_right >= 0 and position rel_pos or rel_pos_wenet");
  }
  if (o.subsampling() == Subsampling::kNone && input_dim != d) {
    arch.fail(arch.relation_key("input_dim", "subsampling"),
              "without subsampling the features go straight to the blocks: input_dim " +
                  std::to_string(input_dim) + " must equal encoder_dim " + std::to_string(d));
  }
  if (o.subsampling() != Subsampling::kNone &&
      subsampled_length(conformer_subsampling_steps(o.subsampling()), input_dim) < 1) {
    arch.fail(arch.relation_key("input_dim", "subsampling"),
              "subsampling " + std::string(to_string(o.subsampling())) +
                  " leaves no features of input_dim " + std::to_string(input_dim) +
                  "; it needs more feature bins");
  }
  return o;
}

// `streaming:` (StreamingConfig), checked against what can stream.
StreamingConfig read_streaming(MapReader streaming, const ConformerEncoderOptions& model,
                               bool head_gating) {
  StreamingConfig s;
  s.chunk_size = streaming.integer("chunk_size", s.chunk_size, 0, kMaxChunk);
  s.num_left_chunks = streaming.integer("num_left_chunks", s.num_left_chunks, -1, kMaxChunk);
  streaming.finish();
  if (s.chunk_size == 0) return s;
  std::string why;
  if (!model.blocks().causal_conv()) {
    why = "architecture.causal_conv: true (a centred kernel reads frames not yet arrived)";
  } else if (model.blocks().conv_norm() == ConvNormKind::kGroupNorm) {
    why = "a conv_norm other than group_norm (it normalises over the whole utterance)";
  } else if (!subsampling_streams(model.subsampling())) {
    why =
        "a subsampling without padding (none, conv2d4, conv2d6, conv2d8) or a causal one "
        "(causal_dw_striding4/8, causal_striding4/8)";
  } else if (model.blocks().attention_left() >= 0 || model.blocks().attention_right() >= 0) {
    why = "no architecture.attention_left/right (a limited context is not a chunk mask)";
  } else if (head_gating) {
    why = "attention.head_gating: false (the gates pool the whole utterance)";
  }
  if (!why.empty()) streaming.fail("chunk_size", "streaming (chunk_size > 0) needs " + why);
  return s;
}

ConformerEncoderImpl& encoder_module(torch::nn::Module& module) {
  auto* encoder = module.as<ConformerEncoderImpl>();
  TORCH_CHECK(encoder, "family conformer: the module is not a ConformerEncoder");
  return *encoder;
}

// checkpoint.cmvn_file's statistics into the encoder's global CMVN.
void load_cmvn_file(ConformerEncoderImpl& encoder, const std::string& file) {
  const auto stats = io::load_cmvn_stats(file);
  const auto features = encoder.global_cmvn->num_features;
  if (static_cast<int64_t>(stats.mean.size()) != features) {
    throw CheckpointError(file + ": CMVN statistics of " + std::to_string(stats.mean.size()) +
                          " features; the model takes " + std::to_string(features) +
                          " (architecture.input_dim)");
  }
  torch::NoGradGuard no_grad;
  encoder.global_cmvn->mean.copy_(torch::tensor(stats.mean, torch::kDouble));
  encoder.global_cmvn->istd.copy_(torch::tensor(stats.istd, torch::kDouble));
}

// The encoder's output frames for `frames` input frames.
int64_t encoder_frames(const ConformerEncoderOptions& o, int64_t frames) {
  if (o.subsampling() == Subsampling::kNone) return frames;
  return subsampled_length(conformer_subsampling_steps(o.subsampling()), frames);
}

class ConformerFamily final : public ModelFamily {
 public:
  const std::string& name() const override { return name_; }
  InputKind input_kind() const override { return InputKind::kAudioFeatures; }
  std::vector<std::string> checkpoint_formats() const override {
    return {"attnzoo", "torchaudio", "wenet", "espnet", "nemo"};
  }

  void read(MapReader& root, ModelConfig& config) const override {
    auto o = read_conformer_architecture(root.map("architecture", true));
    auto attention_map = root.map("attention", false);
    const auto attention = read_attention(attention_map);
    if (attention.backend == "linear" && is_relative(o.position())) {
      attention_map.fail(
          "backend", "linear attention cannot add the relative-position bias of position " +
                         std::string(to_string(o.position())) + "; use position abs_pos or none");
    }
    o.blocks()
        .attention_backend(attention.backend)
        .attention_options(attention.options)
        .head_gating(attention.head_gating);
    config.features = read_audio_features(root, o.input_dim(), "architecture.input_dim");
    config.streaming = read_streaming(root.map("streaming", false), o, attention.head_gating);
    SpeechHeads heads;
    heads.vocab = o.vocab_size();
    heads.ctc = o.vocab_size() > 0 && o.ctc_head();
    heads.transducer = o.transducer().has_value();
    heads.decoder_directions = !o.decoder() ? 0 : o.decoder()->right_blocks() > 0 ? 2 : 1;
    config.decoding = read_decoding(root, config.source, heads);
    if (root.has("checkpoint")) {
      read_checkpoint(root.map("checkpoint", true), checkpoint_formats(), config, o.global_cmvn());
    }
    config.architecture = std::move(o);
  }

  std::shared_ptr<torch::nn::Module> build(const ModelConfig& config) const override {
    ConformerEncoder encoder(config.options<ConformerEncoderOptions>());
    if (!config.cmvn_file.empty()) load_cmvn_file(*encoder, config.cmvn_file);
    return encoder.ptr();
  }

  LoadedWeights load_weights(torch::nn::Module& module, ModelConfig& config,
                             const io::TensorDict& tensors, const std::string& format,
                             const std::string& source) const override {
    const auto layout =
        format.empty() ? detect_conformer_format(tensors) : parse_conformer_format(format);
    auto mapped = [&] {
      try {
        return to_conformer_layout(tensors, layout);
      } catch (const CheckpointError& e) {
        throw CheckpointError(source + ": " + e.what());
      }
    }();
    if (layout == ConformerCheckpointFormat::kTorchaudio) {
      // torchaudio's Conformer is the block stack: the encoder's `conformer` submodule.
      io::TensorDict prefixed;
      for (const auto& item : mapped.tensors) {
        prefixed.insert("conformer." + item.key(), item.value());
      }
      mapped.tensors = std::move(prefixed);
    }
    LoadOptions options;
    options.ignore = mapped.ignored;
    options.source = source;
    // A WeNet checkpoint's attention decoder, or a NeMo hybrid's transducer, for a model built
    // without one (CTC decoding).
    for (const auto& [prefix, absent] :
         {std::pair{"decoder.", encoder_module(module).decoder.is_empty()},
          std::pair{"transducer.", encoder_module(module).transducer.is_empty()}}) {
      if (!absent) continue;
      for (const auto& item : mapped.tensors) {
        if (item.key().rfind(prefix, 0) == 0) options.ignore.insert(item.key());
      }
    }
    // Statistics from checkpoint.cmvn_file (set when the model was built) stand where the
    // checkpoint has none, and give way to the checkpoint's own, as in WeNet and ESPnet.
    std::vector<std::string> notes;
    auto& encoder = encoder_module(module);
    if (!config.cmvn_file.empty() && encoder.global_cmvn) {
      options.optional.insert({"global_cmvn.mean", "global_cmvn.istd"});
      if (mapped.tensors.contains("global_cmvn.mean") &&
          mapped.tensors.contains("global_cmvn.istd")) {
        const auto difference = [&](const char* name, const torch::Tensor& ours) {
          const auto theirs = mapped.tensors[name];
          if (theirs.sizes() != ours.sizes()) return 0.0;
          return (theirs.to(torch::kDouble) - ours.to(torch::kDouble)).abs().max().item<double>();
        };
        const double worst = std::max(difference("global_cmvn.mean", encoder.global_cmvn->mean),
                                      difference("global_cmvn.istd", encoder.global_cmvn->istd));
        if (worst > 1e-4) {
          std::ostringstream note;
          note << "global CMVN from the checkpoint, which differs from " << config.cmvn_file
               << "'s statistics by up to " << worst << " (WeNet and ESPnet use the checkpoint's)";
          notes.push_back(note.str());
        }
      }
    }
    load_state_dict(module, mapped.tensors, options);
    return {conformer_format_name(layout), notes};
  }

  ModelStats stats(const ModelConfig& config) const override {
    // Frames per second from the features (100 at Kaldi's 10 ms shift).
    const double fps = 1000.0 / config.frame_shift_ms();
    constexpr int64_t kSeconds = 10;
    const auto frames = static_cast<int64_t>(fps * kSeconds);
    ModelStats stats;
    stats.parameters = conformer_parameter_count(config.options<ConformerEncoderOptions>());
    stats.macs = conformer_macs(config.options<ConformerEncoderOptions>(), frames) / kSeconds;
    // Without a features section the input frames are the user's; 100 per second assumed.
    stats.basis = !config.features ? "100 input frames (of 1000)" : "1 s audio (10 s utterance)";
    return stats;
  }

  int64_t num_classes(const ModelConfig& config) const override {
    return config.options<ConformerEncoderOptions>().num_classes();
  }
  int64_t ctc_vocab(const ModelConfig& config) const override {
    const auto& o = config.options<ConformerEncoderOptions>();
    return o.ctc_head() ? o.vocab_size() : 0;
  }
  int64_t token_vocab(const ModelConfig& config) const override {
    return config.options<ConformerEncoderOptions>().vocab_size();
  }
  int64_t attention_layers(const ModelConfig& config) const override {
    return config.options<ConformerEncoderOptions>().blocks().num_layers();
  }
  std::string attention_backend(const ModelConfig& config) const override {
    return config.options<ConformerEncoderOptions>().blocks().attention_backend();
  }
  double frame_ms(const ModelConfig& config) const override {
    const auto subsampling = config.options<ConformerEncoderOptions>().subsampling();
    int64_t rate = 1;
    if (subsampling != Subsampling::kNone) {
      for (const auto& step : conformer_subsampling_steps(subsampling)) rate *= step.stride;
    }
    return config.frame_shift_ms() * static_cast<double>(rate);
  }
  int64_t min_frames(const ModelConfig& config) const override {
    return conformer_subsampling_min_frames(
        config.options<ConformerEncoderOptions>().subsampling());
  }

  // Features [B, T, F] with F = input_dim and T at least what the subsampling needs; lengths
  // [B] integral in [0, T].
  void check_input(const ModelConfig& config, const ModelInput& input,
                   const std::string& what) const override {
    const auto& o = config.options<ConformerEncoderOptions>();
    const auto& features = input.values;
    const std::string fwhat = what + "tensor 'features' ";
    require_floating(features, fwhat);
    const int64_t dim = o.input_dim();
    if (features.dim() != 3 || features.size(0) < 1 || features.size(2) != dim) {
      throw InputError(fwhat + "must be [B, T, " + std::to_string(dim) + "] with B >= 1, got " +
                       shape_string(features.sizes()));
    }
    const int64_t needed = min_frames(config);
    if (features.size(1) < needed) {
      throw InputError(fwhat + shape_string(features.sizes()) + ": too short, " +
                       std::to_string(features.size(1)) + " frames; subsampling " +
                       to_string(o.subsampling()) + " needs at least " + std::to_string(needed));
    }
    const auto& lengths = input.lengths;
    if (lengths.defined()) {
      const std::string lwhat = what + "tensor 'lengths' ";
      if (lengths.is_floating_point() || lengths.is_complex() ||
          lengths.scalar_type() == torch::kBool) {
        throw InputError(lwhat + "must be integral, got " +
                         std::string(c10::toString(lengths.scalar_type())));
      }
      if (lengths.dim() != 1 || lengths.size(0) != features.size(0)) {
        throw InputError(lwhat + "must be [B = " + std::to_string(features.size(0)) + "], got " +
                         shape_string(lengths.sizes()));
      }
      const int64_t lo = lengths.min().item<int64_t>(), hi = lengths.max().item<int64_t>();
      if (lo < 0 || hi > features.size(1)) {
        throw InputError(lwhat + "values must lie in [0, T = " + std::to_string(features.size(1)) +
                         "], got " + std::to_string(lo) + " ... " + std::to_string(hi));
      }
    }
  }

  // Streaming needs streaming.chunk_size and every length T.
  void check_stream(const ModelConfig& config, const ModelInput& input) const override {
    if (config.streaming.chunk_size <= 0) {
      throw InputError(
          "the config has no streaming.chunk_size (set one with --set streaming.chunk_size=16)");
    }
    const auto& lengths = input.lengths;
    const int64_t frames = input.values.size(1);
    if (lengths.defined() && lengths.min().item<int64_t>() != frames) {
      throw InputError("the streams of a batch advance together; every length must be T = " +
                       std::to_string(frames));
    }
  }

  ModelInput random_input(const ModelConfig& config, int64_t batch, int64_t frames) const override {
    return {torch::randn({batch, frames, config.options<ConformerEncoderOptions>().input_dim()}),
            {}};
  }

  torch::Tensor classify(torch::nn::Module& module, const ModelConfig& config,
                         const ModelInput& input) const override {
    auto& encoder = encoder_module(module);
    const auto streaming = input.attention_chunks.value_or(config.streaming);
    const auto [encoded, lengths] = encoder.forward(
        input.values, input.lengths, streaming.chunk_size, streaming.num_left_chunks);
    return encoder.classify(encoded, lengths);
  }

  NamedTensors forward(torch::nn::Module& module, const ModelConfig& config,
                       const ModelInput& input, bool stream) const override {
    auto& encoder = encoder_module(module);
    const auto streaming = input.attention_chunks.value_or(config.streaming);
    torch::Tensor encoded, lengths;
    if (stream) {
      std::tie(encoded, lengths) = encoder.forward_chunk_by_chunk(
          input.values, streaming.chunk_size, streaming.num_left_chunks);
    } else {
      std::tie(encoded, lengths) = encoder.forward(input.values, input.lengths,
                                                   streaming.chunk_size, streaming.num_left_chunks);
    }
    NamedTensors out = {{"encoded", encoded}, {"lengths", lengths}};
    const auto& o = config.options<ConformerEncoderOptions>();
    if (o.vocab_size() > 0 && o.ctc_head()) {
      out.emplace_back("logits", encoder.ctc_log_probs(encoded));
    }
    if (o.num_classes() > 0) out.emplace_back("class_logits", encoder.classify(encoded, lengths));
    return out;
  }

  TokenLayout token_layout(const ModelConfig& config, const ModelInput& input) const override {
    TokenLayout layout;
    layout.cols = encoder_frames(config.options<ConformerEncoderOptions>(), input.values.size(1));
    return layout;
  }

 private:
  std::string name_ = "conformer";
};

}  // namespace

std::unique_ptr<ModelFamily> make_conformer_family() { return std::make_unique<ConformerFamily>(); }

}  // namespace attnzoo
