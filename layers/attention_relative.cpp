#include <attnzoo/kernels/ops.h>
#include <attnzoo/layers/attention_internal.h>
#include <attnzoo/layers/attention_relative.h>
#include <attnzoo/layers/attention_tiles.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

namespace attnzoo {
namespace {

using detail::accumulation_type;
using detail::as_4d;
using detail::reduce_to;
using detail::tile_of;
using detail::TileMasks;

constexpr double kInf = std::numeric_limits<double>::infinity();
// A strip's scores and position scores are kept near this size (bytes) when strip_rows is 0, so
// that they stay in the caches: conformer_s's attention at T = 1500 runs fastest with strips of
// 32 to 64 rows, and at T = 30000 with the fewest rows (alternating runs of `attnzoo bench model`).
constexpr int64_t kStripBytes = int64_t{3} << 20;

// What the strips need besides the tensors.
struct Spec {
  TileMasks masks;
  RelativeLayout layout = RelativeLayout::kShifted;
  double scale = 1.0;
  double dropout_p = 0.0;
  uint64_t seed = 0;  // of the dropout masks
  int64_t rows = 1;   // queries per strip
  int64_t window_left = -1, window_right = -1;
};

// Longformer's global keys as the strips see them; empty (undefined key) when the problem has none.
struct GlobalKeys {
  torch::Tensor query;     // [B, H, L, E], times the scale, in the accumulation type
  torch::Tensor key;       // [B, H, G, E]
  torch::Tensor value;     // [B, H, G, Ev]
  torch::Tensor excluded;  // [B, 1, 1, G] bool, true = padding; undefined when none is
  bool defined() const { return key.defined(); }
  int64_t count() const { return defined() ? key.size(2) : 0; }

