#include <attnzoo/models/conformer.h>

#include <attnzoo/kernels/ops.h>
#include <attnzoo/layers/fused_epilogues.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace attnzoo {
namespace {

constexpr const char* kConformerWho = "Conformer";

// Checks lengths against x [B, T, D]: [B], integral, each in [0, T].
void check_lengths(const torch::Tensor& x, const torch::Tensor& lengths) {
  if (!lengths.defined()) return;
  TORCH_CHECK_VALUE(lengths.dim() == 1 && lengths.size(0) == x.size(0), kConformerWho,
                    ": lengths must be [B = ", x.size(0), "], got ", shape_string(lengths.sizes()));
  TORCH_CHECK_VALUE(!lengths.is_floating_point() && !lengths.is_complex() &&
                        lengths.scalar_type() != torch::kBool,
                    kConformerWho, ": lengths must be integral, got ", lengths.scalar_type());
  if (lengths.numel() == 0) return;
  const auto bounds = torch::stack({lengths.min(), lengths.max()}).to(torch::kCPU);
  const int64_t lo = bounds[0].item<int64_t>(), hi = bounds[1].item<int64_t>();
  TORCH_CHECK_VALUE(lo >= 0 && hi <= x.size(1), kConformerWho,
                    ": lengths must lie in [0, T = ", x.size(1), "], got values from ", lo, " to ",
                    hi);
}

void check_input(const torch::Tensor& x, int64_t dim) {
  TORCH_CHECK_VALUE(x.defined() && x.dim() == 3 && x.size(2) == dim, kConformerWho,
                    ": x must be [B, T, input_dim = ", dim, "], got ",
                    x.defined() ? shape_string(x.sizes()) : "an undefined tensor");
  TORCH_CHECK_VALUE(x.is_floating_point(), kConformerWho, ": x must be floating point, got ",
                    x.scalar_type());
  TORCH_CHECK_VALUE(x.size(1) > 0, kConformerWho, ": x must have at least one frame, got ",
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
    return ConformerFeedForward(ConformerFeedForwardOptions(d, o.ffn_dim())
                                    .dropout(o.dropout())
                                    .norm_eps(o.norm_eps())
                                    .bias(o.bias()));
  };
  ffn1 = register_module("ffn1", ffn());
  attn_norm = register_module(
      "attn_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(o.norm_eps())));
  attn = register_module("attn", ConformerAttention(ConformerAttentionOptions(d, o.num_heads())
                                                        .position(o.position())
                                                        .dropout(o.dropout())
                                                        .backend(o.attention_backend())
                                                        .backend_options(o.attention_options())
                                                        .head_gating(o.head_gating())
                                                        .bias(o.bias())
                                                        .window_left(o.attention_left())
                                                        .window_right(o.attention_right())
                                                        .global_tokens(o.global_tokens())
                                                        .global_spacing(o.global_spacing())
                                                        .global_separate(o.global_separate())));
  conv = register_module(
      "conv", ConformerConvModule(ConformerConvModuleOptions(d, o.depthwise_conv_kernel_size())
                                      .causal(o.causal_conv())
                                      .causal_padding(o.causal_padding())
                                      .norm(o.conv_norm())
                                      .dropout(o.dropout())
                                      .norm_eps(o.norm_eps())
                                      .conv_norm_eps(o.conv_norm_eps())
                                      .bias(o.bias())));
  ffn2 = register_module("ffn2", ffn());
  final_norm = register_module(
      "final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(o.norm_eps())));
}

torch::Tensor ConformerBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& lengths,
                                          const torch::Tensor& pos_emb,
                                          const torch::Tensor& attn_mask) {
  check_input(x, options.input_dim());
  const auto valid = valid_frames(lengths, x.size(1));  // [B, T] or undefined
  AttentionMask mask;
  if (lengths.defined()) mask.key_lengths(lengths);
  if (attn_mask.defined()) mask.attn_mask(attn_mask);
  if (fused_add_layer_norm(x, is_training())) {
    // Each branch's residual add and the LayerNorm in front of the next branch (or the block's
    // final norm) in one add_layer_norm: five passes over the residual stream instead of nine.
    torch::Tensor y = x, h = ffn1->norm(x);
    torch::Tensor update = 0.5 * ffn1->forward_normed(h);
    const auto add_and_norm = [&](const torch::nn::LayerNorm& next) {
      std::tie(y, h) =
          kernels::add_layer_norm(update, y, next->weight, next->bias, next->options.eps());
    };
    if (options.convolution_first()) {
      add_and_norm(conv->norm);
      update = conv->forward_normed(h, valid);
    }
    add_and_norm(attn_norm);
    update = attn(h, mask, pos_emb);
    if (!options.convolution_first()) {
      add_and_norm(conv->norm);
      update = conv->forward_normed(h, valid);
    }
    add_and_norm(ffn2->norm);
    update = 0.5 * ffn2->forward_normed(h);
    add_and_norm(final_norm);
    return h;
  }
  // Attention drops its output with torchaudio's self_attn_dropout inside the layer (proj_drop).
  auto y = x + 0.5 * ffn1(x);
  if (options.convolution_first()) y = y + conv(y, valid);
  y = y + attn(attn_norm(y), mask, pos_emb);
  if (!options.convolution_first()) y = y + conv(y, valid);
  y = y + 0.5 * ffn2(y);
  return final_norm(y);
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> ConformerBlockImpl::forward_chunk(
    const torch::Tensor& x, const torch::Tensor& att_cache, const torch::Tensor& cnn_cache,
    int64_t first_position) {
  check_input(x, options.input_dim());
  torch::Tensor new_att_cache, new_cnn_cache, update;
  auto y = x + 0.5 * ffn1(x);
  if (options.convolution_first()) {
    std::tie(update, new_cnn_cache) = conv->forward_chunk(y, cnn_cache);
    y = y + update;
  }
  std::tie(update, new_att_cache) = attn->forward_chunk(attn_norm(y), att_cache, first_position);
  y = y + update;
  if (!options.convolution_first()) {
    std::tie(update, new_cnn_cache) = conv->forward_chunk(y, cnn_cache);
    y = y + update;
  }
  y = y + 0.5 * ffn2(y);
  return {final_norm(y), new_att_cache, new_cnn_cache};
}

ConformerImpl::ConformerImpl(ConformerOptions options_) : options(std::move(options_)) { reset(); }

void ConformerImpl::reset() {
  const auto& o = options;
  TORCH_CHECK_VALUE(o.input_dim() > 0 && o.num_heads() > 0 && o.ffn_dim() > 0, kConformerWho,
                    ": input_dim, num_heads and ffn_dim must be > 0, got ", o.input_dim(), ", ",
                    o.num_heads(), ", ", o.ffn_dim());
  TORCH_CHECK_VALUE(o.input_dim() % o.num_heads() == 0, kConformerWho, ": input_dim ",
                    o.input_dim(), " is not divisible by num_heads ", o.num_heads());
  TORCH_CHECK_VALUE(o.num_layers() >= 0, kConformerWho, ": num_layers must be >= 0, got ",
                    o.num_layers());
  TORCH_CHECK_VALUE(o.attention_left() >= -1 && o.attention_right() >= -1, kConformerWho,
                    ": attention_left and attention_right must be >= -1 (unlimited), got ",
                    o.attention_left(), " and ", o.attention_right());
  TORCH_CHECK_VALUE(o.depthwise_conv_kernel_size() > 0, kConformerWho,
                    ": depthwise_conv_kernel_size must be > 0, got ",
                    o.depthwise_conv_kernel_size());
  TORCH_CHECK_VALUE(o.position() != ConformerPosition::kAbsPos, kConformerWho,
                    ": position abs_pos belongs to ConformerEncoderOptions (added to the input); "
                    "the blocks take none, rel_pos or rel_pos_wenet");
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.num_layers(); ++i) layers->push_back(ConformerBlock(o));
}

std::tuple<torch::Tensor, torch::Tensor> ConformerImpl::forward(const torch::Tensor& x,
                                                                const torch::Tensor& lengths,
                                                                const torch::Tensor& attn_mask) {
  check_input(x, options.input_dim());
  check_lengths(x, lengths);
  // The positional encodings depend on T only: computed once, shared by every block.
  torch::Tensor pos_emb;
  if (options.position() != ConformerPosition::kNone && x.size(1) > 0) {
    pos_emb =
        relative_position_encoding(x.size(1), options.input_dim(), options.position(), x.options());
  }
  auto y = x;
  for (const auto& module : *layers) {
    y = module->as<ConformerBlockImpl>()->forward(y, lengths, pos_emb, attn_mask);
  }
  const auto out_lengths =
      lengths.defined() ? lengths : torch::full({x.size(0)}, x.size(1), torch::kLong);
  return {y, out_lengths};
}

// ---------------------------------------------------------------------------------------------

torch::Tensor chunk_attention_mask(int64_t num_frames, int64_t chunk_size, int64_t num_left_chunks,
                                   torch::Device device) {
  TORCH_CHECK_VALUE(num_frames >= 0, "chunk_attention_mask: num_frames must be >= 0, got ",
                    num_frames);
  if (chunk_size <= 0) return {};
  const auto chunk = torch::div(
      torch::arange(num_frames, torch::TensorOptions().dtype(torch::kLong).device(device)),
      chunk_size, "floor");
  const auto query_chunk = chunk.unsqueeze(1), key_chunk = chunk.unsqueeze(0);
  auto allowed = key_chunk <= query_chunk;
  if (num_left_chunks >= 0)
    allowed = allowed.logical_and(key_chunk >= query_chunk - num_left_chunks);
  return allowed.logical_not();
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
  TORCH_CHECK_VALUE(o.subsampling() != Subsampling::kNone || o.input_dim() == d, who,
                    ": without subsampling the features must be the model width: input_dim ",
                    o.input_dim(), " != ", d);
  TORCH_CHECK_VALUE(o.position() != ConformerPosition::kAbsPos || d % 2 == 0, who,
                    ": abs_pos needs an even model width, got ", d);
  TORCH_CHECK_VALUE(o.vocab_size() >= 0, who, ": vocab_size must be >= 0, got ", o.vocab_size());
  TORCH_CHECK_VALUE(o.num_classes() >= 0, who, ": num_classes must be >= 0, got ", o.num_classes());
  // The blocks attend with relative positions in the rel modes only.
  o.blocks().position(o.position() == ConformerPosition::kAbsPos ? ConformerPosition::kNone
                                                                 : o.position());
  if (o.global_cmvn()) global_cmvn = register_module("global_cmvn", GlobalCmvn(o.input_dim()));
  if (o.subsampling() != Subsampling::kNone) {
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
  if (o.vocab_size() > 0 && o.ctc_head()) {
    ctc = register_module("ctc", torch::nn::Linear(d, o.vocab_size()));
  }
  if (o.num_classes() > 0) {
    classifier = register_module("classifier", torch::nn::Linear(d, o.num_classes()));
  }
  if (o.decoder()) {
    const auto& decoder_options = *o.decoder();
    TORCH_CHECK_VALUE(decoder_options.dim() == d, who, ": the attention decoder's dim ",
                      decoder_options.dim(), " must be the model width ", d);
    TORCH_CHECK_VALUE(decoder_options.vocab_size() == o.vocab_size(), who,
                      ": the attention decoder's vocabulary (", decoder_options.vocab_size(),
                      ") must be the CTC head's (vocab_size ", o.vocab_size(), ")");
    decoder = register_module("decoder", AttentionDecoder(decoder_options));
  }
  if (o.transducer()) {
    const auto& t = *o.transducer();
    TORCH_CHECK_VALUE(t.encoder_dim() == d, who, ": the transducer's encoder_dim ", t.encoder_dim(),
                      " must be the model width ", d);
    TORCH_CHECK_VALUE(t.vocab_size() == o.vocab_size(), who, ": the transducer's vocabulary (",
                      t.vocab_size(), ") must be vocab_size ", o.vocab_size());
    transducer = register_module("transducer", Transducer(t));
  }
}

std::tuple<torch::Tensor, torch::Tensor> ConformerEncoderImpl::forward(
    const torch::Tensor& features, const torch::Tensor& lengths, int64_t chunk_size,
    int64_t num_left_chunks) {
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
  if (o.position() != ConformerPosition::kNone) {
    if (o.xscaling()) x = x * std::sqrt(static_cast<double>(d));
    if (o.position() == ConformerPosition::kAbsPos) {
      // Row j of the "rel_pos_wenet" encodings is the absolute encoding of position j.
      x = x +
          relative_position_encoding(x.size(1), d, ConformerPosition::kRelPosWenet, x.options());
    }
  }
  x = dropout(x);
  const auto mask = chunk_attention_mask(x.size(1), chunk_size, num_left_chunks, x.device());
  std::tie(x, length) = conformer(x, length, mask);
  if (after_norm) x = after_norm(x);
  return {x, length};
}

int64_t ConformerEncoderImpl::subsampling_rate() const { return embed ? embed->factor() : 1; }

int64_t ConformerEncoderImpl::right_context() const {
  if (!embed) return 0;
  int64_t context = 0, stride = 1;
  for (const auto& step : embed->steps) {
    context += (step.kernel - 1 - step.pad_before) * stride;
    stride *= step.stride;
  }
  return context;
}

int64_t ConformerEncoderImpl::stream_lead() const {
  if (!embed) return 0;
  // The last output frame of each step that reads the zeros before a chunk's first input frame
  // (-1: none). Step output m reads inputs stride·m − pad_before ... + kernel − 1.
  int64_t tainted = -1;
  for (const auto& step : embed->steps) {
    const int64_t reach = tainted + step.pad_before;
    tainted = reach < 0 ? -1 : reach / step.stride;
  }
  return tainted + 1;
}

void ConformerEncoderImpl::check_streamable(const char* who) const {
  const auto& o = options;
  TORCH_CHECK_VALUE(!is_training(), who, ": streaming is inference only; call eval() first");
  TORCH_CHECK_VALUE(o.blocks().causal_conv(), who,
                    ": streaming needs causal_conv (a centred depthwise kernel would read frames "
                    "that have not arrived)");
  TORCH_CHECK_VALUE(o.blocks().conv_norm() != ConvNormKind::kGroupNorm, who,
                    ": group_norm normalises over the whole utterance and cannot stream");
  TORCH_CHECK_VALUE(subsampling_streams(o.subsampling()), who, ": subsampling '",
                    to_string(o.subsampling()),
                    "' pads its convolutions on both sides, so chunk edges differ from the whole "
                    "utterance; streaming needs none, conv2d4, conv2d6, conv2d8 or a causal kind");
  TORCH_CHECK_VALUE(o.blocks().attention_left() < 0 && o.blocks().attention_right() < 0, who,
                    ": a limited attention context (attention_left/right) does not stream; a "
                    "chunk mask does");
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> ConformerEncoderImpl::forward_chunk(
    const torch::Tensor& features, int64_t offset, int64_t required_cache_size,
    const torch::Tensor& att_cache, const torch::Tensor& cnn_cache, int64_t lead) {
  const auto& o = options;
  constexpr const char* who = "ConformerEncoder::forward_chunk";
  check_streamable(who);
  const int64_t layers = o.blocks().num_layers();
  const int64_t min_frames = right_context() + 1;
  TORCH_CHECK_VALUE(features.defined() && features.dim() == 3 && features.size(2) == o.input_dim(),
                    who, ": features must be [B, T, input_dim = ", o.input_dim(), "], got ",
                    features.defined() ? shape_string(features.sizes()) : "an undefined tensor");
  TORCH_CHECK_VALUE(features.is_floating_point(), who, ": features must be floating point, got ",
                    features.scalar_type());
  TORCH_CHECK_VALUE(features.size(1) >= min_frames, who, ": a chunk needs at least ", min_frames,
                    " input frames (right context ", min_frames - 1, " + 1), got ",
                    features.size(1));
  TORCH_CHECK_VALUE(offset >= 0, who, ": offset must be >= 0, got ", offset);
  TORCH_CHECK_VALUE(lead >= 0 && lead <= offset && lead <= stream_lead(), who, ": lead ", lead,
                    " must be in [0, min(offset ", offset, ", stream_lead() ", stream_lead(), ")]");
  const int64_t batch = features.size(0);
  const auto check_cache = [&](const torch::Tensor& cache, const char* name, int64_t dims) {
    TORCH_CHECK_VALUE(
        !cache.defined() ||
            (cache.dim() == dims && cache.size(0) == layers && cache.size(1) == batch),
        who, ": ", name, " must be [num_layers = ", layers, ", B = ", batch, ", ...] with ", dims,
        " dims, got ", cache.defined() ? shape_string(cache.sizes()) : "");
  };
  check_cache(att_cache, "att_cache", 5);
  check_cache(cnn_cache, "cnn_cache", 4);
  TORCH_CHECK_VALUE(!att_cache.defined() || att_cache.size(3) <= offset, who, ": att_cache holds ",
                    att_cache.defined() ? att_cache.size(3) : 0, " frames but offset is only ",
                    offset);

  auto x = features;
  if (global_cmvn) x = global_cmvn(x);
  if (embed) x = std::get<0>(embed(x, torch::Tensor{}));
  TORCH_CHECK_VALUE(x.size(1) > lead, who, ": ", features.size(1), " input frames give ", x.size(1),
                    " output frames, none beyond the lead of ", lead);
  if (lead > 0) x = x.narrow(1, lead, x.size(1) - lead);
  const int64_t d = o.blocks().input_dim();
  if (o.position() != ConformerPosition::kNone) {
    if (o.xscaling()) x = x * std::sqrt(static_cast<double>(d));
    if (o.position() == ConformerPosition::kAbsPos) {
      x = x + relative_position_encoding(x.size(1), x.size(1), offset, d,
                                         ConformerPosition::kRelPosWenet, x.options());
    }
  }
  x = dropout(x);
  std::vector<torch::Tensor> att_out, cnn_out;
  for (int64_t i = 0; i < layers; ++i) {
    auto* block = conformer->layers[i]->as<ConformerBlockImpl>();
    torch::Tensor att, cnn;
    std::tie(x, att, cnn) =
        block->forward_chunk(x, att_cache.defined() ? att_cache[i] : torch::Tensor{},
                             cnn_cache.defined() ? cnn_cache[i] : torch::Tensor{}, offset);
    // WeNet's next_cache_start: keep the last required_cache_size frames (all when negative).
    const int64_t keys = att.size(2);
    const int64_t start =
        required_cache_size < 0 ? 0 : std::max<int64_t>(keys - required_cache_size, 0);
    att_out.push_back(att.narrow(2, start, keys - start));
    cnn_out.push_back(cnn);
  }
  if (after_norm) x = after_norm(x);
  if (layers == 0) return {x, torch::Tensor{}, torch::Tensor{}};
  return {x, torch::stack(att_out), torch::stack(cnn_out)};
}

std::tuple<torch::Tensor, torch::Tensor> ConformerEncoderImpl::forward_chunk_by_chunk(
    const torch::Tensor& features, int64_t chunk_size, int64_t num_left_chunks) {
  TORCH_CHECK_VALUE(features.defined() && features.dim() == 3,
                    "ConformerEncoder::forward_chunk_by_chunk: features must be [B, T, F], got ",
                    features.defined() ? shape_string(features.sizes()) : "an undefined tensor");
  const int64_t min_frames = right_context() + 1;
  TORCH_CHECK_VALUE(features.size(1) >= min_frames,
                    "ConformerEncoder::forward_chunk_by_chunk: input too short: ", features.size(1),
                    " frames, the subsampling needs at least ", min_frames);
  ConformerStream stream(
      ConformerEncoder(std::static_pointer_cast<ConformerEncoderImpl>(shared_from_this())),
      chunk_size, num_left_chunks);
  auto head = stream.push(features);
  auto tail = stream.finish();
  auto encoded = torch::cat({head, tail}, 1);
  auto lengths = torch::full({features.size(0)}, encoded.size(1),
                             torch::TensorOptions().dtype(torch::kLong).device(features.device()));
  return {encoded, lengths};
}

// ---------------------------------------------------------------------------------------------

ConformerStream::ConformerStream(ConformerEncoder encoder, int64_t chunk_size,
                                 int64_t num_left_chunks)
    : encoder_(std::move(encoder)), chunk_size_(chunk_size), num_left_chunks_(num_left_chunks) {
  TORCH_CHECK_VALUE(chunk_size_ > 0, "ConformerStream: chunk_size must be > 0, got ", chunk_size_);
  encoder_->check_streamable("ConformerStream");
}

void ConformerStream::reset() {
  pending_ = torch::Tensor{};
  att_cache_ = torch::Tensor{};
  cnn_cache_ = torch::Tensor{};
  offset_ = 0;
  finished_ = false;
}

torch::Tensor ConformerStream::run(const torch::Tensor& window, int64_t lead) {
  const int64_t required = num_left_chunks_ < 0 ? -1 : chunk_size_ * num_left_chunks_;
  torch::Tensor out;
  std::tie(out, att_cache_, cnn_cache_) =
      encoder_->forward_chunk(window, offset_, required, att_cache_, cnn_cache_, lead);
  offset_ += out.size(1);
  return out;
}

torch::Tensor ConformerStream::push(const torch::Tensor& features) {
  TORCH_CHECK_VALUE(!finished_, "ConformerStream: push after finish(); call reset() first");
  const int64_t f = encoder_->options.input_dim();
  TORCH_CHECK_VALUE(features.defined() && features.dim() == 3 && features.size(2) == f,
                    "ConformerStream: features must be [B, n, input_dim = ", f, "], got ",
                    features.defined() ? shape_string(features.sizes()) : "an undefined tensor");
  TORCH_CHECK_VALUE(!pending_.defined() || (features.size(0) == pending_.size(0)),
                    "ConformerStream: the batch size changed from ", pending_.size(0), " to ",
                    features.size(0));
  pending_ =
      pending_.defined() ? torch::cat({pending_, features.to(pending_.options())}, 1) : features;
  // pending_ begins lead = min(offset_, stream_lead()) output frames before the next chunk.
  const int64_t rate = encoder_->subsampling_rate();
  std::vector<torch::Tensor> outputs;
  while (true) {
    const int64_t lead = std::min(offset_, encoder_->stream_lead());
    const int64_t window = (lead + chunk_size_ - 1) * rate + encoder_->right_context() + 1;
    if (pending_.size(1) < window) break;
    outputs.push_back(run(pending_.narrow(1, 0, window), lead));
    const int64_t next_lead = std::min(offset_, encoder_->stream_lead());
    const int64_t consumed = (lead + chunk_size_ - next_lead) * rate;
    pending_ = pending_.narrow(1, consumed, pending_.size(1) - consumed);
  }
  if (outputs.empty()) {
    const int64_t d = encoder_->options.blocks().input_dim();
    return torch::empty({features.size(0), 0, d}, features.options());
  }
  return torch::cat(outputs, 1);
}

torch::Tensor ConformerStream::finish() {
  TORCH_CHECK_VALUE(!finished_, "ConformerStream: finish() called twice; call reset() first");
  finished_ = true;
  const int64_t d = encoder_->options.blocks().input_dim();
  const int64_t lead = std::min(offset_, encoder_->stream_lead());
  const auto outputs = [&](int64_t frames) {
    return encoder_->embed ? encoder_->embed->output_length(frames) : frames;
  };
  if (!pending_.defined() || pending_.size(1) < encoder_->right_context() + 1 ||
      outputs(pending_.size(1)) <= lead) {
    const int64_t batch = pending_.defined() ? pending_.size(0) : 0;
    return torch::empty({batch, 0, d},
                        pending_.defined() ? pending_.options() : torch::TensorOptions());
  }
  auto out = run(pending_, lead);
  pending_ = torch::Tensor{};
  return out;
}

torch::Tensor ConformerEncoderImpl::ctc_log_probs(const torch::Tensor& encoded) {
  TORCH_CHECK_VALUE(!ctc.is_empty(),
                    "ConformerEncoder: no CTC head (vocab_size is 0, or ctc_head false)");
  const auto logits = ctc(encoded);
  // A bfloat16 or half model's normalisation in float32: in bfloat16 the log-probabilities of a
  // confident frame rounded above 0, and a path's score with them.
  const auto dtype =
      at::isReducedFloatingType(logits.scalar_type()) ? torch::kFloat : logits.scalar_type();
  return torch::log_softmax(logits, -1, dtype);
}

torch::Tensor ConformerEncoderImpl::classify(const torch::Tensor& encoded,
                                             const torch::Tensor& lengths) {
  TORCH_CHECK_VALUE(!classifier.is_empty(),
                    "ConformerEncoder: no classification head (num_classes is 0)");
  return classifier(utterance_embedding(encoded, lengths));
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
