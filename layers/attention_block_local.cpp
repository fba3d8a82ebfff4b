// The `block_local` backend (pattern and costs in attention_block_local.h).
//
// Non-global queries are processed as blocks: the queries, zero-padded to whole blocks, are
// viewed as [B, H, nblocks, b, E]; each block's key window (b + 2w positions around it) is
// gathered with one index_select, and the global keys are appended as g extra columns. The user's
// masks and bias are gathered at the same (query, key) positions, so that nothing of size L² is
// built. The g global queries attend to every key: a plain g × L attention.
#include <attnzoo/layers/attention_block_local.h>

#include <attnzoo/layers/attention_internal.h>

#include <ATen/TensorIndexing.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

namespace attnzoo {

namespace {

void check_options(const AttentionBackendOptions& o, const char* who) {
  TORCH_CHECK_VALUE(o.block_size() >= 1, who, ": block_size must be >= 1, got ", o.block_size());
  TORCH_CHECK_VALUE(o.window() >= 0, who, ": window must be >= 0, got ", o.window());
  TORCH_CHECK_VALUE(o.global_tokens() >= 0, who, ": global_tokens must be >= 0, got ",
                    o.global_tokens());
}

// Masks are validated to have at most 4 dims.
using detail::as_4d;

// The entries of `t` (broadcastable to [B, H, L, S]) at query positions `rows` and key positions
// `cols` (Long, broadcastable to each other: shape P). A size-1 dim of `t` is read at index 0.
// t: [.., L|1, S|1] -> [B|1, H|1, *P]
torch::Tensor gather_at(const torch::Tensor& t, const torch::Tensor& rows,
                        const torch::Tensor& cols, torch::Device device) {
  using torch::indexing::Slice;
  const auto t4 = as_4d(t.to(device));
  const auto r = t4.size(2) == 1 ? torch::zeros_like(rows) : rows;
  const auto c = t4.size(3) == 1 ? torch::zeros_like(cols) : cols;
  return t4.index({Slice(), Slice(), r, c});
}

// The user's mask and bias at the (query, key) positions (rows, cols), as math would see them.
struct GatheredMask {
  torch::Tensor allowed;  // bool [B|1, H|1, *P], true = takes part; undefined = all allowed
  torch::Tensor bias;     // [B|1, H|1, *P]; undefined = none
};

// rows, cols: Long positions in [0, L), broadcastable to each other (shape P).
GatheredMask gather_user_mask(const AttentionMask& mask, const torch::Tensor& rows,
                              const torch::Tensor& cols, torch::Device device) {
  using torch::indexing::Slice;
  GatheredMask out;
  auto combine = [&](const torch::Tensor& part) {
    out.allowed = out.allowed.defined() ? torch::logical_and(out.allowed, part) : part;
  };
  // [B] -> [B, 1, 1, ..., 1] so that it broadcasts against cols as [B, 1, *P].
  std::vector<int64_t> per_batch(cols.dim() + 2, 1);
  per_batch[0] = -1;
  if (mask.key_lengths().defined()) {
    combine(cols < mask.key_lengths().to(device, torch::kLong).view(per_batch));
  }
  if (mask.key_padding_mask().defined()) {
    // [B, S] -> [B, *cols] -> [B, 1, *cols]
    combine(mask.key_padding_mask().to(device).index({Slice(), cols}).logical_not().unsqueeze(1));
  }
  if (mask.attn_mask().defined()) {
    combine(gather_at(mask.attn_mask(), rows, cols, device).logical_not());
  }
  // Self-attention only (L == S): both alignments put the diagonal at offset 0.
  if (mask.causal()) combine(cols <= rows);
  if (mask.bias().defined()) out.bias = gather_at(mask.bias(), rows, cols, device);
  return out;
}

// softmax over the last dim of `scores` restricted to `allowed` (undefined = all), with the
// fully-masked-row rule of every backend: such rows are computed over all their columns (finite
// forward and backward) and then zeroed. Dropout as in math.
// scores: [..., C], allowed: bool broadcastable to scores -> probabilities [..., C]
torch::Tensor masked_softmax(torch::Tensor scores, const torch::Tensor& allowed, double dropout_p) {
  torch::Tensor probs;
  if (allowed.defined()) {
    const auto safe = make_safe(allowed);
    scores =
        scores.masked_fill(safe.allowed.logical_not(), -std::numeric_limits<double>::infinity());
    probs = torch::softmax(scores, -1).masked_fill(safe.fully_masked, 0.0);
  } else {
    probs = torch::softmax(scores, -1);
  }
  if (dropout_p > 0.0) probs = torch::dropout(probs, dropout_p, /*train=*/true);
  return probs;
}

class BlockLocalAttention final : public AttentionBackend {
 public:
  std::string name() const override { return "block_local"; }
  int priority() const override { return -10; }
  // A restricted pattern, not full attention: only used when asked for by name.
  bool exact() const override { return false; }

