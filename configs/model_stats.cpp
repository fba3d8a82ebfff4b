#include <attnzoo/configs/model_stats.h>

#include <attnzoo/configs/model_family.h>

#include <attnzoo/models/attention_decoder.h>
#include <attnzoo/models/conformer_frontend.h>

namespace attnzoo {
namespace {

int64_t mlp_hidden(const ViTOptions& o) {
  return static_cast<int64_t>(static_cast<double>(o.embed_dim()) * o.mlp_ratio());
}

}  // namespace

int64_t vit_parameter_count(const ViTOptions& o) {
  const int64_t d = o.embed_dim(), hidden = mlp_hidden(o), head_dim = d / o.num_heads();
  const int64_t layer_norm = 2 * d;
  const auto [rows, cols] = vit_grid(o, o.img_size(), vit_img_width(o));
  const int64_t prefix = vit_prefix_tokens(o);
  int64_t n = 0;
  // Patch embedding: a Conv2d with kernel = patch; no bias under pre_norm (CLIP).
  n += d * o.in_chans() * o.patch_size() * o.patch_size() + (o.pre_norm() ? 0 : d);
  n += prefix * d;  // class, distillation and register tokens
  n += (rows * cols + (o.no_embed_class() ? 0 : prefix)) * d;  // pos_embed
  if (o.pre_norm()) n += layer_norm;
  int64_t block = 2 * layer_norm;
  block += 3 * d * d + (o.qkv_bias() ? 3 * d : 0);
  if (o.qk_norm()) block += 2 * 2 * head_dim;  // q_norm and k_norm over each head's features
  block += d * d + (o.proj_bias() ? d : 0);
  block += d * hidden + hidden + hidden * d + d;  // fc1, fc2 (with biases)
  if (o.init_values()) block += 2 * d;            // LayerScale ls1, ls2
  n += o.depth() * block;
  // The final norm sits before pooling (norm) or after it (fc_norm): the same size either way.
  if (o.final_norm()) n += layer_norm;
  if (o.head_norm()) n += layer_norm;
  const int64_t heads = o.dist_token() && o.dist_head() && o.global_pool() == GlobalPool::kToken
                            ? 2
                            : 1;  // + head_dist
  if (o.num_classes() > 0) n += heads * (d * o.num_classes() + o.num_classes());
  return n;
}

int64_t vit_macs(const ViTOptions& o, int64_t height, int64_t width) {
  const int64_t d = o.embed_dim(), hidden = mlp_hidden(o);
  const auto [rows, cols] = vit_grid(o, height, width);
  const int64_t patches = rows * cols;
  const int64_t tokens = patches + vit_prefix_tokens(o);
  int64_t macs = patches * d * o.in_chans() * o.patch_size() * o.patch_size();
  int64_t block = tokens * d * 3 * d;  // qkv
  block += 2 * tokens * tokens * d;    // q·kᵀ and attention·v, over all heads
  block += tokens * d * d;             // proj
  block += 2 * tokens * d * hidden;    // fc1, fc2
  macs += o.depth() * block;
  if (o.num_classes() > 0) {
    // One pooled vector, or every token without pooling.
    const int64_t pooled = o.global_pool() == GlobalPool::kNone ? tokens : 1;
    const int64_t heads = o.dist_token() && o.dist_head() && o.global_pool() == GlobalPool::kToken
                              ? 2
                              : 1;  // + head_dist
    macs += heads * pooled * d * o.num_classes();
  }
  return macs;
}

namespace {

// Channels of a Conformer's subsampling convolutions.
int64_t subsampling_channels(const ConformerEncoderOptions& o) {
  return o.subsampling_channels() > 0 ? o.subsampling_channels() : o.blocks().input_dim();
}

}  // namespace

int64_t conformer_parameter_count(const ConformerEncoderOptions& o) {
  const auto& b = o.blocks();
  const int64_t d = b.input_dim(), ffn = b.ffn_dim(), k = b.depthwise_conv_kernel_size();
  const int64_t layer_norm = 2 * d;
  int64_t n = 0;
  if (o.subsampling() != Subsampling::kNone) {
    const auto steps = conformer_subsampling_steps(o.subsampling());
    const int64_t c = subsampling_channels(o);
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].pool) continue;
      const int64_t in = i == 0 ? 1 : c;
      const int64_t per_output = steps[i].depthwise ? 1 : in;
      n += c * per_output * steps[i].kernel * steps[i].kernel + c;
    }
    n += c * subsampled_length(steps, o.input_dim()) * d + d;  // out
  }
  // The biases of the feed-forward, attention and convolution layers (ConformerOptions::bias).
  const int64_t bias = b.bias() ? 1 : 0;
  int64_t block = 2 * (layer_norm + d * ffn + bias * ffn + ffn * d + bias * d);  // ffn1, ffn2
  block += layer_norm + 3 * d * d + bias * 3 * d + d * d + bias * d;  // attn_norm, qkv, proj
  const bool relative = is_relative(o.position());
  if (relative) block += d * d + 2 * d;  // linear_pos (no bias), pos_bias_u, pos_bias_v
  if (b.global_tokens() > 0 && b.global_separate()) block += 3 * d * d + bias * 3 * d;
  if (b.head_gating()) block += d * b.num_heads() + b.num_heads();  // head_gate
  block += layer_norm + d * 2 * d + bias * 2 * d;                   // conv.norm, pointwise_conv1
  block +=
      d * k + bias * d + 2 * d + d * d + bias * d;  // depthwise_conv, conv_norm, pointwise_conv2
  block += layer_norm;                              // final_norm
  n += b.num_layers() * block;
  if (o.final_norm()) n += layer_norm;
  if (o.vocab_size() > 0 && o.ctc_head()) n += d * o.vocab_size() + o.vocab_size();
  if (o.num_classes() > 0) n += d * o.num_classes() + o.num_classes();
  if (o.decoder()) n += attention_decoder_parameter_count(*o.decoder());
  if (o.transducer()) {
    const auto& r = *o.transducer();
    const int64_t h = r.pred_hidden(), j = r.joint_hidden();
    const int64_t outputs = r.vocab_size() + static_cast<int64_t>(r.durations().size());
    n += r.vocab_size() * h;                             // embed
    n += r.pred_layers() * (4 * h * 2 * h + 8 * h);      // LSTM: both matrices and biases per layer
    n += d * j + j + h * j + j + j * outputs + outputs;  // enc, pred, out
  }
  return n;
}

