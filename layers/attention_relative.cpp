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
                             torch::Tensor* lse) {
  const int64_t b = qu.size(0), h = qu.size(1), l = qu.size(2), ev = value.size(3);
  auto out = torch::empty({b, h, l, ev}, qu.options());
  for (int64_t i0 = 0; i0 < l; i0 += spec.rows) {
    const int64_t lc = std::min(spec.rows, l - i0);
    const auto [j0, sc] = strip_keys(spec, i0, lc, l, key.size(2));
    if (sc == 0) {  // no key in reach: the layer's answer for a row that sees none
      out.narrow(2, i0, lc).zero_();
      if (lse != nullptr) lse->narrow(2, i0, lc).fill_(kInf);
      continue;
    }
    torch::Tensor empty_rows;
    auto scores = strip_scores(spec, qu, qv, key, positions, bias4, i0, lc, j0, sc, &empty_rows);
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
    out.narrow(2, i0, lc).copy_(torch::matmul(probs, value.narrow(2, j0, sc)));
  }
  return out;
}

class RelativeAttentionFunction : public torch::autograd::Function<RelativeAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& query,
                               const torch::Tensor& key, const torch::Tensor& value,
                               const torch::Tensor& positions, const torch::Tensor& content_bias,
                               const torch::Tensor& position_bias,
                               const std::optional<torch::Tensor>& bias, const Spec& spec) {
    const auto acc = accumulation_type(query.scalar_type());
    const int64_t h = query.size(1), e = query.size(3);
    const auto q = query.to(acc);
    const auto qu = (q + content_bias.to(acc).reshape({1, h, 1, e})) * spec.scale;
    const auto qv = (q + position_bias.to(acc).reshape({1, h, 1, e})) * spec.scale;
    const auto k = key.to(acc), v = value.to(acc), p = positions.to(acc);
    const auto bias4 = bias ? as_4d(*bias) : torch::Tensor();
    auto lse = torch::empty({q.size(0), h, q.size(2), 1}, q.options());
    auto out = forward_strips(spec, qu, qv, k, v, p, bias4, &lse).to(query.scalar_type());
    ctx->save_for_backward({query, key, value, positions, content_bias, position_bias,
                            bias ? *bias : torch::Tensor(), out, lse});
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
      if (sc == 0) {  // no key in reach: the output was 0, nothing flows back
        d_qu.narrow(2, i0, lc).zero_();
        d_qv.narrow(2, i0, lc).zero_();
        continue;
      }
      const auto qu_strip = qu.narrow(2, i0, lc), qv_strip = qv.narrow(2, i0, lc);
      const auto d_out_strip = d_out.narrow(2, i0, lc);
      const auto k_strip = k.narrow(2, j0, sc), v_strip = v.narrow(2, j0, sc);
      auto probs = strip_scores(spec, qu, qv, k, p, bias4, i0, lc, j0, sc)
                       .sub_(lse.narrow(2, i0, lc))
                       .exp_();  // [B, H, lc, sc]
      auto d_probs = torch::matmul(d_out_strip, v_strip.transpose(-2, -1));
      if (spec.dropout_p > 0.0) {
        const auto keep = keep_mask(spec, i0, probs);
        dv.narrow(2, j0, sc).add_(torch::matmul((probs * keep).transpose(-2, -1), d_out_strip));
        d_probs.mul_(keep);
      } else {
        dv.narrow(2, j0, sc).add_(torch::matmul(probs.transpose(-2, -1), d_out_strip));
      }
      const auto d_scores = probs.mul_(d_probs.sub_(delta.narrow(2, i0, lc)));
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
    return {dq.to(query.scalar_type()),
            dk.to(key.scalar_type()),
            dv.to(value.scalar_type()),
            dp.to(positions.scalar_type()),
            du.to(content_bias.scalar_type()),
            d_vbias.to(position_bias.scalar_type()),
            d_bias,
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
}

}  // namespace

torch::Tensor relative_position_attention(const RelativeAttentionProblem& problem) {
  check_problem(problem);
  TORCH_CHECK_VALUE(problem.query.device().is_cpu(),
                    "relative_position_attention: runs on the CPU; on ",
                    problem.query.device().str(),
                    " give relative_position_bias(problem) to an attention backend");
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

  const bool grad = at::GradMode::is_enabled() &&
                    (problem.query.requires_grad() || problem.key.requires_grad() ||
                     problem.value.requires_grad() || problem.positions.requires_grad() ||
                     problem.content_bias.requires_grad() ||
                     problem.position_bias.requires_grad() || (bias && bias->requires_grad()));
  if (grad) {
    return RelativeAttentionFunction::apply(problem.query, problem.key, problem.value,
                                            problem.positions, problem.content_bias,
                                            problem.position_bias, bias, spec);
  }
  const auto acc = accumulation_type(problem.query.scalar_type());
  const int64_t e = problem.query.size(3);
  const auto q = problem.query.to(acc);
  const auto qu = (q + problem.content_bias.to(acc).reshape({1, h, 1, e})) * spec.scale;
  const auto qv = (q + problem.position_bias.to(acc).reshape({1, h, 1, e})) * spec.scale;
  return forward_strips(spec, qu, qv, problem.key.to(acc), problem.value.to(acc),
                        problem.positions.to(acc), bias ? as_4d(*bias) : torch::Tensor(), nullptr)
      .to(problem.query.scalar_type());
}

torch::Tensor rel_shift(const torch::Tensor& scores) {
  TORCH_CHECK_VALUE(scores.dim() == 4 && scores.size(3) >= 2 * scores.size(2) - 1,
                    "rel_shift: scores must be [B, H, Lq, Lq + Lk - 1] with Lk >= Lq, got ",
                    shape_string(scores.sizes()));
  return aligned(scores, RelativeLayout::kShifted, scores.size(3) - scores.size(2) + 1);
}

torch::Tensor relative_position_bias(const RelativeAttentionProblem& problem) {
  check_problem(problem);
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
