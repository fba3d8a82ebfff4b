#include <attnzoo/layers/attention.h>

#include <attnzoo/layers/init.h>

#include <torch/nn/init.h>

#include <cmath>

namespace attnzoo {
namespace {

constexpr const char* kAttentionWho = "MultiheadAttention";

// Xavier-uniform on rows [begin, begin + rows) of `weight`, as if that slice were its own layer
// (fan_out = rows): the fused projection must initialise like separate q, k, v layers.
void xavier_uniform_rows(const torch::Tensor& weight, int64_t begin, int64_t rows) {
  const double fan_in = static_cast<double>(weight.size(1));
  const double bound = std::sqrt(6.0 / (fan_in + static_cast<double>(rows)));
  weight.narrow(0, begin, rows).uniform_(-bound, bound);
}

void zero_bias(const torch::nn::Linear& layer) {
  if (layer->bias.defined()) layer->bias.zero_();
}

// The innermost AttentionRecorder alive on this thread.
thread_local AttentionRecorder* active_recorder = nullptr;

}  // namespace

AttentionRecorder::AttentionRecorder() : previous_(active_recorder) { active_recorder = this; }

AttentionRecorder::~AttentionRecorder() { active_recorder = previous_; }

AttentionRecorder* AttentionRecorder::active() { return active_recorder; }

void AttentionRecorder::record(const AttentionProblem& problem, const std::string& backend,
                               bool self_attention) {
  torch::NoGradGuard no_grad;
  const int64_t query_len = problem.query.size(2), key_len = problem.key.size(2);
  const auto device = problem.query.device();
  AttentionRecord record;
  AttentionProblem probe = problem;
  probe.need_weights = false;
  probe.dropout_p = 0.0;
  // The mask under which math computes what `backend` computes (block_local: its pattern).
  const auto equivalent = select_attention_backend(backend, probe).math_equivalent(probe);
  if (equivalent) {
    probe.mask = *equivalent;
    probe.need_weights = true;
    record.weights = scaled_dot_product_attention(std::move(probe), "math").weights.detach();
    if (auto allowed = equivalent->allowed(query_len, key_len, device)) record.allowed = *allowed;
  }
  const auto& mask = problem.mask;
  if (self_attention && (mask.key_lengths().defined() || mask.key_padding_mask().defined())) {
    const auto valid_keys = AttentionMask()
                                .key_lengths(mask.key_lengths())
                                .key_padding_mask(mask.key_padding_mask())
                                .allowed(key_len, key_len, device);
    if (valid_keys) {
      // [B or 1, 1, 1 or S, S] -> [B, S]: the keys' validity, of which the queries are the last L.
      record.valid_queries = valid_keys->select(1, 0)
                                 .select(1, 0)
                                 .expand({problem.query.size(0), key_len})
                                 .narrow(1, key_len - query_len, query_len);
    }
  }
  records_.push_back(std::move(record));
}

MultiheadAttentionImpl::MultiheadAttentionImpl(MultiheadAttentionOptions options_)
    : options(std::move(options_)) {
  reset();
}

void MultiheadAttentionImpl::reset() {
  const auto& o = options;
  TORCH_CHECK_VALUE(o.embed_dim() > 0, kAttentionWho, ": embed_dim must be > 0, got ",
                    o.embed_dim());
  TORCH_CHECK_VALUE(o.num_heads() > 0, kAttentionWho, ": num_heads must be > 0, got ",
                    o.num_heads());
  TORCH_CHECK_VALUE(o.head_dim() >= 0, kAttentionWho,
                    ": head_dim must be >= 0 (0 = embed_dim / num_heads), got ", o.head_dim());
  if (o.head_dim() == 0) {
    TORCH_CHECK_VALUE(o.embed_dim() % o.num_heads() == 0, kAttentionWho, ": embed_dim ",
                      o.embed_dim(), " is not divisible by num_heads ", o.num_heads(),
                      "; choose another num_heads or set head_dim explicitly");
    head_dim_ = o.embed_dim() / o.num_heads();
  } else {
    head_dim_ = o.head_dim();
  }
  TORCH_CHECK_VALUE(o.kv_dim() >= 0, kAttentionWho, ": kv_dim must be >= 0, got ", o.kv_dim());
  TORCH_CHECK_VALUE(o.cross_attention() || o.kv_dim() == 0, kAttentionWho, ": kv_dim ", o.kv_dim(),
                    " is set but cross_attention is off");
  TORCH_CHECK_VALUE(o.attn_drop() >= 0.0 && o.attn_drop() < 1.0, kAttentionWho,
                    ": attn_drop must lie in [0, 1), got ", o.attn_drop());
  TORCH_CHECK_VALUE(o.proj_drop() >= 0.0 && o.proj_drop() < 1.0, kAttentionWho,
                    ": proj_drop must lie in [0, 1), got ", o.proj_drop());
  TORCH_CHECK_VALUE(!o.scale() || (std::isfinite(*o.scale()) && *o.scale() > 0.0), kAttentionWho,
                    ": scale must be finite and > 0, got ", o.scale() ? *o.scale() : 0.0);
  set_backend(o.backend());

  const int64_t inner = inner_dim();
  const auto linear = [](int64_t in, int64_t out, bool bias) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
  };
  if (o.cross_attention()) {
    const int64_t kv_dim = o.kv_dim() > 0 ? o.kv_dim() : o.embed_dim();
    q = register_module("q", linear(o.embed_dim(), inner, o.qkv_bias()));
    kv = register_module("kv", linear(kv_dim, 2 * inner, o.qkv_bias()));
  } else {
    qkv = register_module("qkv", linear(o.embed_dim(), 3 * inner, o.qkv_bias()));
  }
  if (o.qk_norm()) {
    const auto norm_options = torch::nn::LayerNormOptions({head_dim_}).eps(o.norm_eps());
    q_norm = register_module("q_norm", torch::nn::LayerNorm(norm_options));
    k_norm = register_module("k_norm", torch::nn::LayerNorm(norm_options));
  }
  if (o.head_gating()) {
    head_gate = register_module("head_gate", linear(o.embed_dim(), o.num_heads(), true));
  }
  proj = register_module("proj", linear(inner, o.embed_dim(), o.proj_bias()));
  proj_drop = register_module("proj_drop", torch::nn::Dropout(o.proj_drop()));
  reset_parameters();
}