  // The scores of the strip [i0, i0 + lc) against the global keys, [B, H, lc, G], masked.
  torch::Tensor scores(int64_t i0, int64_t lc) const {
    auto s = torch::matmul(query.narrow(2, i0, lc), key.transpose(-2, -1));
    if (excluded.defined()) s.masked_fill_(excluded, -kInf);
    return s;
  }
};

// The strips' view of the global keys (all undefined: none).
GlobalKeys global_keys(const std::optional<torch::Tensor>& query,
                       const std::optional<torch::Tensor>& key,
                       const std::optional<torch::Tensor>& value,
                       const std::optional<torch::Tensor>& excluded, double scale,
                       torch::ScalarType acc) {
  GlobalKeys g;
  if (!key) return g;
  g.query = query->to(acc) * scale;
  g.key = key->to(acc);
  g.value = value->to(acc);
  if (excluded) g.excluded = *excluded;
  return g;
}

// Whether flash_attention_relative_cpu computes the problem's forward pass: float32 or bfloat16
// on a CPU with the kernel, Transformer-XL's shifted layout, the value's head dim the query's,
// key lengths as the only exclusion, and none of bias, window, global keys, dropout or an
// explicit strip size (which asks for the strips).
bool relative_kernel_applies(const RelativeAttentionProblem& p) {
  const auto dtype = p.query.scalar_type();
  const auto& m = p.mask;
  return (dtype == torch::kFloat || dtype == torch::kBFloat16) &&
         p.layout == RelativeLayout::kShifted && p.value.size(3) == p.query.size(3) &&
         p.key.scalar_type() == dtype && p.value.scalar_type() == dtype &&
         !m.key_padding_mask().defined() && !m.attn_mask().defined() && !m.causal() &&
         !m.bias().defined() && p.window_left < 0 && p.window_right < 0 &&
         !(p.global_positions.defined() && p.global_positions.size(0) > 0) && p.dropout_p == 0.0 &&
         p.strip_rows == 0 && kernels::flash_attention_cpu_vector_width() > 0;
}

// The keys a strip of queries [i0, i0 + lc) out of L over S keys may see: [first, first + count)
// (all S without a window).
std::pair<int64_t, int64_t> strip_keys(const Spec& spec, int64_t i0, int64_t lc, int64_t l,
                                       int64_t s) {
  const int64_t position = s - l + i0;  // the first query's key position
  const int64_t first =
      spec.window_left < 0 ? 0 : std::max<int64_t>(position - spec.window_left, 0);
  const int64_t end =
      spec.window_right < 0 ? s : std::min<int64_t>(position + lc - 1 + spec.window_right + 1, s);
  return {first, std::max<int64_t>(end - first, 0)};
}

// The position scores of a strip aligned to the keys, [B, H, lc, S], added into `scores`.
// position_scores: (q + v)·scale times the strip's position rows, [B, H, lc, Ps]; for kShifted
// Ps = lc + S − 1 and key j of query a reads column lc − 1 − a + j, which is the strided view
// (row stride Ps − 1, starting at column lc − 1) of the contiguous scores.
torch::Tensor aligned(torch::Tensor position_scores, RelativeLayout layout, int64_t keys) {
  if (layout == RelativeLayout::kKeyPositions) return position_scores;
  const int64_t lc = position_scores.size(2), ps = position_scores.size(3);
  if (position_scores.stride(3) != 1 || position_scores.stride(2) != ps) {
    position_scores = position_scores.contiguous();
  }
  return position_scores.as_strided(
      {position_scores.size(0), position_scores.size(1), lc, keys},
      {position_scores.stride(0), position_scores.stride(1), ps - 1, 1},
      position_scores.storage_offset() + lc - 1);
}

// The position rows a strip of queries [i0, i0 + lc) out of L reads for keys [j0, j0 + sc) out of
// S: [first, first + count).
std::pair<int64_t, int64_t> position_rows(RelativeLayout layout, int64_t i0, int64_t lc, int64_t l,
                                          int64_t j0, int64_t sc) {
  if (layout == RelativeLayout::kKeyPositions) return {j0, sc};
  return {l - i0 - lc + j0, lc + sc - 1};
}

// The strip's dropout keep-mask scaled by 1 / (1 − p), [B, H, lc, S], from the call's seed.
torch::Tensor keep_mask(const Spec& spec, int64_t i0, const torch::Tensor& like) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(spec.seed + static_cast<uint64_t>(i0));
  return torch::empty_like(like)
      .bernoulli_(1.0 - spec.dropout_p, generator)
      .div_(1.0 - spec.dropout_p);
}

// The masked scores of the strip [i0, i0 + lc) over keys [j0, j0 + sc): [B, H, lc, sc]. qu, qv:
// (q + u)·scale and (q + v)·scale; positions: [1 or B, H, P, E]. When `empty_rows` is given and
// the mask excludes something, it receives the rows that exclude every key (true), broadcastable
// to [B, H, lc, 1].
torch::Tensor strip_scores(const Spec& spec, const torch::Tensor& qu, const torch::Tensor& qv,
                           const torch::Tensor& key, const torch::Tensor& positions,
                           const torch::Tensor& bias4, int64_t i0, int64_t lc, int64_t j0,
                           int64_t sc, torch::Tensor* empty_rows = nullptr) {
  const int64_t l = qu.size(2), s = key.size(2);
  auto scores = torch::matmul(qu.narrow(2, i0, lc), key.narrow(2, j0, sc).transpose(-2, -1));
  const auto [first, count] = position_rows(spec.layout, i0, lc, l, j0, sc);
  const auto position_scores =
      torch::matmul(qv.narrow(2, i0, lc), positions.narrow(2, first, count).transpose(-2, -1));
  scores.add_(aligned(position_scores, spec.layout, sc));
  if (bias4.defined()) scores.add_(tile_of(bias4, i0, lc, j0, sc).to(scores.scalar_type()));
  auto allowed = spec.masks.allowed(i0, lc, j0, sc, scores.device());
  if (spec.window_left >= 0 || spec.window_right >= 0) {
    // The band within the tile: key j0 + b against the query at key position s − l + i0 + a.
    const auto index = torch::TensorOptions().dtype(torch::kLong).device(scores.device());
    const auto distance = torch::arange(j0, j0 + sc, index).view({1, -1}) -
                          torch::arange(s - l + i0, s - l + i0 + lc, index).view({-1, 1});
    auto band = torch::ones({lc, sc}, index.dtype(torch::kBool));
    if (spec.window_left >= 0) band.logical_and_(distance >= -spec.window_left);
    if (spec.window_right >= 0) band.logical_and_(distance <= spec.window_right);
    band = band.view({1, 1, lc, sc});
    allowed = allowed ? allowed->logical_and(band) : band;
  }
  if (allowed) {
    scores.masked_fill_(allowed->logical_not(), -kInf);
    if (empty_rows != nullptr) *empty_rows = allowed->any(-1, /*keepdim=*/true).logical_not();
  }
  return scores;
}

// The forward of every strip. With `lse` defined, its rows receive log Σ_j exp(score) (+inf for a
// row that excludes every key, so that exp(score − lse) is 0 there); otherwise only the output is
// computed (inference).
torch::Tensor forward_strips(const Spec& spec, const torch::Tensor& qu, const torch::Tensor& qv,
                             const torch::Tensor& key, const torch::Tensor& value,
                             const torch::Tensor& positions, const torch::Tensor& bias4,
                             const GlobalKeys& globals, torch::Tensor* lse) {
  const int64_t b = qu.size(0), h = qu.size(1), l = qu.size(2), ev = value.size(3);
  const int64_t g = globals.count();
  auto out = torch::empty({b, h, l, ev}, qu.options());
  for (int64_t i0 = 0; i0 < l; i0 += spec.rows) {
    const int64_t lc = std::min(spec.rows, l - i0);
    const auto [j0, sc] = strip_keys(spec, i0, lc, l, key.size(2));
    if (sc == 0 && g == 0) {  // no key in reach: the layer's answer for a row that sees none
      out.narrow(2, i0, lc).zero_();
      if (lse != nullptr) lse->narrow(2, i0, lc).fill_(kInf);
      continue;
    }
    torch::Tensor empty_rows;
    auto scores =
        sc > 0 ? strip_scores(spec, qu, qv, key, positions, bias4, i0, lc, j0, sc, &empty_rows)
               : torch::empty({b, h, lc, 0}, qu.options());
    if (g > 0) {
      // The global keys' columns first; a row may now see a global key where it saw none.
      scores = torch::cat({globals.scores(i0, lc), scores}, -1);
      empty_rows = torch::isneginf(std::get<0>(scores.max(-1, /*keepdim=*/true)));
    }
    torch::Tensor probs;
    if (lse != nullptr) {
      auto row_lse = scores.logsumexp(-1, /*keepdim=*/true);
      row_lse.masked_fill_(torch::isneginf(row_lse), kInf);
      lse->narrow(2, i0, lc).copy_(row_lse);
      probs = scores.sub_(row_lse).exp_();
    } else {
      probs = torch::softmax(scores, -1);
      // A row that excludes every key is all −inf: softmax gives NaN, the layer's answer is 0.
      if (empty_rows.defined()) probs.masked_fill_(empty_rows, 0.0);
    }
    if (spec.dropout_p > 0.0) probs.mul_(keep_mask(spec, i0, probs));
    auto strip_out = out.narrow(2, i0, lc);
    if (g == 0) {
      strip_out.copy_(torch::matmul(probs, value.narrow(2, j0, sc)));
    } else {
      strip_out.copy_(torch::matmul(probs.narrow(-1, 0, g), globals.value));
      if (sc > 0) strip_out.add_(torch::matmul(probs.narrow(-1, g, sc), value.narrow(2, j0, sc)));
    }
  }
  return out;
}

class RelativeAttentionFunction : public torch::autograd::Function<RelativeAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& query,
                               const torch::Tensor& key, const torch::Tensor& value,
                               const torch::Tensor& positions, const torch::Tensor& content_bias,
                               const torch::Tensor& position_bias,
                               const std::optional<torch::Tensor>& bias,
                               const std::optional<torch::Tensor>& global_query,
                               const std::optional<torch::Tensor>& global_key,
                               const std::optional<torch::Tensor>& global_value,
                               const std::optional<torch::Tensor>& global_excluded,
                               const Spec& spec) {
    const auto acc = accumulation_type(query.scalar_type());
    const int64_t h = query.size(1), e = query.size(3);
    const auto q = query.to(acc);
    const auto qu = (q + content_bias.to(acc).reshape({1, h, 1, e})) * spec.scale;
    const auto qv = (q + position_bias.to(acc).reshape({1, h, 1, e})) * spec.scale;
    const auto k = key.to(acc), v = value.to(acc), p = positions.to(acc);
    const auto bias4 = bias ? as_4d(*bias) : torch::Tensor();
    const auto globals =
        global_keys(global_query, global_key, global_value, global_excluded, spec.scale, acc);
    auto lse = torch::empty({q.size(0), h, q.size(2), 1}, q.options());
    auto out = forward_strips(spec, qu, qv, k, v, p, bias4, globals, &lse).to(query.scalar_type());
    const auto or_none = [](const std::optional<torch::Tensor>& t) {
      return t ? *t : torch::Tensor();
    };
    ctx->save_for_backward({query, key, value, positions, content_bias, position_bias,
                            or_none(bias), out, lse, or_none(global_query), or_none(global_key),
                            or_none(global_value), or_none(global_excluded)});
    spec.masks.save(ctx, "");
    auto& data = ctx->saved_data;
    data["layout"] = static_cast<int64_t>(spec.layout);
    data["scale"] = spec.scale;
    data["dropout_p"] = spec.dropout_p;
    data["seed"] = static_cast<int64_t>(spec.seed);
    data["rows"] = spec.rows;
    data["window_left"] = spec.window_left;
    data["window_right"] = spec.window_right;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    // Plain tensor ops on saved values: traced for a second derivative they would treat lse as a
    // constant and give wrong results, so refuse instead.
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "relative_position_attention: double backward (create_graph=true) is not "
                "supported");
    Spec spec;
    spec.masks = TileMasks::load(ctx, "");
    const auto& data = ctx->saved_data;
    spec.layout = static_cast<RelativeLayout>(data.at("layout").toInt());
    spec.scale = data.at("scale").toDouble();
    spec.dropout_p = data.at("dropout_p").toDouble();
    spec.seed = static_cast<uint64_t>(data.at("seed").toInt());
    spec.rows = data.at("rows").toInt();
    spec.window_left = data.at("window_left").toInt();
    spec.window_right = data.at("window_right").toInt();

    const auto saved = ctx->get_saved_variables();
    const auto &query = saved[0], &key = saved[1], &value = saved[2], &positions = saved[3];
    const auto &content_bias = saved[4], &position_bias = saved[5], &bias = saved[6];
    const auto& lse = saved[8];
    const auto acc = accumulation_type(query.scalar_type());
    const int64_t h = query.size(1), l = query.size(2), e = query.size(3), s = key.size(2);
    const auto q = query.to(acc);
    const auto qu = (q + content_bias.to(acc).reshape({1, h, 1, e})) * spec.scale;
    const auto qv = (q + position_bias.to(acc).reshape({1, h, 1, e})) * spec.scale;
    const auto k = key.to(acc), v = value.to(acc), p = positions.to(acc);
    const auto bias4 = bias.defined() ? as_4d(bias) : torch::Tensor();
    const auto d_out = grads[0].to(acc);
    const auto &global_query = saved[9], &global_key = saved[10], &global_value = saved[11];
    const auto to_optional = [](const torch::Tensor& t) {
      return t.defined() ? std::optional<torch::Tensor>(t) : std::nullopt;
    };
    const auto globals =
        global_keys(to_optional(global_query), to_optional(global_key), to_optional(global_value),
                    to_optional(saved[12]), spec.scale, acc);
    const int64_t g = globals.count();
    torch::Tensor d_gq, d_gk, d_gv;
    if (g > 0) {
      d_gq = torch::zeros_like(globals.query);
      d_gk = torch::zeros_like(globals.key);
      d_gv = torch::zeros_like(globals.value);
    }
    // rowsum(dO ∘ O) = rowsum(P ∘ dP): the softmax Jacobian's correction term (FA-2, Alg. 2);
    // with dropout, O and dP are those of the dropped probabilities and the identity still holds.
    const auto delta = (d_out * saved[7].to(acc)).sum(-1, /*keepdim=*/true);

    auto d_qu = torch::empty_like(qu), d_qv = torch::empty_like(qv);
    auto dk = torch::zeros_like(k), dv = torch::zeros_like(v), dp = torch::zeros_like(p);
    const bool bias_grad = bias.defined() && bias.requires_grad();
    auto d_bias4 = bias_grad ? torch::zeros(bias4.sizes(), q.options()) : torch::Tensor();
    for (int64_t i0 = 0; i0 < l; i0 += spec.rows) {
      const int64_t lc = std::min(spec.rows, l - i0);
      const auto [j0, sc] = strip_keys(spec, i0, lc, l, s);
      d_qu.narrow(2, i0, lc).zero_();
      d_qv.narrow(2, i0, lc).zero_();
      if (sc == 0 && g == 0) continue;  // no key in reach: the output was 0, nothing flows back
      const auto qu_strip = qu.narrow(2, i0, lc), qv_strip = qv.narrow(2, i0, lc);
      const auto d_out_strip = d_out.narrow(2, i0, lc);
      const auto k_strip = k.narrow(2, j0, sc), v_strip = v.narrow(2, j0, sc);
      auto scores = sc > 0 ? strip_scores(spec, qu, qv, k, p, bias4, i0, lc, j0, sc)
                           : torch::empty({d_out.size(0), h, lc, 0}, d_out.options());
      // The global keys' columns first, as the forward laid them out.
      if (g > 0) scores = torch::cat({globals.scores(i0, lc), scores}, -1);
      auto all_probs = scores.sub_(lse.narrow(2, i0, lc)).exp_();  // [B, H, lc, G + sc]
      auto d_probs = torch::matmul(d_out_strip, v_strip.transpose(-2, -1));
      if (g > 0) {
        d_probs =
            torch::cat({torch::matmul(d_out_strip, globals.value.transpose(-2, -1)), d_probs}, -1);
      }
      // The values' gradient takes the probabilities after dropout.
      auto kept = all_probs;
      if (spec.dropout_p > 0.0) {
        const auto keep = keep_mask(spec, i0, all_probs);
        kept = all_probs * keep;
        d_probs.mul_(keep);
      }
      if (sc > 0) {
        dv.narrow(2, j0, sc).add_(
            torch::matmul(kept.narrow(-1, g, sc).transpose(-2, -1), d_out_strip));
      }
      if (g > 0) d_gv.add_(torch::matmul(kept.narrow(-1, 0, g).transpose(-2, -1), d_out_strip));
      // In place: `kept` is these probabilities when nothing is dropped.
      const auto d_all_scores = all_probs.mul_(d_probs.sub_(delta.narrow(2, i0, lc)));
      if (g > 0) {
        const auto d_global_scores = d_all_scores.narrow(-1, 0, g);
        d_gq.narrow(2, i0, lc).copy_(torch::matmul(d_global_scores, globals.key));
        d_gk.add_(
            torch::matmul(d_global_scores.transpose(-2, -1), globals.query.narrow(2, i0, lc)));
      }
      if (sc == 0) continue;
      const auto d_scores = d_all_scores.narrow(-1, g, sc);
      if (bias_grad) {
        tile_of(d_bias4, i0, lc, j0, sc).add_(reduce_to(d_scores, tile_of(bias4, i0, lc, j0, sc)));
      }
      d_qu.narrow(2, i0, lc).copy_(torch::matmul(d_scores, k_strip));
      dk.narrow(2, j0, sc).add_(torch::matmul(d_scores.transpose(-2, -1), qu_strip));
      // The position scores' gradient: d_scores through the shift, zero on the columns no key
      // reads.
      const auto [first, count] = position_rows(spec.layout, i0, lc, l, j0, sc);
      torch::Tensor d_position_scores = d_scores;
      if (spec.layout == RelativeLayout::kShifted) {
        d_position_scores = torch::zeros({d_scores.size(0), h, lc, count}, d_scores.options());
        aligned(d_position_scores, spec.layout, sc).copy_(d_scores);
      }
      const auto rows = p.narrow(2, first, count);
      d_qv.narrow(2, i0, lc).copy_(torch::matmul(d_position_scores, rows));
      auto d_rows = torch::matmul(d_position_scores.transpose(-2, -1), qv_strip);
      if (p.size(0) == 1 && d_rows.size(0) != 1) d_rows = d_rows.sum(0, /*keepdim=*/true);
      dp.narrow(2, first, count).add_(d_rows);
    }
    // qu = (q + u)·scale and qv = (q + v)·scale.
    d_qu.mul_(spec.scale);
    d_qv.mul_(spec.scale);
    const auto dq = d_qu + d_qv;
    const auto du = d_qu.sum(std::vector<int64_t>{0, 2});
    const auto d_vbias = d_qv.sum(std::vector<int64_t>{0, 2});
    torch::Tensor d_bias;
    if (bias_grad) d_bias = d_bias4.view(bias.sizes()).to(bias.scalar_type());
    torch::Tensor d_global_query, d_global_key, d_global_value;
    if (g > 0) {
      // The strips' global queries are global_query · scale.
      d_global_query = d_gq.mul_(spec.scale).to(global_query.scalar_type());
      d_global_key = d_gk.to(global_key.scalar_type());
      d_global_value = d_gv.to(global_value.scalar_type());
    }
    return {dq.to(query.scalar_type()),
            dk.to(key.scalar_type()),
            dv.to(value.scalar_type()),
            dp.to(positions.scalar_type()),
            du.to(content_bias.scalar_type()),
            d_vbias.to(position_bias.scalar_type()),
            d_bias,
            d_global_query,
            d_global_key,
            d_global_value,
            torch::Tensor(),
            torch::Tensor()};
  }
};

