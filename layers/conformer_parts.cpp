#include <attnzoo/kernels/ops.h>
#include <attnzoo/layers/conformer_parts.h>
#include <attnzoo/layers/fused_epilogues.h>
#include <attnzoo/layers/transformer_parts.h>

#include <torch/nn/init.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace attnzoo {
namespace {

void check_rate(double p, const char* who, const char* what) {
  TORCH_CHECK_VALUE(p >= 0.0 && p < 1.0, who, ": ", what, " must lie in [0, 1), got ", p);
}

}  // namespace

torch::Tensor valid_frames(const torch::Tensor& lengths, int64_t num_frames) {
  if (!lengths.defined()) return {};
  const auto positions = torch::arange(num_frames, lengths.options().dtype(torch::kLong));
  return positions.unsqueeze(0) < lengths.to(torch::kLong).unsqueeze(1);
}

// ---------------------------------------------------------------------------------------------

ConformerFeedForwardImpl::ConformerFeedForwardImpl(ConformerFeedForwardOptions options_)
    : options(std::move(options_)) {
  reset();
}

void ConformerFeedForwardImpl::reset() {
  const auto& o = options;
  TORCH_CHECK_VALUE(o.dim() > 0 && o.hidden_dim() > 0,
                    "ConformerFeedForward: dim and hidden_dim must be > 0, got ", o.dim(), " and ",
                    o.hidden_dim());
  check_rate(o.dropout(), "ConformerFeedForward", "dropout");
  norm = register_module("norm", layer_norm(o.dim(), o.norm_eps()));
  linear1 = register_module(
      "linear1",
      torch::nn::Linear(torch::nn::LinearOptions(o.dim(), o.hidden_dim()).bias(o.bias())));
  linear2 = register_module(
      "linear2",
      torch::nn::Linear(torch::nn::LinearOptions(o.hidden_dim(), o.dim()).bias(o.bias())));
  dropout = register_module("dropout", torch::nn::Dropout(o.dropout()));
}

torch::Tensor ConformerFeedForwardImpl::forward(const torch::Tensor& x) {
  return forward_normed(norm(x));
}

torch::Tensor ConformerFeedForwardImpl::forward_normed(const torch::Tensor& h) {
  // Swish = SiLU (Ramachandran et al. 2017), as the paper's figure 4.
  if (!is_training()) {
    if (auto y = PackedLinear::int8_pair(linear1_packed_, linear1, linear2_packed_, linear2, h,
                                         Activation::kSilu)) {
      return *y;
    }
  }
  const auto hidden = linear1_packed_(linear1, h, Activation::kSilu);
  return dropout(linear2_packed_(linear2, dropout(hidden)));
}

int64_t ConformerFeedForwardImpl::set_int8(bool on) {
  linear1_packed_.set_int8(on);
  linear2_packed_.set_int8(on);
  return 2;
}

// ---------------------------------------------------------------------------------------------

ConvNormImpl::ConvNormImpl(ConvNormOptions options_) : options(std::move(options_)) { reset(); }