const char* to_string(AttentionInit init) {
  switch (init) {
    case AttentionInit::kTruncNormal:
      return "trunc_normal";
    case AttentionInit::kXavierQk:
      return "xavier_qk";
    case AttentionInit::kJax:
      return "jax";
  }
  return "?";
}

void MultiheadAttentionImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  const int64_t inner = inner_dim();
  const auto scheme = options.init();
  // The projections as (layer, row offset, rows) slices: q, k, v in that order.
  struct Slice {
    torch::nn::Linear layer;
    int64_t begin;
  };
  const std::vector<Slice> slices =
      options.cross_attention() ? std::vector<Slice>{{q, 0}, {kv, 0}, {kv, inner}}
                                : std::vector<Slice>{{qkv, 0}, {qkv, inner}, {qkv, 2 * inner}};
  if (scheme == AttentionInit::kTruncNormal) {
    for (auto* layer : {&qkv, &q, &kv, &proj}) {
      if (!*layer) continue;
      trunc_normal_((*layer)->weight, 0.0, 0.02);
      zero_bias(*layer);
    }
  } else {
    // xavier_qk and jax differ only in v: a small normal draw keeps
    // the initial values close to zero there, whereas JAX's ViT draws v like q and k.
    xavier_uniform_rows(slices[0].layer->weight, slices[0].begin, inner);
    xavier_uniform_rows(slices[1].layer->weight, slices[1].begin, inner);
    if (scheme == AttentionInit::kXavierQk) {
      slices[2].layer->weight.narrow(0, slices[2].begin, inner).normal_(0.0, options.v_init_std());
    } else {
      xavier_uniform_rows(slices[2].layer->weight, slices[2].begin, inner);
    }
    torch::nn::init::xavier_uniform_(proj->weight);
    for (auto* layer : {&qkv, &q, &kv, &proj}) {
      if (*layer) zero_bias(*layer);
    }
  }
  if (head_gate) {
    // Zero logits: uniform gates, so a freshly built gated layer computes what an ungated one does.
    head_gate->weight.zero_();
    head_gate->bias.zero_();
  }
  for (auto* norm : {&q_norm, &k_norm}) {
    if (*norm) (*norm)->reset_parameters();
  }
}