void check_problem(const RelativeAttentionProblem& p) {
  const char* who = "relative_position_attention";
  TORCH_CHECK_VALUE(p.query.defined() && p.query.dim() == 4, who, ": query must be [B, H, L, E]",
                    p.query.defined() ? ", got " + shape_string(p.query.sizes()) : "");
  const int64_t b = p.query.size(0), h = p.query.size(1), l = p.query.size(2), e = p.query.size(3);
  TORCH_CHECK_VALUE(p.key.defined() && p.key.dim() == 4 && p.key.size(0) == b &&
                        p.key.size(1) == h && p.key.size(3) == e,
                    who, ": key must be [B = ", b, ", H = ", h, ", S, E = ", e, "], got ",
                    p.key.defined() ? shape_string(p.key.sizes()) : "undefined");
  const int64_t s = p.key.size(2);
  TORCH_CHECK_VALUE(p.value.defined() && p.value.dim() == 4 && p.value.size(0) == b &&
                        p.value.size(1) == h && p.value.size(2) == s,
                    who, ": value must be [B = ", b, ", H = ", h, ", S = ", s, ", Ev], got ",
                    p.value.defined() ? shape_string(p.value.sizes()) : "undefined");
  const bool shifted = p.layout == RelativeLayout::kShifted;
  TORCH_CHECK_VALUE(!shifted || s >= l, who,
                    ": the shifted layout needs at least as many keys as queries (the queries are "
                    "the last L keys), got L = ",
                    l, ", S = ", s);
  const int64_t rows = shifted ? l + s - 1 : s;
  TORCH_CHECK_VALUE(p.positions.defined() && p.positions.dim() == 4 &&
                        (p.positions.size(0) == 1 || p.positions.size(0) == b) &&
                        p.positions.size(1) == h && p.positions.size(2) == rows &&
                        p.positions.size(3) == e,
                    who, ": positions must be [1 or B = ", b, ", H = ", h, ", P = ", rows,
                    shifted ? " (L + S - 1)" : " (S)", ", E = ", e, "], got ",
                    p.positions.defined() ? shape_string(p.positions.sizes()) : "undefined");
  for (const auto& [tensor, name] :
       {std::pair{&p.content_bias, "content_bias"}, std::pair{&p.position_bias, "position_bias"}}) {
    TORCH_CHECK_VALUE(
        tensor->defined() && tensor->dim() == 2 && tensor->size(0) == h && tensor->size(1) == e,
        who, ": ", name, " must be [H = ", h, ", E = ", e, "], got ",
        tensor->defined() ? shape_string(tensor->sizes()) : "undefined");
  }
  for (const auto* tensor : {&p.key, &p.value, &p.positions, &p.content_bias, &p.position_bias}) {
    TORCH_CHECK_VALUE(tensor->device() == p.query.device(), who,
                      ": every tensor must be on the query's device ", p.query.device().str(),
                      ", got one on ", tensor->device().str());
  }
  TORCH_CHECK_VALUE(p.scale > 0.0, who, ": scale must be > 0, got ", p.scale);
  TORCH_CHECK_VALUE(p.dropout_p >= 0.0 && p.dropout_p < 1.0, who,
                    ": dropout_p must be in [0, 1), got ", p.dropout_p);
  TORCH_CHECK_VALUE(p.strip_rows >= 0, who, ": strip_rows must be >= 0, got ", p.strip_rows);
  TORCH_CHECK_VALUE(p.window_left >= -1 && p.window_right >= -1, who,
                    ": window_left and window_right must be >= -1 (unlimited), got ", p.window_left,
                    " and ", p.window_right);
  p.mask.validate(b, h, l, s, who);
  if (!p.global_positions.defined()) {
    TORCH_CHECK_VALUE(!p.global_query.defined() && !p.global_key.defined(), who,
                      ": global_query and global_key need global_positions");
    return;
  }
  const auto& positions = p.global_positions;
  TORCH_CHECK_VALUE(positions.dim() == 1 && positions.scalar_type() == torch::kLong &&
                        positions.device() == p.query.device(),
                    who, ": global_positions must be [G] long on the query's device, got ",
                    shape_string(positions.sizes()), " ", positions.scalar_type(), " on ",
                    positions.device().str());
  const int64_t g = positions.size(0);
  if (g > 0) {
    const auto host = positions.cpu();
    const auto* index = host.data_ptr<int64_t>();
    for (int64_t i = 0; i < g; ++i) {
      TORCH_CHECK_VALUE(index[i] >= 0 && index[i] < s && (i == 0 || index[i] > index[i - 1]), who,
                        ": global_positions must be strictly increasing key indices in [0, S = ", s,
                        "), got ", index[i], " at ", i);
    }
  }
  if (p.global_query.defined()) {
    TORCH_CHECK_VALUE(
        p.global_query.sizes() == p.query.sizes() && p.global_query.device() == p.query.device(),
        who, ": global_query must be shaped as query ", shape_string(p.query.sizes()),
        " on its device, got ", shape_string(p.global_query.sizes()));
  }
  if (p.global_key.defined()) {
    TORCH_CHECK_VALUE(p.global_key.dim() == 4 && p.global_key.size(0) == b &&
                          p.global_key.size(1) == h && p.global_key.size(2) == g &&
                          p.global_key.size(3) == e && p.global_key.device() == p.query.device(),
                      who, ": global_key must be [B = ", b, ", H = ", h, ", G = ", g, ", E = ", e,
                      "] on the query's device, got ", shape_string(p.global_key.sizes()));
  }
}