void ConvNormImpl::reset() {
  const auto& o = options;
  TORCH_CHECK_VALUE(o.channels() > 0, "ConvNorm: channels must be > 0, got ", o.channels());
  TORCH_CHECK_VALUE(o.eps() > 0.0, "ConvNorm: eps must be > 0, got ", o.eps());
  TORCH_CHECK_VALUE(o.momentum() >= 0.0 && o.momentum() <= 1.0,
                    "ConvNorm: momentum must lie in [0, 1], got ", o.momentum());
  const int64_t c = o.channels();
  weight = register_parameter("weight", torch::ones({c}));
  bias = register_parameter("bias", torch::zeros({c}));
  if (o.kind() == ConvNormKind::kBatchNorm) {
    running_mean = register_buffer("running_mean", torch::zeros({c}));
    running_var = register_buffer("running_var", torch::ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  }
}

torch::Tensor ConvNormImpl::forward(const torch::Tensor& x, const torch::Tensor& valid) {
  const int64_t c = options.channels();
  TORCH_CHECK_VALUE(x.dim() == 3 && x.size(1) == c, "ConvNorm: x must be [B, C = ", c, ", T], got ",
                    shape_string(x.sizes()));
  TORCH_CHECK_VALUE(!valid.defined() || (valid.scalar_type() == torch::kBool &&
                                         valid.sizes() == torch::IntArrayRef{x.size(0), x.size(2)}),
                    "ConvNorm: valid must be bool [B, T] = ", shape_string({x.size(0), x.size(2)}),
                    ", got ", valid.defined() ? shape_string(valid.sizes()) : "");
  const double eps = options.eps();
  const auto per_channel = [](const torch::Tensor& t) { return t.view({1, -1, 1}); };
  if (options.kind() == ConvNormKind::kLayerNorm) {
    return torch::layer_norm(x.transpose(1, 2), {c}, weight, bias, eps).transpose(1, 2);
  }
  // [B, 1, T] weights of the frames in the statistics: 1 valid, 0 padding.
  const auto frames = valid.defined() ? valid.unsqueeze(1).to(x.scalar_type())
                                      : torch::ones_like(x.select(1, 0)).unsqueeze(1);
  if (options.kind() == ConvNormKind::kGroupNorm) {
    // GroupNorm(1): one mean and variance per utterance over all channels of its valid frames.
    const auto count =
        (frames.sum(torch::IntArrayRef{1, 2}, /*keepdim=*/true) * c).clamp_min(1.0);  // [B, 1, 1]
    const auto mean = (x * frames).sum(torch::IntArrayRef{1, 2}, true) / count;
    const auto var = ((x - mean).square() * frames).sum(torch::IntArrayRef{1, 2}, true) / count;
    return (x - mean) * torch::rsqrt(var + eps) * per_channel(weight) + per_channel(bias);
  }
  if (!is_training()) {
    // Evaluation: the running statistics, which no padding can reach.
    return (x - per_channel(running_mean)) * torch::rsqrt(per_channel(running_var) + eps) *
               per_channel(weight) +
           per_channel(bias);
  }
  // Training: BatchNorm1d over (B, T) restricted to the valid frames, i.e. what BatchNorm1d
  // computes on the valid frames of all utterances concatenated; normalised with the biased
  // variance, the running variance updated with the unbiased one (as torch.nn.BatchNorm1d).
  const auto count = frames.sum();  // scalar: valid frames in the batch
  const auto mean = (x * frames).sum(torch::IntArrayRef{0, 2}, true) / count.clamp_min(1.0);
  const auto var =
      ((x - mean).square() * frames).sum(torch::IntArrayRef{0, 2}, true) / count.clamp_min(1.0);
  {
    torch::NoGradGuard no_grad;
    const double m = options.momentum();
    const auto unbiased = var.flatten() * count / (count - 1.0).clamp_min(1.0);
    running_mean.mul_(1.0 - m).add_(mean.flatten().detach(), m);
    running_var.mul_(1.0 - m).add_(unbiased.detach(), m);
    num_batches_tracked.add_(1);
  }
  return (x - mean) * torch::rsqrt(var + eps) * per_channel(weight) + per_channel(bias);
}

// ---------------------------------------------------------------------------------------------

ConformerConvModuleImpl::ConformerConvModuleImpl(ConformerConvModuleOptions options_)
    : options(std::move(options_)) {
  reset();
}

int64_t ConformerConvModuleImpl::left_padding() const {
  const int64_t k = options.kernel_size();
  return options.causal() ? k - 1 : (k - 1) / 2;
}

int64_t ConformerConvModuleImpl::right_padding() const {
  return options.causal() ? 0 : options.kernel_size() / 2;
}

torch::Tensor ConformerConvModuleImpl::causal_context(int64_t batch,
                                                      const torch::TensorOptions& like) const {
  const int64_t context = options.kernel_size() - 1;
  const auto& b = pointwise_conv1->bias;
  if (!b.defined() || options.causal_padding() == CausalPadding::kDepthwiseInput) {
    return torch::zeros({batch, 2 * options.dim(), context}, like);
  }
  return b.to(like.dtype()).view({1, -1, 1}).expand({batch, -1, context});
}

void ConformerConvModuleImpl::reset() {
  const auto& o = options;
  const int64_t d = o.dim();
  TORCH_CHECK_VALUE(d > 0, "ConformerConvModule: dim must be > 0, got ", d);
  TORCH_CHECK_VALUE(o.kernel_size() > 0,
                    "ConformerConvModule: depthwise kernel_size must be > 0, got ",
                    o.kernel_size());
  check_rate(o.dropout(), "ConformerConvModule", "dropout");
  const auto conv = [&](int64_t in, int64_t out, int64_t k, int64_t groups) {
    return torch::nn::Conv1d(torch::nn::Conv1dOptions(in, out, k).groups(groups).bias(o.bias()));
  };
  norm = register_module("norm", layer_norm(d, o.norm_eps()));
  pointwise_conv1 = register_module("pointwise_conv1", conv(d, 2 * d, 1, 1));
  depthwise_conv = register_module("depthwise_conv", conv(d, d, o.kernel_size(), d));
  conv_norm = register_module("conv_norm",
                              ConvNorm(ConvNormOptions(d).kind(o.norm()).eps(o.conv_norm_eps())));
  pointwise_conv2 = register_module("pointwise_conv2", conv(d, d, 1, 1));
  dropout = register_module("dropout", torch::nn::Dropout(o.dropout()));
}

torch::Tensor ConformerConvModuleImpl::forward(const torch::Tensor& x, const torch::Tensor& valid) {
  return forward_normed(norm(x), valid);
}

torch::Tensor ConformerConvModuleImpl::forward_normed(const torch::Tensor& h,
                                                      const torch::Tensor& valid) {
  auto y = pointwise_conv1(h.transpose(1, 2));  // [B, 2D, T]
  const int64_t frames = y.size(2);
  // Causal: the left context goes in front now, as pointwise_conv1's output for zero input, and
  // counts as valid.
  auto valid_in = valid;
  if (options.causal()) {
    y = torch::cat({causal_context(y.size(0), y.options()), y}, 2);  // [B, 2D, K - 1 + T]
    if (valid.defined())
      valid_in = torch::constant_pad_nd(valid, {options.kernel_size() - 1, 0}, 1);
  }
  if (fused_epilogues() && !is_training() && options.norm() == ConvNormKind::kBatchNorm) {
    // GLU, the depthwise convolution, BatchNorm with its running statistics (folded, with the
    // convolution's bias, into a scale and shift) and Swish in one op (kernels/ops.h:
    // glu_dwconv_swish), which reads [B, 2D, T] as its [B, T, 2D] view. `valid` marks each
    // utterance's first frames, so its row sums are the lengths.
    const auto scale =
        conv_norm->weight * torch::rsqrt(conv_norm->running_var + conv_norm->options.eps());
    auto shift = conv_norm->bias - conv_norm->running_mean * scale;
    if (depthwise_conv->bias.defined()) shift = shift + depthwise_conv->bias * scale;
    std::optional<torch::Tensor> lengths;
    if (valid_in.defined()) lengths = valid_in.sum(1);
    // Causal: the context is in y already, so no zero frames on the left; the kernel keeps the
    // length of its input, and the first T outputs are the module's.
    y = kernels::glu_dwconv_swish(y.transpose(1, 2), depthwise_conv->weight.squeeze(1),
                                  std::nullopt, scale.to(y.scalar_type()),
                                  shift.to(y.scalar_type()), options.causal() ? 0 : left_padding(),
                                  lengths);  // [B, T', D]
    y = y.narrow(1, 0, frames);
    return dropout(pointwise_conv2(y.transpose(1, 2))).transpose(1, 2);
  }
  y = torch::glu(y, 1);  // [B, D, T] (causal: K - 1 + T)
  if (valid_in.defined()) {
    // Padding frames carry the pointwise convolution's bias (and whatever the input held); zero
    // them, or the depthwise convolution would carry them into the valid frames near the end.
    y = y.masked_fill(valid_in.logical_not().unsqueeze(1), 0.0);
  }
  if (!options.causal()) y = torch::constant_pad_nd(y, {left_padding(), right_padding()}, 0.0);
  y = depthwise_conv(y);  // [B, D, T]
  y = torch::silu(conv_norm(y, valid));
  return dropout(pointwise_conv2(y)).transpose(1, 2);
}

std::tuple<torch::Tensor, torch::Tensor> ConformerConvModuleImpl::forward_chunk(
    const torch::Tensor& x, const torch::Tensor& cache) {
  const auto& o = options;
  TORCH_CHECK_VALUE(o.causal(),
                    "ConformerConvModule: streaming needs the causal convolution (causal_conv: "
                    "true); a centred kernel would need frames that have not arrived");
  TORCH_CHECK_VALUE(o.norm() != ConvNormKind::kGroupNorm,
                    "ConformerConvModule: group_norm normalises over the whole utterance and "
                    "cannot stream; use batch_norm or layer_norm");
  TORCH_CHECK_VALUE(x.dim() == 3 && x.size(2) == o.dim(), "ConformerConvModule: x must be [B, T, ",
                    o.dim(), "], got ", shape_string(x.sizes()));
  const int64_t context = o.kernel_size() - 1;
  auto y = torch::glu(pointwise_conv1(norm(x).transpose(1, 2)), 1);  // [B, D, T]
  if (cache.defined()) {
    TORCH_CHECK_VALUE(cache.dim() == 3 && cache.size(0) == x.size(0) && cache.size(1) == o.dim() &&
                          cache.size(2) == context,
                      "ConformerConvModule: cache must be [B = ", x.size(0), ", D = ", o.dim(),
                      ", K - 1 = ", context, "], got ", shape_string(cache.sizes()));
    y = torch::cat({cache.to(y.scalar_type()), y}, 2);
  } else {
    y = torch::cat({torch::glu(causal_context(y.size(0), y.options()), 1), y}, 2);
  }
  auto new_cache = y.narrow(2, y.size(2) - context, context);
  y = torch::silu(conv_norm(depthwise_conv(y)));
  return {dropout(pointwise_conv2(y)).transpose(1, 2), new_cache};
}

// ---------------------------------------------------------------------------------------------

const char* to_string(CausalPadding padding) {
  return padding == CausalPadding::kDepthwiseInput ? "depthwise_input" : "module_input";
}

const char* to_string(ConvNormKind kind) {
  switch (kind) {
    case ConvNormKind::kBatchNorm:
      return "batch_norm";
    case ConvNormKind::kGroupNorm:
      return "group_norm";
    case ConvNormKind::kLayerNorm:
      return "layer_norm";
  }
  return "?";
}

const char* to_string(ConformerPosition position) {
  switch (position) {
    case ConformerPosition::kNone:
      return "none";
    case ConformerPosition::kAbsPos:
      return "abs_pos";
    case ConformerPosition::kRelPos:
      return "rel_pos";
    case ConformerPosition::kRelPosWenet:
      return "rel_pos_wenet";
  }
  return "?";
}

torch::Tensor relative_position_encoding(int64_t num_frames, int64_t dim, ConformerPosition mode,
                                         const torch::TensorOptions& options) {
  return relative_position_encoding(num_frames, num_frames, 0, dim, mode, options);
}

torch::Tensor relative_position_encoding(int64_t num_queries, int64_t num_keys,
                                         int64_t first_key_position, int64_t dim,
                                         ConformerPosition mode,
                                         const torch::TensorOptions& options) {
  TORCH_CHECK_VALUE(is_relative(mode),
                    "relative_position_encoding: mode must be rel_pos or rel_pos_wenet, got ",
                    to_string(mode));
  TORCH_CHECK_VALUE(num_queries > 0 && num_keys >= num_queries,
                    "relative_position_encoding: need 0 < num_queries <= num_keys, got ",
                    num_queries, " queries and ", num_keys, " keys");
  TORCH_CHECK_VALUE(first_key_position >= 0,
                    "relative_position_encoding: first_key_position must be >= 0, got ",
                    first_key_position);
  TORCH_CHECK_VALUE(dim > 0 && dim % 2 == 0,
                    "relative_position_encoding: dim must be even and > 0, got ", dim);
  // Computed in float64 and rounded once, so every dtype sees the same encodings.
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble).device(options.device());
  const auto positions =
      mode == ConformerPosition::kRelPos
          ? torch::arange(num_keys - 1, -num_queries, -1, f64)  // Lk − 1 ... −(Lq − 1)
          : torch::arange(first_key_position, first_key_position + num_keys, f64);
  const auto frequencies =
      torch::exp(torch::arange(0, dim, 2, f64) * (-std::log(10000.0) / static_cast<double>(dim)));
  const auto angles = positions.unsqueeze(1) * frequencies.unsqueeze(0);  // [P, dim/2]
  // Interleaved: sin at even features, cos at odd ones.
  const auto encoding = torch::stack({angles.sin(), angles.cos()}, -1).view({1, -1, dim});
  return encoding.to(options.dtype_opt().value_or(torch::get_default_dtype()));
}