void MultiheadAttentionImpl::set_backend(const std::string& backend) {
  if (!is_attention_backend(backend)) {
    std::string known = "auto";
    for (const auto& name : attention_backend_names()) known += ", " + name;
    TORCH_CHECK_VALUE(false, kAttentionWho, ": unknown attention backend '", backend,
                      "'; known backends: ", known);
  }
  options.backend(backend);
}

void MultiheadAttentionImpl::pretty_print(std::ostream& stream) const {
  stream << "attnzoo::MultiheadAttention(embed_dim=" << options.embed_dim()
         << ", num_heads=" << options.num_heads() << ", head_dim=" << head_dim_
         << (options.cross_attention() ? ", cross_attention" : "")
         << (options.head_gating() ? ", head_gating" : "") << ", backend=" << options.backend()
         << ")";
}

torch::Tensor MultiheadAttentionImpl::forward(const torch::Tensor& x, const AttentionMask& mask) {
  return run(x, torch::Tensor(), mask, /*need_weights=*/false).output;
}

torch::Tensor MultiheadAttentionImpl::forward_cross(const torch::Tensor& query,
                                                    const torch::Tensor& memory,
                                                    const AttentionMask& mask) {
  TORCH_CHECK_VALUE(memory.defined(), kAttentionWho, ": forward_cross needs a memory tensor");
  return run(query, memory, mask, /*need_weights=*/false).output;
}

AttentionOutput MultiheadAttentionImpl::forward_with_weights(const torch::Tensor& query,
                                                             const torch::Tensor& memory,
                                                             const AttentionMask& mask) {
  return run(query, memory, mask, /*need_weights=*/true);
}

torch::Tensor MultiheadAttentionImpl::head_gates(const torch::Tensor& query,
                                                 const torch::Tensor& memory,
                                                 const AttentionMask& mask) {
  TORCH_CHECK_VALUE(head_gate, "MultiheadAttention: head_gates needs head_gating: true");
  torch::Tensor pooled;  // [B, D]
  // In self-attention the key padding describes the query sequence too: pool its valid positions
  // only, so that padding does not change the gates (a plain x.mean(1) over all would).
  std::optional<torch::Tensor> valid;
  if (!memory.defined() && (mask.key_lengths().defined() || mask.key_padding_mask().defined())) {
    const int64_t length = query.size(1);
    valid = AttentionMask()
                .key_lengths(mask.key_lengths())
                .key_padding_mask(mask.key_padding_mask())
                .allowed(length, length, query.device());
  }
  if (valid) {
    const auto weights = valid->view({query.size(0), query.size(1), 1}).to(query.scalar_type());
    pooled = (query * weights).sum(1) / weights.sum(1).clamp_min(1.0);
  } else {
    pooled = query.mean(1);
  }
  return torch::softmax(head_gate(pooled), -1);
}

