#include "models/conformer.h"

#include <cmath>

namespace attnzoo {
namespace {

constexpr const char* kWho = "Conformer";

// Checks lengths against x [B, T, D]: [B], integral, each in [0, T].
void check_lengths(const torch::Tensor& x, const torch::Tensor& lengths) {
  if (!lengths.defined()) return;
  TORCH_CHECK_VALUE(lengths.dim() == 1 && lengths.size(0) == x.size(0), kWho,
                    ": lengths must be [B = ", x.size(0), "], got ", shape_string(lengths.sizes()));
  TORCH_CHECK_VALUE(!lengths.is_floating_point() && !lengths.is_complex() &&
                        lengths.scalar_type() != torch::kBool,
                    kWho, ": lengths must be integral, got ", lengths.scalar_type());
  if (lengths.numel() == 0) return;
  const auto bounds = torch::stack({lengths.min(), lengths.max()}).to(torch::kCPU);
  const int64_t lo = bounds[0].item<int64_t>(), hi = bounds[1].item<int64_t>();
  TORCH_CHECK_VALUE(lo >= 0 && hi <= x.size(1), kWho, ": lengths must lie in [0, T = ", x.size(1),
                    "], got values from ", lo, " to ", hi);
}

void check_input(const torch::Tensor& x, int64_t dim) {
  TORCH_CHECK_VALUE(x.defined() && x.dim() == 3 && x.size(2) == dim, kWho,
                    ": x must be [B, T, input_dim = ", dim, "], got ",
                    x.defined() ? shape_string(x.sizes()) : "an undefined tensor");
  TORCH_CHECK_VALUE(x.is_floating_point(), kWho, ": x must be floating point, got ",
                    x.scalar_type());
  TORCH_CHECK_VALUE(x.size(1) > 0, kWho, ": x must have at least one frame, got ",
                    shape_string(x.sizes()));
}

}  // namespace

ConformerBlockImpl::ConformerBlockImpl(ConformerOptions options_) : options(std::move(options_)) {
  reset();
}

void ConformerBlockImpl::reset() {
  const auto& o = options;
  const int64_t d = o.input_dim();
  const auto ffn = [&] {
    return ConformerFeedForward(
        ConformerFeedForwardOptions(d, o.ffn_dim()).dropout(o.dropout()).norm_eps(o.norm_eps()));
  };
  ffn1 = register_module("ffn1", ffn());
  attn_norm = register_module(
      "attn_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(o.norm_eps())));
  attn = register_module("attn", ConformerAttention(ConformerAttentionOptions(d, o.num_heads())
                                                        .position(o.position())
                                                        .dropout(o.dropout())
                                                        .backend(o.attention_backend())
                                                        .backend_options(o.attention_options())));
  conv = register_module(
      "conv", ConformerConvModule(ConformerConvModuleOptions(d, o.depthwise_conv_kernel_size())
                                      .causal(o.causal_conv())
                                      .norm(o.conv_norm())
                                      .dropout(o.dropout())
                                      .norm_eps(o.norm_eps())));
  ffn2 = register_module("ffn2", ffn());
  final_norm = register_module(
      "final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(o.norm_eps())));
}

torch::Tensor ConformerBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& lengths,
                                          const torch::Tensor& pos_emb) {
  check_input(x, options.input_dim());
  const auto valid = valid_frames(lengths, x.size(1));  // [B, T] or undefined
  AttentionMask mask;
  if (lengths.defined()) mask.key_lengths(lengths);
  // Attention drops its output with torchaudio's self_attn_dropout inside the layer (proj_drop).
  auto y = x + 0.5 * ffn1(x);
  if (options.convolution_first()) y = y + conv(y, valid);
  y = y + attn(attn_norm(y), mask, pos_emb);
  if (!options.convolution_first()) y = y + conv(y, valid);
  y = y + 0.5 * ffn2(y);
  return final_norm(y);
}

ConformerImpl::ConformerImpl(ConformerOptions options_) : options(std::move(options_)) { reset(); }

void ConformerImpl::reset() {
  const auto& o = options;
  TORCH_CHECK_VALUE(o.input_dim() > 0 && o.num_heads() > 0 && o.ffn_dim() > 0, kWho,
                    ": input_dim, num_heads and ffn_dim must be > 0, got ", o.input_dim(), ", ",
                    o.num_heads(), ", ", o.ffn_dim());
  TORCH_CHECK_VALUE(o.input_dim() % o.num_heads() == 0, kWho, ": input_dim ", o.input_dim(),
                    " is not divisible by num_heads ", o.num_heads());
  TORCH_CHECK_VALUE(o.num_layers() >= 0, kWho, ": num_layers must be >= 0, got ", o.num_layers());
  TORCH_CHECK_VALUE(o.depthwise_conv_kernel_size() > 0, kWho,
                    ": depthwise_conv_kernel_size must be > 0, got ",
                    o.depthwise_conv_kernel_size());
  TORCH_CHECK_VALUE(is_conformer_position_mode(o.position()), kWho, ": unknown position '",
                    o.position(), "'; expected none, rel_pos or rel_pos_wenet");
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.num_layers(); ++i) layers->push_back(ConformerBlock(o));
}

std::tuple<torch::Tensor, torch::Tensor> ConformerImpl::forward(const torch::Tensor& x,
                                                                const torch::Tensor& lengths) {
  check_input(x, options.input_dim());
  check_lengths(x, lengths);
  // The positional encodings depend on T only: computed once, shared by every block.
  torch::Tensor pos_emb;
  if (options.position() != "none" && x.size(1) > 0) {
    pos_emb =
        relative_position_encoding(x.size(1), options.input_dim(), options.position(), x.options());
  }
  auto y = x;
  for (const auto& module : *layers) {
    y = module->as<ConformerBlockImpl>()->forward(y, lengths, pos_emb);
  }
  const auto out_lengths =
      lengths.defined() ? lengths : torch::full({x.size(0)}, x.size(1), torch::kLong);
  return {y, out_lengths};
}

// ---------------------------------------------------------------------------------------------

bool is_conformer_encoder_position(const std::string& mode) {
  return mode == "none" || mode == "abs_pos" || mode == "rel_pos" || mode == "rel_pos_wenet";
}

ConformerEncoderImpl::ConformerEncoderImpl(ConformerEncoderOptions options_)
    : options(std::move(options_)) {
  reset();
}

void ConformerEncoderImpl::reset() {
  auto& o = options;
  constexpr const char* who = "ConformerEncoder";
  const int64_t d = o.blocks().input_dim();
  TORCH_CHECK_VALUE(o.input_dim() > 0, who, ": input_dim must be > 0, got ", o.input_dim());
  TORCH_CHECK_VALUE(is_conformer_encoder_position(o.position()), who, ": unknown position '",
                    o.position(), "'; expected none, abs_pos, rel_pos or rel_pos_wenet");
  TORCH_CHECK_VALUE(o.subsampling() == "none" || is_conformer_subsampling(o.subsampling()), who,
                    ": unknown subsampling '", o.subsampling(),
                    "'; expected none, conv2d4, conv2d6, conv2d8 or dw_striding8");
  TORCH_CHECK_VALUE(o.subsampling() != "none" || o.input_dim() == d, who,
                    ": without subsampling the features must be the model width: input_dim ",
                    o.input_dim(), " != ", d);
  TORCH_CHECK_VALUE(o.position() != "abs_pos" || d % 2 == 0, who,
                    ": abs_pos needs an even model width, got ", d);
  TORCH_CHECK_VALUE(o.vocab_size() >= 0, who, ": vocab_size must be >= 0, got ", o.vocab_size());
  // The blocks attend with relative positions in the rel modes only.
  o.blocks().position(o.position() == "abs_pos" ? "none" : o.position());
  if (o.global_cmvn()) global_cmvn = register_module("global_cmvn", GlobalCmvn(o.input_dim()));
  if (o.subsampling() != "none") {
    embed = register_module(
        "embed", ConformerSubsampling(ConformerSubsamplingOptions(o.subsampling(), o.input_dim(), d)
                                          .channels(o.subsampling_channels())));
  }
  dropout = register_module("dropout", torch::nn::Dropout(o.blocks().dropout()));
  conformer = register_module("conformer", Conformer(o.blocks()));
  if (o.final_norm()) {
    after_norm = register_module(
        "after_norm",
        torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(o.blocks().norm_eps())));
  }
  if (o.vocab_size() > 0) ctc = register_module("ctc", torch::nn::Linear(d, o.vocab_size()));
}