ConformerAttentionImpl::ConformerAttentionImpl(ConformerAttentionOptions options_)
    : options(std::move(options_)) {
  reset();
}

void ConformerAttentionImpl::reset() {
  const auto& o = options;
  TORCH_CHECK_VALUE(o.position() != ConformerPosition::kAbsPos,
                    "ConformerAttention: position abs_pos is added to the encoder's input, not "
                    "attended; expected none, rel_pos or rel_pos_wenet");
  check_rate(o.dropout(), "ConformerAttention", "dropout");
  mha = register_module("mha",
                        MultiheadAttention(MultiheadAttentionOptions(o.embed_dim(), o.num_heads())
                                               .attn_drop(o.dropout())
                                               .proj_drop(o.dropout())
                                               .backend(o.backend())
                                               .backend_options(o.backend_options())
                                               .head_gating(o.head_gating())
                                               .qkv_bias(o.bias())
                                               .proj_bias(o.bias())
                                               .init(AttentionInit::kJax)));
  if (o.position() != ConformerPosition::kNone) {
    TORCH_CHECK_VALUE(o.embed_dim() % 2 == 0, "ConformerAttention: embed_dim must be even for ",
                      to_string(o.position()), " (sinusoidal encodings), got ", o.embed_dim());
    const int64_t heads = o.num_heads(), e = mha->head_dim();
    linear_pos = register_module(
        "linear_pos",
        torch::nn::Linear(torch::nn::LinearOptions(o.embed_dim(), heads * e).bias(false)));
    pos_bias_u = register_parameter("pos_bias_u", torch::empty({heads, e}));
    pos_bias_v = register_parameter("pos_bias_v", torch::empty({heads, e}));
    torch::NoGradGuard no_grad;
    torch::nn::init::xavier_uniform_(pos_bias_u);
    torch::nn::init::xavier_uniform_(pos_bias_v);
  }
  TORCH_CHECK_VALUE(o.global_tokens() >= 0 && o.global_spacing() >= 1,
                    "ConformerAttention: global_tokens must be >= 0 and global_spacing >= 1, got ",
                    o.global_tokens(), " and ", o.global_spacing());
  if (o.global_tokens() > 0) {
    TORCH_CHECK_VALUE(
        o.position() != ConformerPosition::kNone && o.window_left() >= 0 && o.window_right() >= 0,
        "ConformerAttention: global_tokens widen a limited window of relative "
        "attention (Longformer); set window_left, window_right and a relative "
        "position");
    if (o.global_separate()) {
      global_qkv = register_module(
          "global_qkv",
          torch::nn::Linear(
              torch::nn::LinearOptions(o.embed_dim(), 3 * o.embed_dim()).bias(o.bias())));
    }
  }
}