  std::optional<AttentionMask> math_equivalent(const AttentionProblem& p) const override {
    if (p.query_len() != p.key_len()) return std::nullopt;
    auto mask = p.mask;
    auto excluded = block_local_pattern(p.query_len(), p.options, p.query.device()).logical_not();
    if (mask.attn_mask().defined()) {
      excluded = torch::logical_or(excluded, mask.attn_mask().to(p.query.device()));
    }
    return mask.attn_mask(excluded);
  }

  std::string unsupported_reason(const AttentionProblem& p) const override {
    if (p.query_len() != p.key_len()) {
      return "block_local is self-attention only: it needs query length L == key length S, got "
             "L = " +
             std::to_string(p.query_len()) + ", S = " + std::to_string(p.key_len());
    }
    if (p.need_weights) {
      return "block_local does not return attention weights (need_weights); use math with "
             "attn_mask = ~block_local_pattern(L, options)";
    }
    return {};
  }

  AttentionResult run(const AttentionProblem& p) const override {
    check_options(p.options, "block_local");
    const int64_t length = p.query_len();
    const int64_t global = std::min(p.options.global_tokens(), length);
    std::vector<torch::Tensor> parts;  // [B, H, g, Ev] and [B, H, L - g, Ev]
    if (global > 0) parts.push_back(global_queries(p, global));
    if (global < length) parts.push_back(local_queries(p, global));
    AttentionResult result;
    result.output = parts.size() == 1 ? parts[0] : torch::cat(parts, 2);
    return result;
  }

 private:
  // The first g queries attend to every key. -> [B, H, g, Ev]
  static torch::Tensor global_queries(const AttentionProblem& p, int64_t global) {
    const int64_t length = p.query_len();
    const auto device = p.query.device();
    const auto index = torch::TensorOptions().dtype(torch::kLong).device(device);
    const auto q = p.query.narrow(2, 0, global) * p.scale;    // [B, H, g, E]
    auto scores = torch::matmul(q, p.key.transpose(-2, -1));  // [B, H, g, L]
    const auto user = gather_user_mask(p.mask, torch::arange(global, index).view({global, 1}),
                                       torch::arange(length, index).view({1, length}), device);
    if (user.bias.defined()) scores = scores + user.bias.to(scores.scalar_type());
    return torch::matmul(masked_softmax(scores, user.allowed, p.dropout_p), p.value);
  }

