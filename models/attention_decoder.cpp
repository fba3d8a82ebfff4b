#include <attnzoo/layers/conformer_parts.h>  // relative_position_encoding: the sinusoid table
#include <attnzoo/models/attention_decoder.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace attnzoo {
namespace {

void check_options(const AttentionDecoderOptions& o) {
  TORCH_CHECK_VALUE(o.vocab_size() >= 2 && o.dim() > 0 && o.num_heads() > 0 && o.ffn_dim() > 0,
                    "AttentionDecoder: vocab_size must be >= 2 (<sos/eos> and one token) and the "
                    "sizes positive, got vocab_size ",
                    o.vocab_size(), ", dim ", o.dim(), ", num_heads ", o.num_heads(), ", ffn_dim ",
                    o.ffn_dim());
  TORCH_CHECK_VALUE(o.dim() % o.num_heads() == 0, "AttentionDecoder: dim ", o.dim(),
                    " is not divisible by num_heads ", o.num_heads());
  TORCH_CHECK_VALUE(o.dim() % 2 == 0,
                    "AttentionDecoder: dim must be even (sinusoidal positions), got ", o.dim());
  TORCH_CHECK_VALUE(o.num_blocks() >= 1 && o.right_blocks() >= 0,
                    "AttentionDecoder: num_blocks must be >= 1 and right_blocks >= 0, got ",
                    o.num_blocks(), " and ", o.right_blocks());
}

// Σ_j log p(token j | earlier) + log p(<eos> | all), per hypothesis, from logits [N, L + 1, V] of
// inputs `tokens` (<sos> first): the token at input position j + 1 is predicted at output j.
std::vector<double> sum_log_probs(const torch::Tensor& logits, const torch::Tensor& tokens,
                                  const torch::Tensor& lengths, int64_t eos) {
  const auto log_probs = torch::log_softmax(logits.to(torch::kFloat), -1).cpu();
  const auto lp = log_probs.accessor<float, 3>();
  const auto t = tokens.accessor<int64_t, 2>();
  const auto l = lengths.accessor<int64_t, 1>();
  std::vector<double> sums(static_cast<size_t>(tokens.size(0)));
  for (int64_t i = 0; i < tokens.size(0); ++i) {
    const int64_t n = l[i] - 1;  // tokens of the hypothesis
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += lp[i][j][t[i][j + 1]];
    sums[static_cast<size_t>(i)] = sum + lp[i][n][eos];
  }
  return sums;
}

}  // namespace

DecoderTeacherForcing teacher_forcing(const std::vector<std::vector<int64_t>>& sequences,
                                      int64_t sos_eos, bool reversed) {
  const auto n = static_cast<int64_t>(sequences.size());
  size_t longest = 0;
  for (const auto& h : sequences) longest = std::max(longest, h.size());
  const auto width = static_cast<int64_t>(longest) + 1;
  DecoderTeacherForcing f;
  f.inputs = torch::full({n, width}, sos_eos, torch::kLong);
  f.targets = torch::full({n, width}, -1, torch::kLong);
  f.lengths = torch::empty({n}, torch::kLong);
  auto in = f.inputs.accessor<int64_t, 2>();
  auto out = f.targets.accessor<int64_t, 2>();
  auto l = f.lengths.accessor<int64_t, 1>();
  for (int64_t i = 0; i < n; ++i) {
    const auto& h = sequences[static_cast<size_t>(i)];
    const auto size = static_cast<int64_t>(h.size());
    for (int64_t j = 0; j < size; ++j) {
      const auto token =
          reversed ? h[static_cast<size_t>(size - 1 - j)] : h[static_cast<size_t>(j)];
      in[i][j + 1] = token;
      out[i][j] = token;
    }
    out[i][size] = sos_eos;
    l[i] = size + 1;
  }
  return f;
}

AttentionDecoderBlockImpl::AttentionDecoderBlockImpl(AttentionDecoderOptions options_)
    : options(std::move(options_)) {
  reset();
}

void AttentionDecoderBlockImpl::reset() {
  const auto& o = options;
  check_options(o);
  norm1 = register_module("norm1", layer_norm(o.dim(), o.norm_eps()));
  self_attn = register_module("self_attn",
                              MultiheadAttention(MultiheadAttentionOptions(o.dim(), o.num_heads())
                                                     .attn_drop(o.self_attention_dropout())
                                                     .backend(o.attention_backend())));
  norm2 = register_module("norm2", layer_norm(o.dim(), o.norm_eps()));
  src_attn = register_module("src_attn",
                             MultiheadAttention(MultiheadAttentionOptions(o.dim(), o.num_heads())
                                                    .cross_attention(true)
                                                    .kv_dim(o.dim())
                                                    .attn_drop(o.src_attention_dropout())
                                                    .backend(o.attention_backend())));
  norm3 = register_module("norm3", layer_norm(o.dim(), o.norm_eps()));
  mlp = register_module(
      "mlp", Mlp(MlpOptions(o.dim(), o.ffn_dim()).activation(Activation::kRelu).drop(o.dropout())));
  dropout = register_module("dropout", torch::nn::Dropout(o.dropout()));
}

torch::Tensor AttentionDecoderBlockImpl::forward(const torch::Tensor& x,
                                                 const torch::Tensor& memory,
                                                 const AttentionMask& self_mask,
                                                 const AttentionMask& memory_mask) {
  auto h = x + dropout(self_attn(norm1(x), self_mask));
  h = h + dropout(src_attn->forward_cross(norm2(h), memory, memory_mask));
  // The feed-forward's own last dropout is the sublayer's.
  return h + mlp(norm3(h));
}

TransformerDecoderImpl::TransformerDecoderImpl(AttentionDecoderOptions options_)
    : options(std::move(options_)) {
  reset();
}