torch::Tensor ConformerAttentionImpl::forward(const torch::Tensor& x, const AttentionMask& mask,
                                              const torch::Tensor& pos_emb) {
  if (options.position() == ConformerPosition::kNone) {
    return mha(x, with_window(mask, x.size(1), x.size(1), x.device()));
  }
  return std::get<0>(attend(x, {}, 0, mask, pos_emb, /*want_cache=*/false));
}

std::tuple<torch::Tensor, torch::Tensor> ConformerAttentionImpl::forward_chunk(
    const torch::Tensor& x, const torch::Tensor& cache, int64_t first_position,
    const AttentionMask& mask) {
  TORCH_CHECK_VALUE(!options.head_gating(),
                    "ConformerAttention: head_gating pools over the whole utterance and cannot "
                    "stream");
  return attend(x, cache, first_position, mask, {}, /*want_cache=*/true);
}

std::tuple<torch::Tensor, torch::Tensor> ConformerAttentionImpl::attend(
    const torch::Tensor& x, const torch::Tensor& cache, int64_t first_position,
    const AttentionMask& mask, const torch::Tensor& pos_emb, bool want_cache) {
  const auto& o = options;
  TORCH_CHECK_VALUE(x.dim() == 3 && x.size(2) == o.embed_dim(),
                    "ConformerAttention: x must be [B, T, embed_dim = ", o.embed_dim(), "], got ",
                    shape_string(x.sizes()));
  const int64_t batch = x.size(0), frames = x.size(1);
  const int64_t heads = o.num_heads(), e = mha->head_dim();
  const int64_t cached = cache.defined() ? cache.size(2) : 0;
  if (cache.defined()) {
    TORCH_CHECK_VALUE(cache.dim() == 4 && cache.size(0) == batch && cache.size(1) == heads &&
                          cache.size(3) == 2 * e,
                      "ConformerAttention: cache must be [B = ", batch, ", H = ", heads,
                      ", cached frames, 2·head_dim = ", 2 * e, "], got ",
                      shape_string(cache.sizes()));
  }
  TORCH_CHECK_VALUE(first_position >= cached, "ConformerAttention: first_position ", first_position,
                    " is before the ", cached, " cached frames");
  const int64_t keys = cached + frames;

  // [B, T, 3·H·E] -> 3 × [B, H, T, E], views of the one projection.
  const auto qkv =
      mha->qkv_packed(mha->qkv, x).view({batch, frames, 3, heads, e}).permute({2, 0, 3, 1, 4});
  const auto q = qkv[0];
  auto k = qkv[1], v = qkv[2];
  torch::Tensor new_cache;
  if (want_cache) {
    // Keys and values side by side, as WeNet's att_cache: [B, H, Tc + T, 2E].
    new_cache = torch::cat({k, v}, -1);
    if (cache.defined()) new_cache = torch::cat({cache.to(new_cache.scalar_type()), new_cache}, 2);
    k = new_cache.narrow(-1, 0, e);
    v = new_cache.narrow(-1, e, e);
  }

  // [B, H, T, E] from whichever path -> (output [B, T, D], cache)
  const auto finish = [&](torch::Tensor heads_out) {
    return merge_heads(std::move(heads_out), x, mask, new_cache);
  };
  AttentionProblem problem;
  problem.query = q;
  problem.key = k;
  problem.value = v;
  problem.scale = 1.0 / std::sqrt(static_cast<double>(e));
  const bool strips =
      o.position() != ConformerPosition::kNone && o.backend() == "auto" && x.device().is_cpu();
  // The window as a mask [T, keys] where a backend computes, or a recorder needs the whole
  // probabilities; the CPU's strips apply it per strip, in memory linear in T.
  problem.mask = strips && AttentionRecorder::active() == nullptr
                     ? mask
                     : with_window(mask, frames, keys, x.device());
  if (o.position() != ConformerPosition::kNone) {
    const int64_t positions = o.position() == ConformerPosition::kRelPos ? frames + keys - 1 : keys;
    const auto pos = pos_emb.defined()
                         ? pos_emb
                         : relative_position_encoding(frames, keys, first_position - cached,
                                                      o.embed_dim(), o.position(), x.options());
    TORCH_CHECK_VALUE(pos.dim() == 3 && (pos.size(0) == 1 || pos.size(0) == batch) &&
                          pos.size(1) == positions && pos.size(2) == o.embed_dim(),
                      "ConformerAttention: pos_emb must be [1 or B, ", positions, " (",
                      to_string(o.position()), " for T = ", frames,
                      "), embed_dim = ", o.embed_dim(), "], got ", shape_string(pos.sizes()));
    RelativeAttentionProblem relative;
    relative.query = q;
    relative.key = k;
    relative.value = v;
    relative.positions = linear_pos(pos).view({pos.size(0), positions, heads, e}).transpose(1, 2);
    relative.content_bias = pos_bias_u;
    relative.position_bias = pos_bias_v;
    relative.layout = o.position() == ConformerPosition::kRelPos ? RelativeLayout::kShifted
                                                                 : RelativeLayout::kKeyPositions;
    relative.mask = mask;
    relative.window_left = o.window_left();
    relative.window_right = o.window_right();
    relative.scale = problem.scale;
    relative.dropout_p = is_training() ? o.dropout() : 0.0;
    if (o.global_tokens() > 0) {
      TORCH_CHECK_VALUE(!want_cache && cached == 0,
                        "ConformerAttention: global tokens do not stream (every frame sees them "
                        "and they see the whole utterance)");
      TORCH_CHECK_VALUE(!mask.attn_mask().defined() && !mask.causal(),
                        "ConformerAttention: global tokens take no attention mask besides the "
                        "key padding (they see and are seen by every frame)");
      return finish(attend_with_global_tokens(x, mask, std::move(relative), strips));
    }
    // A recorder sees the probabilities, which need the whole bias, whichever path computes.
    if (!strips || AttentionRecorder::active() != nullptr) {
      problem.mask.bias(relative_position_bias(relative));
    }
    if (strips) {
      if (auto* recorder = AttentionRecorder::active()) {
        recorder->record(problem, mha->options.backend(), /*self_attention=*/true);
      }
      return finish(relative_position_attention(relative));
    }
  }
  problem.dropout_p = is_training() ? o.dropout() : 0.0;
  problem.options = o.backend_options();
  if (auto* recorder = AttentionRecorder::active()) {
    recorder->record(problem, mha->options.backend(), /*self_attention=*/true);
  }
  return finish(scaled_dot_product_attention(std::move(problem), mha->options.backend()).output);
}