  // Queries g .. L-1, block by block. -> [B, H, L - g, Ev]
  static torch::Tensor local_queries(const AttentionProblem& p, int64_t global) {
    const int64_t batch = p.batch(), heads = p.heads();
    const int64_t length = p.query_len();
    const int64_t e = p.query.size(3), ev = p.value.size(3);
    const int64_t b = p.options.block_size(), w = p.options.window();
    const int64_t n = length - global;  // non-global positions, >= 1
    const int64_t blocks = (n + b - 1) / b;
    const int64_t padded = blocks * b;
    const int64_t width = b + 2 * w;         // key window of one block
    const int64_t columns = global + width;  // global keys first, then the window
    const auto device = p.query.device();
    const auto index = torch::TensorOptions().dtype(torch::kLong).device(device);

    // Window positions relative to g: block k sees [k·b - w, k·b + b + w). Positions outside
    // [0, n) read a clamped (real) key and are excluded below, so no key tensor is padded.
    const auto window = torch::arange(blocks, index).view({blocks, 1}) * b - w +
                        torch::arange(width, index).view({1, width});  // [nblocks, width]
    const auto in_range = window.ge(0).logical_and(window.lt(n));
    const auto clamped = window.clamp(0, n - 1).view(-1);
    const auto keys =
        p.key.narrow(2, global, n).index_select(2, clamped).view({batch, heads, blocks, width, e});
    const auto values = p.value.narrow(2, global, n)
                            .index_select(2, clamped)
                            .view({batch, heads, blocks, width, ev});
    // Zero query rows round n up to whole blocks; their outputs are dropped at the end.
    const auto q =
        torch::constant_pad_nd(p.query.narrow(2, global, n) * p.scale, {0, 0, 0, padded - n})
            .view({batch, heads, blocks, b, e});
    auto scores = torch::matmul(q, keys.transpose(-2, -1));  // [B, H, nblocks, b, width]

    auto key_pos = (window.clamp(0, n - 1) + global).view({blocks, 1, width});
    auto geometric = in_range.view({blocks, 1, width});
    torch::Tensor global_keys, global_values;  // [B, H, g, E], [B, H, g, Ev]
    if (global > 0) {
      global_keys = p.key.narrow(2, 0, global);
      global_values = p.value.narrow(2, 0, global);
      const auto global_scores =
          torch::matmul(q.view({batch, heads, padded, e}), global_keys.transpose(-2, -1))
              .view({batch, heads, blocks, b, global});
      scores = torch::cat({global_scores, scores}, -1);  // [B, H, nblocks, b, g + width]
      key_pos = torch::cat(
          {torch::arange(global, index).view({1, 1, global}).expand({blocks, 1, global}), key_pos},
          -1);
      geometric =
          torch::cat({torch::ones({blocks, 1, global}, index.dtype(torch::kBool)), geometric}, -1);
    }
    // Padding rows read the mask at the last query; they are dropped anyway.
    const auto query_pos =
        (torch::arange(padded, index) + global).clamp_max(length - 1).view({blocks, b, 1});
    const auto user = gather_user_mask(p.mask, query_pos, key_pos, device);
    if (user.bias.defined()) scores = scores + user.bias.to(scores.scalar_type());
    const auto allowed =
        user.allowed.defined() ? torch::logical_and(user.allowed, geometric) : geometric;
    const auto probs = masked_softmax(scores, allowed, p.dropout_p);  // [.., nblocks, b, columns]
    TORCH_INTERNAL_ASSERT(probs.size(-1) == columns);

    auto out = torch::matmul(probs.narrow(-1, global, width), values);  // [B, H, nblocks, b, Ev]
    if (global > 0) {
      out = out + torch::matmul(probs.narrow(-1, 0, global).reshape({batch, heads, padded, global}),
                                global_values)
                      .view({batch, heads, blocks, b, ev});
    }
    return out.reshape({batch, heads, padded, ev}).narrow(2, 0, n);
  }
};

}  // namespace

torch::Tensor block_local_pattern(int64_t length, const AttentionBackendOptions& options,
                                  torch::Device device) {
  const char* who = "block_local_pattern";
  TORCH_CHECK_VALUE(length >= 0, who, ": length must be >= 0, got ", length);
  check_options(options, who);
  const int64_t b = options.block_size(), w = options.window(), g = options.global_tokens();
  const auto index = torch::TensorOptions().dtype(torch::kLong).device(device);
  const auto rows = torch::arange(length, index).view({length, 1});
  const auto cols = torch::arange(length, index).view({1, length});
  // Start of the block of each non-global query (rows < g get a value the OR below overrides).
  const auto start = torch::div((rows - g).clamp_min(0), b, "floor") * b + g;
  const auto local = cols.ge(g).logical_and(cols.ge(start - w)).logical_and(cols.lt(start + b + w));
  return rows.lt(g).logical_or(cols.lt(g)).logical_or(local);
}

std::unique_ptr<AttentionBackend> make_block_local_attention_backend() {
  return std::make_unique<BlockLocalAttention>();
}

}  // namespace attnzoo