// The global keys' inputs of a problem that has them: the queries, keys and values, and which
// keys are padding ([B, 1, 1, G], undefined when none is).
struct GlobalInputs {
  torch::Tensor query, key, value, excluded;
};

GlobalInputs global_inputs(const RelativeAttentionProblem& p) {
  GlobalInputs in;
  const auto& positions = p.global_positions;
  in.query = p.global_query.defined() ? p.global_query : p.query;
  in.key = p.global_key.defined() ? p.global_key : p.key.index_select(2, positions);
  in.value = p.value.index_select(2, positions);
  const int64_t b = p.query.size(0), g = positions.size(0);
  const auto device = p.query.device();
  auto excluded = torch::zeros({b, g}, torch::TensorOptions().dtype(torch::kBool).device(device));
  bool any = false;
  if (p.mask.key_lengths().defined()) {
    excluded.logical_or_(positions.view({1, g}) >=
                         p.mask.key_lengths().to(device, torch::kLong).view({b, 1}));
    any = true;
  }
  if (p.mask.key_padding_mask().defined()) {
    excluded.logical_or_(p.mask.key_padding_mask().to(device).index_select(1, positions));
    any = true;
  }
  if (any) in.excluded = excluded.view({b, 1, 1, g});
  return in;
}

}  // namespace