torch::Tensor ConformerAttentionImpl::attend_with_global_tokens(const torch::Tensor& x,
                                                                const AttentionMask& mask,
                                                                RelativeAttentionProblem relative,
                                                                bool strips) {
  const auto& o = options;
  const int64_t batch = x.size(0), frames = x.size(1), heads = o.num_heads(), e = mha->head_dim();
  const auto positions =
      torch::arange(0, std::min(o.global_tokens() * o.global_spacing(), frames), o.global_spacing(),
                    torch::TensorOptions().dtype(torch::kLong).device(x.device()));
  // The global frames' queries and every frame's keys and values as the global frames see them.
  auto global_query = relative.query, global_key = relative.key, global_value = relative.value;
  if (o.global_separate()) {
    const auto qkv = global_qkv(x).view({batch, frames, 3, heads, e}).permute({2, 0, 3, 1, 4});
    global_query = qkv[0];
    global_key = qkv[1];
    global_value = qkv[2];
    relative.global_query = global_query;
    relative.global_key = global_key.index_select(2, positions);
  }
  relative.global_positions = positions;
  auto* recorder = AttentionRecorder::active();
  torch::Tensor probs;  // [B, H, T, T], where the strips do not run or a recorder records
  if (!strips || recorder != nullptr) probs = relative_position_probabilities(relative);
  auto out = strips ? relative_position_attention(relative)
                    : torch::matmul(torch::dropout(probs, relative.dropout_p, is_training()),
                                    relative.value);

  // The global frames' own rows: every valid frame, by the content score alone. Their queries in
  // NeMo's layout: NeMo (through 3.0.0) gathers an utterance's G global queries frame-major,
  // [G, H, E], and reads them head-major, [H, G, E], so head h's n-th global query is that of
  // global frame (h·G + n) / H in head (h·G + n) mod H. A model NeMo trained learned that layout,
  // reproduced here with each utterance's own G (the global frames within its length), as NeMo
  // computes an utterance alone; NeMo's batched forward also mixes a batch's entries.
  const int64_t g = positions.size(0);
  const auto gathered = global_query.index_select(2, positions);  // [B, H, G, E]
  std::vector<int64_t> own(batch, g);  // the global frames within each utterance
  if (mask.key_lengths().defined() || mask.key_padding_mask().defined()) {
    const auto lengths = mask.key_lengths().defined()
                             ? mask.key_lengths().to(torch::kCPU, torch::kLong)
                             : mask.key_padding_mask().logical_not().sum(1).to(torch::kCPU);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t length = std::min(lengths[b].item<int64_t>(), frames);
      own[b] = std::min(g, (length + o.global_spacing() - 1) / o.global_spacing());
    }
  }
  torch::Tensor row_queries;
  if (std::all_of(own.begin(), own.end(), [&](int64_t n) { return n == g; })) {
    row_queries = gathered.transpose(1, 2).contiguous().view({batch, heads, g, e});
  } else {
    std::vector<torch::Tensor> entries;
    for (int64_t b = 0; b < batch; ++b) {
      const auto entry = gathered[b];  // [H, G, E]
      const int64_t n = own[b];
      // [H, n, E] re-read as NeMo does; the global frames beyond the utterance are padding.
      const auto read = entry.narrow(1, 0, n).transpose(0, 1).contiguous().view({heads, n, e});
      entries.push_back(torch::cat({read, entry.narrow(1, n, g - n)}, 1));
    }
    row_queries = torch::stack(entries);
  }
  auto scores =
      relative.scale * torch::matmul(row_queries, global_key.transpose(-2, -1));  // [B, H, G, T]
  const auto valid = AttentionMask()
                         .key_lengths(mask.key_lengths())
                         .key_padding_mask(mask.key_padding_mask())
                         .allowed(g, frames, x.device());
  torch::Tensor empty_rows;
  if (valid) {
    const auto safe = make_safe(*valid);
    scores =
        scores.masked_fill(safe.allowed.logical_not(), -std::numeric_limits<double>::infinity());
    empty_rows = safe.fully_masked;
  }
  auto row_probs = torch::softmax(scores, -1);
  if (empty_rows.defined()) row_probs = row_probs.masked_fill(empty_rows, 0.0);
  const auto rows =
      torch::matmul(torch::dropout(row_probs, relative.dropout_p, is_training()), global_value);
  out = out.index_copy(2, positions, rows.to(out.scalar_type()));

  if (recorder != nullptr) {
    // What each frame attends, as the math backend computes it from a bias: log p − scale·q·kᵀ,
    // the keys of probability 0 excluded.
    torch::NoGradGuard no_grad;
    probs = probs.index_copy(2, positions, row_probs.to(probs.scalar_type()));
    AttentionProblem problem;
    problem.query = relative.query;
    problem.key = relative.key;
    problem.value = relative.value;
    problem.scale = relative.scale;
    problem.mask =
        AttentionMask()
            .key_lengths(mask.key_lengths())
            .key_padding_mask(mask.key_padding_mask())
            .attn_mask(probs.eq(0))
            .bias(probs.clamp_min(std::numeric_limits<float>::min()).log() -
                  relative.scale * torch::matmul(relative.query, relative.key.transpose(-2, -1)));
    recorder->record(problem, "math", /*self_attention=*/true);
  }
  return out;
}

