#include <attnzoo/models/vit.h>

#include <attnzoo/kernels/ops.h>
#include <attnzoo/layers/fused_epilogues.h>
#include <attnzoo/layers/init.h>

#include <torch/nn/functional/upsampling.h>

namespace attnzoo {
namespace {

constexpr const char* kVitWho = "VisionTransformer";

bool uses_fc_norm(const ViTOptions& o) {
  if (o.fc_norm()) return *o.fc_norm();
  const auto pool = o.global_pool();
  return pool == GlobalPool::kAvg || pool == GlobalPool::kMax || pool == GlobalPool::kAvgMax;
}

}  // namespace

const char* to_string(GlobalPool pool) {
  switch (pool) {
    case GlobalPool::kToken:
      return "token";
    case GlobalPool::kAvg:
      return "avg";
    case GlobalPool::kMax:
      return "max";
    case GlobalPool::kAvgMax:
      return "avgmax";
    case GlobalPool::kClsDist:
      return "cls_dist";
    case GlobalPool::kNone:
      return "none";
  }
  return "?";
}

ViTBlockImpl::ViTBlockImpl(const ViTOptions& options, double drop_path_rate)
    : options_(options), drop_path_rate_(drop_path_rate) {
  reset();
}

void ViTBlockImpl::reset() {
  const auto& o = options_;
  const int64_t d = o.embed_dim();
  norm1 = register_module("norm1", layer_norm(d, o.norm_eps()));
  attn = register_module("attn", MultiheadAttention(MultiheadAttentionOptions(d, o.num_heads())
                                                        .qkv_bias(o.qkv_bias())
                                                        .proj_bias(o.proj_bias())
                                                        .qk_norm(o.qk_norm())
                                                        .norm_eps(o.norm_eps())
                                                        .attn_drop(o.attn_drop_rate())
                                                        .proj_drop(o.proj_drop_rate())
                                                        .head_gating(o.head_gating())
                                                        .backend(o.attention_backend())
                                                        .backend_options(o.attention_options())));
  norm2 = register_module("norm2", layer_norm(d, o.norm_eps()));
  const auto hidden = static_cast<int64_t>(static_cast<double>(d) * o.mlp_ratio());
  mlp = register_module(
      "mlp", Mlp(MlpOptions(d, hidden).activation(o.activation()).drop(o.proj_drop_rate())));
  if (o.init_values()) {
    ls1 = register_module("ls1", LayerScale(d, *o.init_values()));
    ls2 = register_module("ls2", LayerScale(d, *o.init_values()));
  }
}

torch::Tensor ViTBlockImpl::forward(const torch::Tensor& x, torch::Tensor* weights) {
  const bool training = is_training();
  torch::Tensor a;
  if (weights) {
    auto out = attn->forward_with_weights(norm1(x));
    a = out.output;
    *weights = out.weights;
  } else {
    a = attn(norm1(x));
  }
  if (ls1) a = ls1(a);
  torch::Tensor y, m;
  if (fused_add_layer_norm(x, training)) {
    // y = x + branch and norm2(y) in one op (kernels/ops.h: add_layer_norm).
    const auto [sum, normed] =
        kernels::add_layer_norm(drop_path(a, drop_path_rate_, training), x, norm2->weight,
                                norm2->bias, norm2->options.eps());
    y = sum;
    m = mlp(normed);
  } else {
    y = x + drop_path(a, drop_path_rate_, training);
    m = mlp(norm2(y));
  }
  if (ls2) m = ls2(m);
  return y + drop_path(m, drop_path_rate_, training);
}

std::tuple<torch::Tensor, torch::Tensor> ViTBlockImpl::forward_fused(
    const torch::Tensor& x, const torch::Tensor& h, const torch::nn::LayerNormImpl* next_norm) {
  auto a = attn(h);
  if (ls1) a = ls1(a);
  const auto [y, normed] =
      kernels::add_layer_norm(a, x, norm2->weight, norm2->bias, norm2->options.eps());
  auto m = mlp(normed);
  if (ls2) m = ls2(m);
  if (!next_norm) return {y + m, torch::Tensor()};
  return kernels::add_layer_norm(m, y, next_norm->weight, next_norm->bias,
                                 next_norm->options.eps());
}

VisionTransformerImpl::VisionTransformerImpl(ViTOptions options_) : options(std::move(options_)) {
  reset();
}

int64_t vit_prefix_tokens(const ViTOptions& o) {
  return (o.class_token() ? 1 : 0) + (o.dist_token() ? 1 : 0) + o.reg_tokens();
}

int64_t vit_img_width(const ViTOptions& o) {
  return o.img_width() > 0 ? o.img_width() : o.img_size();
}

int64_t vit_patch_stride(const ViTOptions& o) {
  return o.patch_stride() > 0 ? o.patch_stride() : o.patch_size();
}

std::pair<int64_t, int64_t> vit_grid(const ViTOptions& o, int64_t height, int64_t width) {
  const int64_t p = o.patch_size(), s = vit_patch_stride(o);
  return {(height - p) / s + 1, (width - p) / s + 1};
}

int64_t VisionTransformerImpl::num_prefix_tokens() const { return vit_prefix_tokens(options); }

std::pair<int64_t, int64_t> VisionTransformerImpl::grid() const {
  return vit_grid(options, options.img_size(), vit_img_width(options));
}

void VisionTransformerImpl::reset() {
  const auto& o = options;
  TORCH_CHECK_VALUE(o.img_size() > 0 && o.patch_size() > 0, kVitWho,
                    ": img_size and patch_size must be > 0, got ", o.img_size(), " and ",
                    o.patch_size());
  TORCH_CHECK_VALUE(o.img_width() >= 0 && o.patch_stride() >= 0, kVitWho,
                    ": img_width and patch_stride must be >= 0");
  const int64_t width = vit_img_width(o);
  if (vit_patch_stride(o) == o.patch_size()) {
    TORCH_CHECK_VALUE(o.img_size() % o.patch_size() == 0 && width % o.patch_size() == 0, kVitWho,
                      ": img_size ", o.img_size(), "x", width, " is not divisible by patch_size ",
                      o.patch_size());
  }
  TORCH_CHECK_VALUE(o.img_size() >= o.patch_size() && width >= o.patch_size(), kVitWho,
                    ": img_size ", o.img_size(), "x", width, " is smaller than patch_size ",
                    o.patch_size());
  TORCH_CHECK_VALUE(o.embed_dim() > 0 && o.depth() > 0 && o.num_heads() > 0, kVitWho,
                    ": embed_dim, depth and num_heads must be > 0, got ", o.embed_dim(), ", ",
                    o.depth(), ", ", o.num_heads());
  TORCH_CHECK_VALUE(o.embed_dim() % o.num_heads() == 0, kVitWho, ": embed_dim ", o.embed_dim(),
                    " is not divisible by num_heads ", o.num_heads());
  TORCH_CHECK_VALUE(o.mlp_ratio() > 0.0, kVitWho, ": mlp_ratio must be > 0, got ", o.mlp_ratio());
  TORCH_CHECK_VALUE(o.num_classes() >= 0 && o.reg_tokens() >= 0, kVitWho,
                    ": num_classes and reg_tokens must be >= 0");
  const auto pool = o.global_pool();
  TORCH_CHECK_VALUE(pool != GlobalPool::kToken || o.class_token(), kVitWho,
                    ": global_pool 'token' needs class_token");
  TORCH_CHECK_VALUE(!o.dist_token() || o.class_token(), kVitWho,
                    ": dist_token needs class_token (it follows the class token)");
  TORCH_CHECK_VALUE(pool != GlobalPool::kClsDist || o.dist_token(), kVitWho,
                    ": global_pool 'cls_dist' needs class_token and dist_token");
  TORCH_CHECK_VALUE(o.drop_path_rate() >= 0.0 && o.drop_path_rate() < 1.0, kVitWho,
                    ": drop_path_rate must lie in [0, 1), got ", o.drop_path_rate());

  const int64_t d = o.embed_dim();
  patch_embed =
      register_module("patch_embed", PatchEmbed(PatchEmbedOptions(o.in_chans(), d, o.patch_size())
                                                    .stride(o.patch_stride())
                                                    .bias(!o.pre_norm())));
  if (o.class_token()) cls_token = register_parameter("cls_token", torch::zeros({1, 1, d}));
  if (o.dist_token()) dist_token = register_parameter("dist_token", torch::zeros({1, 1, d}));
  if (o.reg_tokens() > 0) {
    reg_token = register_parameter("reg_token", torch::zeros({1, o.reg_tokens(), d}));
  }
  const auto [rows, cols] = grid();
  const int64_t patches = rows * cols;
  const int64_t embed_len = o.no_embed_class() ? patches : patches + num_prefix_tokens();
  pos_embed = register_parameter("pos_embed", torch::zeros({1, embed_len, d}));
  if (o.pre_norm()) norm_pre = register_module("norm_pre", layer_norm(d, o.norm_eps()));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.depth(); ++i) {
    // Stochastic depth grows linearly with depth (Huang et al. 2016; timm's dpr).
    const double rate =
        o.depth() > 1 ? o.drop_path_rate() * static_cast<double>(i) / (o.depth() - 1) : 0.0;
    blocks->push_back(ViTBlock(o, rate));
  }
  const bool fc = uses_fc_norm(o);
  if (o.final_norm() && !fc) norm = register_module("norm", layer_norm(d, o.norm_eps()));
  if (o.final_norm() && fc) fc_norm = register_module("fc_norm", layer_norm(d, o.norm_eps()));
  if (o.head_norm()) head_norm = register_module("head_norm", layer_norm(d, o.norm_eps()));
  if (o.num_classes() > 0) {
    head = register_module("head", torch::nn::Linear(d, o.num_classes()));
    if (o.dist_token() && o.dist_head() && pool == GlobalPool::kToken) {
      head_dist = register_module("head_dist", torch::nn::Linear(d, o.num_classes()));
    }
  }
  reset_parameters();
}

void VisionTransformerImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  trunc_normal_(pos_embed, 0.0, 0.02);
  if (cls_token.defined()) cls_token.normal_(0.0, 1e-6);
  if (dist_token.defined()) trunc_normal_(dist_token, 0.0, 0.02);
  if (reg_token.defined()) reg_token.normal_(0.0, 1e-6);
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* linear = module->as<torch::nn::Linear>()) {
      trunc_normal_(linear->weight, 0.0, 0.02);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* norm_layer = module->as<torch::nn::LayerNorm>()) {
      norm_layer->reset_parameters();
    }
  }
  // Head gates start uniform (zero logits), so gating starts as the ungated model.
  for (const auto& block : *blocks) {
    if (auto& gate = block->as<ViTBlockImpl>()->attn->head_gate) {
      gate->weight.zero_();
      gate->bias.zero_();
    }
  }
  // The patch projection keeps LibTorch's Conv2d init (kaiming-uniform), as timm does for 'timm'.
}

torch::Tensor resample_pos_embed(const torch::Tensor& pos_embed, int64_t num_prefix,
                                 int64_t old_rows, int64_t old_cols, int64_t new_rows,
                                 int64_t new_cols, PosEmbedResampling rule) {
  TORCH_CHECK_VALUE(pos_embed.dim() == 3 && pos_embed.size(0) == 1 &&
                        pos_embed.size(1) == num_prefix + old_rows * old_cols,
                    "resample_pos_embed: expected [1, ", num_prefix, " + ", old_rows, "·", old_cols,
                    ", D], got ", pos_embed.sizes());
  if (old_rows == new_rows && old_cols == new_cols) return pos_embed;
  const int64_t d = pos_embed.size(2);
  const auto prefix = pos_embed.narrow(1, 0, num_prefix);
  auto grid = pos_embed.narrow(1, num_prefix, old_rows * old_cols)
                  .to(torch::kFloat)
                  .reshape({1, old_rows, old_cols, d})
                  .permute({0, 3, 1, 2});
  namespace F = torch::nn::functional;
  grid = F::interpolate(grid, F::InterpolateFuncOptions()
                                  .size(std::vector<int64_t>{new_rows, new_cols})
                                  .mode(torch::kBicubic)
                                  .align_corners(rule == PosEmbedResampling::kTorchvision)
                                  .antialias(rule == PosEmbedResampling::kTimm));
  grid = grid.permute({0, 2, 3, 1}).reshape({1, new_rows * new_cols, d}).to(pos_embed.dtype());
  return num_prefix > 0 ? torch::cat({prefix, grid}, 1) : grid;
}