torch::Tensor relative_position_attention(const RelativeAttentionProblem& problem) {
  check_problem(problem);
  TORCH_CHECK_VALUE(problem.query.device().is_cpu(),
                    "relative_position_attention: runs on the CPU; on ",
                    problem.query.device().str(),
                    " give relative_position_bias(problem) to an attention backend, or "
                    "relative_position_probabilities(problem) with global keys");
  const int64_t b = problem.query.size(0), h = problem.query.size(1), l = problem.query.size(2),
                s = problem.key.size(2);
  Spec spec;
  spec.masks = TileMasks::of(problem.mask, l, s, problem.query.device());
  spec.layout = problem.layout;
  spec.scale = problem.scale;
  spec.dropout_p = problem.dropout_p;
  spec.window_left = problem.window_left;
  spec.window_right = problem.window_right;
  if (problem.strip_rows > 0) {
    spec.rows = problem.strip_rows;
  } else {
    // A strip's scores and position scores, float32, within kStripBytes; with a window, over the
    // keys a strip of 64 reaches.
    const int64_t reach = (spec.window_left < 0 || spec.window_right < 0)
                              ? s
                              : std::min<int64_t>(s, 64 + spec.window_left + spec.window_right);
    const int64_t per_row = b * h * (2 * reach + 64) * 4;
    spec.rows = std::clamp<int64_t>(kStripBytes / per_row, 16, 256);
  }
  if (spec.dropout_p > 0.0) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    spec.seed = generator.get<at::CPUGeneratorImpl>()->random64();
  }
  std::optional<torch::Tensor> bias;
  if (problem.mask.bias().defined()) bias = problem.mask.bias();
  std::optional<torch::Tensor> global_query, global_key, global_value, global_excluded;
  if (problem.global_positions.defined() && problem.global_positions.size(0) > 0) {
    auto in = global_inputs(problem);
    global_query = std::move(in.query);
    global_key = std::move(in.key);
    global_value = std::move(in.value);
    if (in.excluded.defined()) global_excluded = std::move(in.excluded);
  }
  const auto requires_grad = [](const std::optional<torch::Tensor>& t) {
    return t && t->requires_grad();
  };

  const bool grad =
      at::GradMode::is_enabled() &&
      (problem.query.requires_grad() || problem.key.requires_grad() ||
       problem.value.requires_grad() || problem.positions.requires_grad() ||
       problem.content_bias.requires_grad() || problem.position_bias.requires_grad() ||
       requires_grad(bias) || requires_grad(global_query) || requires_grad(global_key) ||
       requires_grad(global_value));
  if (grad) {
    return RelativeAttentionFunction::apply(
        problem.query, problem.key, problem.value, problem.positions, problem.content_bias,
        problem.position_bias, bias, global_query, global_key, global_value, global_excluded, spec);
  }
  const int64_t e = problem.query.size(3);
  if (relative_kernel_applies(problem)) {
    // The kernel takes [B, L, H, E] views; q + u and q + v in the inputs' dtype.
    const auto dtype = problem.query.scalar_type();
    const auto heads_second = [](const torch::Tensor& t) { return t.transpose(1, 2); };
    const auto qu = problem.query + problem.content_bias.to(dtype).reshape({1, h, 1, e});
    const auto qv = problem.query + problem.position_bias.to(dtype).reshape({1, h, 1, e});
    std::optional<torch::Tensor> lengths;
    if (problem.mask.key_lengths().defined()) lengths = problem.mask.key_lengths().to(torch::kLong);
    return kernels::flash_attention_relative_cpu(
               heads_second(qu), heads_second(qv), heads_second(problem.key),
               heads_second(problem.value), heads_second(problem.positions.to(dtype)), lengths,
               problem.scale)
        .transpose(1, 2);
  }
  const auto acc = accumulation_type(problem.query.scalar_type());
  const auto q = problem.query.to(acc);
  const auto qu = (q + problem.content_bias.to(acc).reshape({1, h, 1, e})) * spec.scale;
  const auto qv = (q + problem.position_bias.to(acc).reshape({1, h, 1, e})) * spec.scale;
  const auto globals =
      global_keys(global_query, global_key, global_value, global_excluded, spec.scale, acc);
  return forward_strips(spec, qu, qv, problem.key.to(acc), problem.value.to(acc),
                        problem.positions.to(acc), bias ? as_4d(*bias) : torch::Tensor(), globals,
                        nullptr)
      .to(problem.query.scalar_type());
}