int64_t conformer_macs(const ConformerEncoderOptions& o, int64_t input_frames) {
  const auto& b = o.blocks();
  const int64_t d = b.input_dim(), ffn = b.ffn_dim(), k = b.depthwise_conv_kernel_size();
  int64_t macs = 0;
  int64_t t = input_frames;
  if (o.subsampling() != Subsampling::kNone) {
    const auto steps = conformer_subsampling_steps(o.subsampling());
    const int64_t c = subsampling_channels(o);
    int64_t f = o.input_dim();
    for (size_t i = 0; i < steps.size(); ++i) {
      t = subsampled_length({steps[i]}, t);
      f = subsampled_length({steps[i]}, f);
      if (steps[i].pool) continue;
      const int64_t in = i == 0 ? 1 : c;
      const int64_t per_output = steps[i].depthwise ? 1 : in;
      macs += t * f * c * per_output * steps[i].kernel * steps[i].kernel;
    }
    macs += t * c * f * d;  // out
  }
  int64_t block = 2 * 2 * t * d * ffn;  // ffn1, ffn2
  block += 3 * t * d * d + t * d * d;   // qkv, proj
  // The keys each frame attends: all, or those of its window (attention_left/right).
  const bool window = b.attention_left() >= 0 && b.attention_right() >= 0;
  const int64_t reach = window ? std::min(t, b.attention_left() + b.attention_right() + 1) : t;
  block += 2 * t * reach * d;  // q·kᵀ and attention·v over all heads
  if (is_relative(o.position())) {
    const int64_t positions = o.position() == ConformerPosition::kRelPos ? 2 * t - 1 : t;
    block += positions * d * d;                     // linear_pos
    block += t * (window ? reach : positions) * d;  // (q + v)·p: the positions in reach
    block += t * d;                                 // u·k
  }
  if (b.global_tokens() > 0) {
    const int64_t g =
        std::min(b.global_tokens(), (t + b.global_spacing() - 1) / b.global_spacing());
    block += 2 * t * g * d + 2 * g * t * d;  // every frame with the global ones, and theirs
    if (b.global_separate()) block += 3 * t * d * d;
  }
  block += t * d * 2 * d + t * d * k + t * d * d;  // pointwise_conv1, depthwise, pointwise_conv2
  macs += b.num_layers() * block;
  if (o.vocab_size() > 0 && o.ctc_head()) macs += t * d * o.vocab_size();
  if (o.num_classes() > 0) macs += d * o.num_classes();
  if (o.transducer()) {
    // Greedy decoding's least: one joint step per frame (the encoder side once, the joint's
    // output layer) and one prediction step per token, counted as one per frame.
    const auto& r = *o.transducer();
    const int64_t h = r.pred_hidden(), j = r.joint_hidden();
    const int64_t outputs = r.vocab_size() + static_cast<int64_t>(r.durations().size());
    macs += t * (d * j + h * j + j * outputs + r.pred_layers() * 4 * h * 2 * h);
  }
  return macs;
}

ModelStats model_stats(const ModelConfig& config) {
  return model_family(config.family).stats(config);
}

}  // namespace attnzoo
