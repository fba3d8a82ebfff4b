#include <attnzoo/layers/attention_mask.h>

#include <attnzoo/layers/attention_internal.h>

#include <sstream>

namespace attnzoo {

std::string shape_string(torch::IntArrayRef sizes) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < sizes.size(); ++i) out << (i ? ", " : "") << sizes[i];
  out << ']';
  return out.str();
}

namespace {

// Checks that `t` broadcasts to [B, H, L, S] with no dimension to spare.
void check_broadcastable(const torch::Tensor& t, const char* name, int64_t batch, int64_t heads,
                         int64_t query_len, int64_t key_len, const std::string& who) {
  const std::vector<int64_t> target{batch, heads, query_len, key_len};
  bool ok = t.dim() >= 1 && t.dim() <= 4;
  for (int64_t i = 0; ok && i < t.dim(); ++i) {
    const int64_t have = t.size(t.dim() - 1 - i);
    const int64_t want = target[3 - i];
    ok = have == want || have == 1;
  }
  TORCH_CHECK_VALUE(ok, who, ": ", name,
                    " must be broadcastable to [B, H, L, S] = ", shape_string(target),
                    " (each dim equal or 1, at most 4 dims), got ", shape_string(t.sizes()));
}

using detail::as_4d;

}  // namespace

void AttentionMask::validate(int64_t batch, int64_t heads, int64_t query_len, int64_t key_len,
                             const std::string& who) const {
  if (key_lengths_.defined()) {
    const auto& t = key_lengths_;
    TORCH_CHECK_VALUE(!t.is_floating_point() && !t.is_complex() && t.scalar_type() != torch::kBool,
                      who, ": key_lengths must be an integer tensor [B], got ", t.scalar_type());
    TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == batch, who,
                      ": key_lengths must have shape [B] = [", batch, "], got ",
                      shape_string(t.sizes()));
    // Reading values off a GPU would synchronise (and break CUDA-graph capture): checked on CPU.
    if (t.device().is_cpu() && t.numel() > 0) {
      const auto lo = t.min().item<int64_t>();
      const auto hi = t.max().item<int64_t>();
      TORCH_CHECK_VALUE(lo >= 0 && hi <= key_len, who, ": key_lengths must lie in [0, S] = [0, ",
                        key_len, "], got values in [", lo, ", ", hi, "]");
    }
  }
  if (key_padding_mask_.defined()) {
    const auto& t = key_padding_mask_;
    TORCH_CHECK_VALUE(t.scalar_type() == torch::kBool, who,
                      ": key_padding_mask must be bool (true = padding), got ", t.scalar_type());
    TORCH_CHECK_VALUE(t.dim() == 2 && t.size(0) == batch && t.size(1) == key_len, who,
                      ": key_padding_mask must have shape [B, S] = [", batch, ", ", key_len,
                      "], got ", shape_string(t.sizes()));
  }
  if (attn_mask_.defined()) {
    TORCH_CHECK_VALUE(attn_mask_.scalar_type() == torch::kBool, who,
                      ": attn_mask must be bool (true = excluded), got ", attn_mask_.scalar_type(),
                      "; pass additive float masks as `bias`");
    check_broadcastable(attn_mask_, "attn_mask", batch, heads, query_len, key_len, who);
  }
  if (bias_.defined()) {
    TORCH_CHECK_VALUE(bias_.is_floating_point(), who, ": bias must be floating point, got ",
                      bias_.scalar_type(), "; pass boolean masks as `attn_mask`");
    check_broadcastable(bias_, "bias", batch, heads, query_len, key_len, who);
  }
}

std::optional<torch::Tensor> AttentionMask::allowed(int64_t query_len, int64_t key_len,
                                                    torch::Device device) const {
  std::optional<torch::Tensor> allowed;
  auto combine = [&](const torch::Tensor& part) {
    allowed = allowed ? torch::logical_and(*allowed, part) : part;
  };
  const auto index_options = torch::TensorOptions().dtype(torch::kLong).device(device);
  if (key_lengths_.defined()) {
    const auto lengths = key_lengths_.to(device, torch::kLong);
    const auto keys = torch::arange(key_len, index_options);
    combine((keys.view({1, key_len}) < lengths.view({-1, 1})).view({-1, 1, 1, key_len}));
  }
  if (key_padding_mask_.defined()) {
    combine(key_padding_mask_.to(device).logical_not().view({-1, 1, 1, key_len}));
  }
  if (attn_mask_.defined()) combine(as_4d(attn_mask_.to(device).logical_not()));
  if (causal_) {
    const int64_t offset =
        causal_alignment_ == CausalAlignment::kBottomRight ? key_len - query_len : 0;
    const auto rows = torch::arange(query_len, index_options).view({query_len, 1});
    const auto cols = torch::arange(key_len, index_options).view({1, key_len});
    combine((cols <= rows + offset).view({1, 1, query_len, key_len}));
  }
  return allowed;
}

torch::Tensor band_attention_mask(int64_t query_len, int64_t key_len, int64_t left, int64_t right,
                                  torch::Device device) {
  TORCH_CHECK_VALUE(query_len >= 0 && key_len >= query_len,
                    "band_attention_mask: need 0 <= query_len <= key_len, got ", query_len, " and ",
                    key_len);
  if (left < 0 && right < 0) return {};
  const auto index_options = torch::TensorOptions().dtype(torch::kLong).device(device);
  const auto query = torch::arange(key_len - query_len, key_len, index_options).view({-1, 1});
  const auto distance = torch::arange(key_len, index_options).view({1, -1}) - query;  // key − query
  auto allowed = torch::ones({query_len, key_len}, index_options.dtype(torch::kBool));
  if (left >= 0) allowed = allowed.logical_and(distance >= -left);
  if (right >= 0) allowed = allowed.logical_and(distance <= right);
  return allowed.logical_not();
}

SafeAllowedMask make_safe(const torch::Tensor& allowed) {
  SafeAllowedMask safe;
  safe.fully_masked = allowed.any(-1, /*keepdim=*/true).logical_not();
  safe.allowed = torch::logical_or(allowed, safe.fully_masked);
  return safe;
}

}  // namespace attnzoo