torch::Tensor rel_shift(const torch::Tensor& scores) {
  TORCH_CHECK_VALUE(scores.dim() == 4 && scores.size(3) >= 2 * scores.size(2) - 1,
                    "rel_shift: scores must be [B, H, Lq, Lq + Lk - 1] with Lk >= Lq, got ",
                    shape_string(scores.sizes()));
  return aligned(scores, RelativeLayout::kShifted, scores.size(3) - scores.size(2) + 1);
}

torch::Tensor relative_position_probabilities(const RelativeAttentionProblem& problem) {
  check_problem(problem);
  const auto& p = problem;
  const int64_t l = p.query.size(2), s = p.key.size(2);
  auto local = problem;
  local.global_positions = local.global_query = local.global_key = torch::Tensor();
  auto scores = p.scale * torch::matmul(p.query, p.key.transpose(-2, -1)) +
                relative_position_bias(local);  // [B, H, L, S], with the mask's bias
  auto allowed = p.mask.allowed(l, s, p.query.device());
  const auto band = band_attention_mask(l, s, p.window_left, p.window_right, p.query.device());
  if (band.defined()) {
    allowed = allowed ? allowed->logical_and(band.logical_not()) : band.logical_not();
  }
  if (allowed) scores = scores.masked_fill(allowed->logical_not(), -kInf);
  const int64_t g = p.global_positions.defined() ? p.global_positions.size(0) : 0;
  if (g > 0) {
    const auto in = global_inputs(p);
    auto global_scores = p.scale * torch::matmul(in.query, in.key.transpose(-2, -1));
    if (in.excluded.defined()) global_scores = global_scores.masked_fill(in.excluded, -kInf);
    scores = torch::cat({global_scores, scores}, -1);
  }
  // A row that excludes every key is computed over zeros (finite, forward and backward) and
  // answers 0.
  const auto empty = torch::isneginf(std::get<0>(scores.max(-1, /*keepdim=*/true)));
  auto probs = torch::softmax(scores.masked_fill(empty, 0.0), -1).masked_fill(empty, 0.0);
  if (g == 0) return probs;
  // A global key's share joins its column.
  return probs.narrow(-1, g, s).index_add(-1, p.global_positions, probs.narrow(-1, 0, g));
}

torch::Tensor relative_position_bias(const RelativeAttentionProblem& problem) {
  check_problem(problem);
  TORCH_CHECK_VALUE(!problem.global_positions.defined() || problem.global_positions.size(0) == 0,
                    "relative_position_bias: a problem with global keys has no single bias; use "
                    "relative_position_probabilities");
  const auto& p = problem;
  const int64_t h = p.query.size(1), e = p.query.size(3), s = p.key.size(2);
  const auto u = p.content_bias.reshape({1, h, 1, e}), v = p.position_bias.reshape({1, h, 1, e});
  // Term (c), u·k_j: one row per head, broadcast over the queries: [B, H, 1, S].
  const auto content = torch::matmul(u, p.key.transpose(-2, -1));
  // Terms (b) + (d), (q_i + v)·p_r over every row r: [B, H, L, P], then aligned to the keys.
  const auto position_scores =
      torch::matmul(p.query + v, p.positions.transpose(-2, -1)).contiguous();
  auto bias = p.scale * (content + aligned(position_scores, p.layout, s));
  if (p.mask.bias().defined()) bias = bias + p.mask.bias();
  return bias;
}

}  // namespace attnzoo