AttentionMask ConformerAttentionImpl::with_window(const AttentionMask& mask, int64_t queries,
                                                  int64_t keys, torch::Device device) const {
  const auto band =
      band_attention_mask(queries, keys, options.window_left(), options.window_right(), device);
  if (!band.defined()) return mask;
  auto out = mask;
  out.attn_mask(mask.attn_mask().defined() ? mask.attn_mask().to(device).logical_or(band) : band);
  return out;
}

std::tuple<torch::Tensor, torch::Tensor> ConformerAttentionImpl::merge_heads(
    torch::Tensor heads_out, const torch::Tensor& x, const AttentionMask& mask,
    torch::Tensor new_cache) {
  const auto& o = options;
  const int64_t batch = x.size(0), frames = x.size(1);
  const int64_t heads = o.num_heads(), e = mha->head_dim();
  if (o.head_gating()) {
    // As MultiheadAttention: H·gate per head, so uniform gates change nothing.
    const auto gates = mha->head_gates(x, {}, mask);
    heads_out = heads_out * (static_cast<double>(heads) * gates).view({batch, heads, 1, 1});
  }
  // [B, H, T, E] -> [B, T, H·E]
  const auto merged = heads_out.transpose(1, 2).reshape({batch, frames, heads * e});
  return {mha->proj_drop(mha->proj_packed(mha->proj, merged)), new_cache};
}

}  // namespace attnzoo