void TransformerDecoderImpl::reset() {
  const auto& o = options;
  check_options(o);
  embed = register_module("embed", torch::nn::Embedding(o.vocab_size(), o.dim()));
  dropout = register_module("dropout", torch::nn::Dropout(o.positional_dropout()));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.num_blocks(); ++i) blocks->push_back(AttentionDecoderBlock(o));
  after_norm = register_module("after_norm", layer_norm(o.dim(), o.norm_eps()));
  output_layer = register_module("output_layer", torch::nn::Linear(o.dim(), o.vocab_size()));
}

torch::Tensor TransformerDecoderImpl::forward(const torch::Tensor& tokens,
                                              const torch::Tensor& token_lengths,
                                              const torch::Tensor& memory,
                                              const torch::Tensor& memory_lengths) {
  TORCH_CHECK_VALUE(tokens.dim() == 2 && tokens.scalar_type() == torch::kLong,
                    "TransformerDecoder: tokens must be int64 [B, L], got ",
                    shape_string(tokens.sizes()), " ", tokens.scalar_type());
  TORCH_CHECK_VALUE(
      memory.dim() == 3 && memory.size(0) == tokens.size(0) && memory.size(2) == options.dim(),
      "TransformerDecoder: memory must be [B = ", tokens.size(0), ", S, D = ", options.dim(),
      "], got ", shape_string(memory.sizes()));
  TORCH_CHECK_VALUE(token_lengths.defined() && token_lengths.dim() == 1 &&
                        token_lengths.size(0) == tokens.size(0),
                    "TransformerDecoder: token_lengths must be [B = ", tokens.size(0), "]");
  const int64_t length = tokens.size(1);
  const auto positions = relative_position_encoding(
      length, options.dim(), ConformerPosition::kRelPosWenet, memory.options());
  auto x = embed(tokens) * std::sqrt(static_cast<double>(options.dim())) + positions;
  x = dropout(x);
  const auto self_mask = AttentionMask().key_lengths(token_lengths).causal();
  AttentionMask memory_mask;
  if (memory_lengths.defined()) memory_mask.key_lengths(memory_lengths);
  for (const auto& block : *blocks) {
    x = block->as<AttentionDecoderBlockImpl>()->forward(x, memory, self_mask, memory_mask);
  }
  return output_layer(after_norm(x));
}

AttentionDecoderImpl::AttentionDecoderImpl(AttentionDecoderOptions options_)
    : options(std::move(options_)) {
  reset();
}

void AttentionDecoderImpl::reset() {
  const auto& o = options;
  check_options(o);
  left = register_module("left", TransformerDecoder(o));
  if (o.right_blocks() > 0) {
    auto right_options = o;
    right_options.num_blocks(o.right_blocks());
    right = register_module("right", TransformerDecoder(right_options));
  }
}

DecoderScores AttentionDecoderImpl::score(const torch::Tensor& memory,
                                          const std::vector<std::vector<int64_t>>& hypotheses,
                                          double right_weight) {
  TORCH_CHECK_VALUE((memory.dim() == 2 || (memory.dim() == 3 && memory.size(0) == 1)) &&
                        memory.size(-1) == options.dim() && memory.size(-2) > 0,
                    "AttentionDecoder::score: memory must be [S, D = ", options.dim(),
                    "] or [1, S, D] with S > 0, got ", shape_string(memory.sizes()));
  TORCH_CHECK_VALUE(std::isfinite(right_weight) && right_weight >= 0.0 && right_weight <= 1.0,
                    "AttentionDecoder::score: right_weight must be in [0, 1], got ", right_weight);
  TORCH_CHECK_VALUE(right_weight == 0.0 || bidirectional(),
                    "AttentionDecoder::score: right_weight ", right_weight,
                    " needs a right-to-left decoder (right_blocks > 0); this decoder has none");
  const auto vocab = options.vocab_size();
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    for (const auto token : hypotheses[i]) {
      TORCH_CHECK_VALUE(token >= 0 && token < vocab, "AttentionDecoder::score: hypothesis ", i,
                        " holds token ", token, ", outside [0, ", vocab, ")");
    }
  }
  DecoderScores scores;
  if (hypotheses.empty()) return scores;
  const auto n = static_cast<int64_t>(hypotheses.size());
  const auto one = memory.dim() == 2 ? memory.unsqueeze(0) : memory;
  const auto repeated = one.expand({n, one.size(1), one.size(2)}).contiguous();
  const auto device = memory.device();
  const auto run = [&](TransformerDecoder& decoder, bool reversed) {
    const auto f = teacher_forcing(hypotheses, sos_eos(), reversed);
    const auto logits = decoder(f.inputs.to(device), f.lengths.to(device), repeated);
    return sum_log_probs(logits, f.inputs, f.lengths, sos_eos());
  };
  scores.left = run(left, false);
  if (right_weight > 0.0) scores.right = run(right, true);
  return scores;
}

int64_t attention_decoder_parameter_count(const AttentionDecoderOptions& o) {
  const int64_t d = o.dim(), v = o.vocab_size(), f = o.ffn_dim();
  // Three LayerNorms, self-attention (qkv and proj), cross-attention (q, kv and proj), the MLP.
  const int64_t block = 3 * 2 * d + (4 * d * d + 4 * d) + (4 * d * d + 4 * d) + (2 * d * f + f + d);
  const auto direction = [&](int64_t blocks) {
    return v * d + blocks * block + 2 * d + (v * d + v);  // embed, blocks, after_norm, output
  };
  return direction(o.num_blocks()) + (o.right_blocks() > 0 ? direction(o.right_blocks()) : 0);
}

}  // namespace attnzoo