std::tuple<torch::Tensor, torch::Tensor> ConformerEncoderImpl::forward(
    const torch::Tensor& features, const torch::Tensor& lengths) {
  const auto& o = options;
  TORCH_CHECK_VALUE(features.defined() && features.dim() == 3 && features.size(2) == o.input_dim(),
                    "ConformerEncoder: features must be [B, T, input_dim = ", o.input_dim(),
                    "], got ",
                    features.defined() ? shape_string(features.sizes()) : "an undefined tensor");
  TORCH_CHECK_VALUE(features.is_floating_point(),
                    "ConformerEncoder: features must be floating point, got ",
                    features.scalar_type());
  check_lengths(features, lengths);
  auto length =
      lengths.defined()
          ? lengths.to(torch::kLong)
          : torch::full({features.size(0)}, features.size(1),
                        torch::TensorOptions().dtype(torch::kLong).device(features.device()));
  auto x = features;
  if (global_cmvn) x = global_cmvn(x);
  if (embed) std::tie(x, length) = embed(x, length);
  const int64_t d = o.blocks().input_dim();
  if (o.position() != "none") {
    x = x * std::sqrt(static_cast<double>(d));
    if (o.position() == "abs_pos") {
      // Row j of the "rel_pos_wenet" encodings is the absolute encoding of position j.
      x = x + relative_position_encoding(x.size(1), d, "rel_pos_wenet", x.options());
    }
  }
  x = dropout(x);
  std::tie(x, length) = conformer(x, length);
  if (after_norm) x = after_norm(x);
  return {x, length};
}

torch::Tensor ConformerEncoderImpl::ctc_log_probs(const torch::Tensor& encoded) {
  TORCH_CHECK_VALUE(!ctc.is_empty(), "ConformerEncoder: no CTC head (vocab_size is 0)");
  return torch::log_softmax(ctc(encoded), -1);
}

torch::Tensor ConformerEncoderImpl::utterance_embedding(const torch::Tensor& encoded,
                                                        const torch::Tensor& lengths) {
  TORCH_CHECK_VALUE(encoded.dim() == 3 && lengths.dim() == 1 && lengths.size(0) == encoded.size(0),
                    "ConformerEncoder: utterance_embedding needs encoded [B, T, D] and lengths "
                    "[B], got ",
                    shape_string(encoded.sizes()), " and ", shape_string(lengths.sizes()));
  const auto valid = valid_frames(lengths, encoded.size(1)).unsqueeze(2).to(encoded.scalar_type());
  return (encoded * valid).sum(1) / valid.sum(1).clamp_min(1.0);
}

}  // namespace attnzoo