AttentionOutput MultiheadAttentionImpl::run(const torch::Tensor& query, const torch::Tensor& memory,
                                            const AttentionMask& mask, bool need_weights) {
  const auto& o = options;
  const int64_t heads = o.num_heads();
  const int64_t e = head_dim_;
  const int64_t inner = inner_dim();
  TORCH_CHECK_VALUE(query.defined() && query.dim() == 3 && query.size(2) == o.embed_dim(),
                    kAttentionWho, ": query must be [B, L, embed_dim = ", o.embed_dim(), "], got ",
                    query.defined() ? shape_string(query.sizes()) : "an undefined tensor");
  TORCH_CHECK_VALUE(query.is_floating_point(), kAttentionWho,
                    ": query must be floating point, got ", query.scalar_type());
  const int64_t batch = query.size(0);
  const int64_t query_len = query.size(1);

  AttentionProblem problem;
  if (o.cross_attention()) {
    const int64_t kv_dim = o.kv_dim() > 0 ? o.kv_dim() : o.embed_dim();
    TORCH_CHECK_VALUE(memory.defined(), kAttentionWho,
                      ": this layer is a cross-attention layer; call forward_cross(query, memory)");
    TORCH_CHECK_VALUE(memory.dim() == 3 && memory.size(2) == kv_dim, kAttentionWho,
                      ": memory must be [B, S, kv_dim = ", kv_dim, "], got ",
                      shape_string(memory.sizes()));
    TORCH_CHECK_VALUE(memory.size(0) == batch, kAttentionWho,
                      ": batch mismatch: query has B = ", batch,
                      ", memory has B = ", memory.size(0));
    const int64_t key_len = memory.size(1);
    // [B, L, H·E] -> [B, H, L, E] and [B, S, 2·H·E] -> 2 × [B, H, S, E], all views.
    problem.query = q_packed(q, query).view({batch, query_len, heads, e}).transpose(1, 2);
    auto kv_heads =
        kv_packed(kv, memory).view({batch, key_len, 2, heads, e}).permute({2, 0, 3, 1, 4});
    problem.key = kv_heads[0];
    problem.value = kv_heads[1];
  } else {
    TORCH_CHECK_VALUE(!memory.defined(), kAttentionWho,
                      ": this layer is a self-attention layer; set cross_attention(true) in its "
                      "options to attend to a memory sequence");
    // [B, L, 3·H·E] -> 3 × [B, H, L, E], all views of the one projection output.
    auto qkv_heads =
        qkv_packed(qkv, query).view({batch, query_len, 3, heads, e}).permute({2, 0, 3, 1, 4});
    problem.query = qkv_heads[0];
    problem.key = qkv_heads[1];
    problem.value = qkv_heads[2];
  }
  if (q_norm) {
    problem.query = q_norm(problem.query);
    problem.key = k_norm(problem.key);
  }
  problem.mask = mask;
  problem.scale = o.scale() ? *o.scale() : 1.0 / std::sqrt(static_cast<double>(e));
  problem.dropout_p = is_training() ? o.attn_drop() : 0.0;
  problem.need_weights = need_weights;
  problem.options = o.backend_options();

  if (auto* recorder = AttentionRecorder::active()) {
    recorder->record(problem, o.backend(), /*self_attention=*/!memory.defined());
  }
  if (need_weights && o.backend() != "math") {
    // The probabilities come from math, under the mask that makes it compute what the configured
    // backend computes (block_local: its pattern); an approximation has none to show.
    auto as_configured = problem;
    as_configured.need_weights = false;
    const auto equivalent =
        select_attention_backend(o.backend(), as_configured).math_equivalent(as_configured);
    TORCH_CHECK_VALUE(equivalent, kAttentionWho, ": backend '", o.backend(),
                      "' approximates softmax attention and has no attention probabilities to "
                      "return (need_weights)");
    problem.mask = *equivalent;
  }
  const auto attended =
      scaled_dot_product_attention(std::move(problem), need_weights ? "math" : o.backend());
  AttentionOutput result;
  result.weights = attended.weights;
  auto heads_out = attended.output;  // [B, H, L, E]
  if (head_gate) {
    result.head_gates = head_gates(query, memory, mask);
    heads_out =
        heads_out * (static_cast<double>(heads) * result.head_gates).view({batch, heads, 1, 1});
  }
  // [B, H, L, E] -> [B, L, H·E]
  auto merged = heads_out.transpose(1, 2).reshape({batch, query_len, inner});
  result.output = proj_drop(proj_packed(proj, merged));
  return result;
}

int64_t MultiheadAttentionImpl::set_int8(bool on) {
  for (auto* packed : {&qkv_packed, &q_packed, &kv_packed, &proj_packed}) packed->set_int8(on);
  return (qkv ? 1 : 0) + (q ? 1 : 0) + (kv ? 1 : 0) + (proj ? 1 : 0);
}

}  // namespace attnzoo
