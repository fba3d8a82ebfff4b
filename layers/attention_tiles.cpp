#include <attnzoo/layers/attention_internal.h>
#include <attnzoo/layers/attention_tiles.h>

#include <vector>

namespace attnzoo::detail {

TileMasks TileMasks::of(const AttentionMask& mask, int64_t query_len, int64_t key_len,
                        torch::Device device) {
  TileMasks masks;
  if (mask.key_lengths().defined()) {
    masks.key_lengths = mask.key_lengths().to(device, torch::kLong);
    // Reading the lengths off a GPU would synchronise; the skips are optimisations only.
    if (mask.key_lengths().device().is_cpu() && mask.key_lengths().numel() > 0) {
      masks.max_key_length = mask.key_lengths().max().item<int64_t>();
      // Lengths that cover every key exclude nothing: no tile needs them.
      if (mask.key_lengths().min().item<int64_t>() >= key_len) {
        masks.key_lengths = torch::Tensor();
        masks.max_key_length = -1;
      }
    }
  }
  if (mask.key_padding_mask().defined())
    masks.key_padding_mask = mask.key_padding_mask().to(device);
  if (mask.attn_mask().defined()) masks.attn_mask = as_4d(mask.attn_mask().to(device));
  if (mask.causal()) {
    masks.causal = true;
    masks.causal_offset =
        mask.causal_alignment() == CausalAlignment::kBottomRight ? key_len - query_len : 0;
  }
  return masks;
}

bool TileMasks::excluded(int64_t i0, int64_t lc, int64_t j0) const {
  if (causal && j0 > i0 + lc - 1 + causal_offset) return true;
  return max_key_length >= 0 && j0 >= max_key_length;
}

std::optional<torch::Tensor> TileMasks::allowed(int64_t i0, int64_t lc, int64_t j0, int64_t sc,
                                                torch::Device device) const {
  std::optional<torch::Tensor> result;
  auto combine = [&](const torch::Tensor& part) {
    result = result ? torch::logical_and(*result, part) : part;
  };
  const auto index_options = torch::TensorOptions().dtype(torch::kLong).device(device);
  if (key_lengths.defined()) {
    const auto keys = torch::arange(j0, j0 + sc, index_options);
    // [B, sc] -> [B, 1, 1, sc]
    combine((keys.view({1, sc}) < key_lengths.view({-1, 1})).unsqueeze(1).unsqueeze(1));
  }
  if (key_padding_mask.defined()) {
    combine(key_padding_mask.narrow(1, j0, sc).logical_not().unsqueeze(1).unsqueeze(1));
  }
  if (attn_mask.defined()) combine(tile_of(attn_mask, i0, lc, j0, sc).logical_not());
  // The causal mask only matters where the tile reaches past the diagonal.
  if (causal && j0 + sc - 1 > i0 + causal_offset) {
    const auto rows = torch::arange(i0, i0 + lc, index_options).view({lc, 1});
    const auto cols = torch::arange(j0, j0 + sc, index_options).view({1, sc});
    combine((cols <= rows + causal_offset).view({1, 1, lc, sc}));
  }
  return result;
}

void TileMasks::save(torch::autograd::AutogradContext* ctx, const std::string& prefix) const {
  auto& data = ctx->saved_data;
  if (key_lengths.defined()) data[prefix + "key_lengths"] = key_lengths;
  if (key_padding_mask.defined()) data[prefix + "key_padding_mask"] = key_padding_mask;
  if (attn_mask.defined()) data[prefix + "attn_mask"] = attn_mask;
  data[prefix + "causal"] = causal;
  data[prefix + "causal_offset"] = causal_offset;
  data[prefix + "max_key_length"] = max_key_length;
}

TileMasks TileMasks::load(torch::autograd::AutogradContext* ctx, const std::string& prefix) {
  const auto& data = ctx->saved_data;
  auto tensor = [&](const char* name) {
    const auto it = data.find(prefix + name);
    return it == data.end() ? torch::Tensor() : it->second.toTensor();
  };
  TileMasks masks;
  masks.key_lengths = tensor("key_lengths");
  masks.key_padding_mask = tensor("key_padding_mask");
  masks.attn_mask = tensor("attn_mask");
  masks.causal = data.at(prefix + "causal").toBool();
  masks.causal_offset = data.at(prefix + "causal_offset").toInt();
  masks.max_key_length = data.at(prefix + "max_key_length").toInt();
  return masks;
}

torch::Tensor tile_of(const torch::Tensor& t4, int64_t i0, int64_t lc, int64_t j0, int64_t sc) {
  auto t = t4;
  if (t.size(2) != 1) t = t.narrow(2, i0, lc);
  if (t.size(3) != 1) t = t.narrow(3, j0, sc);
  return t;
}

torch::Tensor reduce_to(const torch::Tensor& grad, const torch::Tensor& like) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < 4; ++d) {
    if (like.size(d) == 1 && grad.size(d) != 1) dims.push_back(d);
  }
  return dims.empty() ? grad : grad.sum(dims, /*keepdim=*/true);
}

}  // namespace attnzoo::detail