torch::Tensor VisionTransformerImpl::resampled_pos_embed(int64_t rows, int64_t cols) const {
  const auto [old_rows, old_cols] = grid();
  return resample_pos_embed(pos_embed, options.no_embed_class() ? 0 : num_prefix_tokens(), old_rows,
                            old_cols, rows, cols);
}

torch::Tensor VisionTransformerImpl::forward_features(const torch::Tensor& images,
                                                      ViTIntermediates* intermediates,
                                                      bool attention_weights) {
  auto grid = patch_embed(images);  // [B, rows, cols, D]
  const int64_t batch = grid.size(0), rows = grid.size(1), cols = grid.size(2);
  auto x = grid.reshape({batch, rows * cols, options.embed_dim()});
  const auto pos = resampled_pos_embed(rows, cols);
  std::vector<torch::Tensor> prefix;
  if (cls_token.defined()) prefix.push_back(cls_token.expand({batch, -1, -1}));
  if (dist_token.defined()) prefix.push_back(dist_token.expand({batch, -1, -1}));
  if (reg_token.defined()) prefix.push_back(reg_token.expand({batch, -1, -1}));
  if (options.no_embed_class()) {
    x = x + pos;
    if (!prefix.empty()) x = torch::cat({torch::cat(prefix, 1), x}, 1);
  } else {
    if (!prefix.empty()) x = torch::cat({torch::cat(prefix, 1), x}, 1);
    x = x + pos;
  }
  x = torch::dropout(x, options.pos_drop_rate(), is_training());
  if (norm_pre) x = norm_pre(x);
  if (!intermediates && !blocks->is_empty() && fused_add_layer_norm(x, is_training())) {
    // Every block boundary as one add_layer_norm: block i's output and the norm after it (block
    // i + 1's norm1, or the final norm) come out of the same pass.
    const size_t depth = blocks->size();
    auto h = blocks[0]->as<ViTBlockImpl>()->norm1(x);
    for (size_t i = 0; i < depth; ++i) {
      const torch::nn::LayerNormImpl* next = i + 1 < depth
                                                 ? blocks[i + 1]->as<ViTBlockImpl>()->norm1.get()
                                                 : (norm.is_empty() ? nullptr : norm.get());
      std::tie(x, h) = blocks[i]->as<ViTBlockImpl>()->forward_fused(x, h, next);
    }
    return norm ? h : x;
  }
  for (const auto& module : *blocks) {
    auto& block = *module->as<ViTBlockImpl>();
    torch::Tensor weights;
    x = block.forward(x, intermediates && attention_weights ? &weights : nullptr);
    if (intermediates) {
      intermediates->blocks.push_back(x);
      if (attention_weights) intermediates->attention.push_back(weights);
    }
  }
  if (norm) x = norm(x);
  return x;
}

torch::Tensor VisionTransformerImpl::forward_head(const torch::Tensor& tokens, bool pre_logits) {
  const auto pool = options.global_pool();
  torch::Tensor x;
  const int64_t prefix = num_prefix_tokens();
  if (pool == GlobalPool::kToken && head_dist) {
    // DeiT distilled (timm's VisionTransformerDistilled): the class head and the distillation
    // head each on its token, their logits averaged.
    auto cls = torch::dropout(tokens.select(1, 0), options.drop_rate(), is_training());
    auto dist = torch::dropout(tokens.select(1, 1), options.drop_rate(), is_training());
    if (pre_logits) return (cls + dist) / 2;
    return (head(cls) + head_dist(dist)) / 2;
  }
  if (pool == GlobalPool::kToken) {
    x = tokens.select(1, 0);
  } else if (pool == GlobalPool::kClsDist) {
    x = (tokens.select(1, 0) + tokens.select(1, 1)) / 2;
  } else if (pool == GlobalPool::kAvg) {
    x = tokens.narrow(1, prefix, tokens.size(1) - prefix).mean(1);
  } else if (pool == GlobalPool::kMax) {
    x = std::get<0>(tokens.narrow(1, prefix, tokens.size(1) - prefix).max(1));
  } else if (pool == GlobalPool::kAvgMax) {
    const auto patches = tokens.narrow(1, prefix, tokens.size(1) - prefix);
    x = 0.5 * (patches.mean(1) + std::get<0>(patches.max(1)));
  } else {
    x = tokens;  // kNone
  }
  if (fc_norm) x = fc_norm(x);
  if (head_norm) x = head_norm(x);
  x = torch::dropout(x, options.drop_rate(), is_training());
  if (pre_logits || !head) return x;
  return head(x);
}

torch::Tensor VisionTransformerImpl::forward(const torch::Tensor& images) {
  return forward_head(forward_features(images));
}

}  // namespace attnzoo
