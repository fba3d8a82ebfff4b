#include <attnzoo/train/diagnostics.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

namespace attnzoo {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The statistics of one record: five [H] float64 tensors in the struct's order.
std::vector<torch::Tensor> layer_statistics(const AttentionRecord& record) {
  const std::vector<int64_t> batch_and_queries = {0, 2};
  const auto p = record.weights.to(torch::kCPU, torch::kDouble);  // [B, H, L, S]
  const int64_t batch = p.size(0), query_len = p.size(2);
  const auto allowed = record.allowed.defined()
                           ? record.allowed.to(torch::kCPU).expand_as(p)
                           : torch::ones_like(p, torch::TensorOptions().dtype(torch::kBool));
  const auto keys_seen = allowed.sum(-1).to(torch::kDouble);  // [B, H, L]
  auto rows = keys_seen > 0;                                  // [B, H, L]
  if (record.valid_queries.defined()) {
    rows = rows.logical_and(
        record.valid_queries.to(torch::kCPU).expand({batch, query_len}).unsqueeze(1));
  }
  const auto rows_d = rows.to(torch::kDouble);
  const auto count = rows_d.sum(batch_and_queries);       // [H]
  const auto entropy_rows = -torch::xlogy(p, p).sum(-1);  // [B, H, L]; 0·log 0 = 0
  const auto entropy = (entropy_rows * rows_d).sum(batch_and_queries) / count;

  const auto spread = rows.logical_and(keys_seen > 1);
  const auto spread_d = spread.to(torch::kDouble);
  const auto normalized_rows = entropy_rows / torch::where(spread, keys_seen.log(), 1.0);
  const auto normalized =
      (normalized_rows * spread_d).sum(batch_and_queries) / spread_d.sum(batch_and_queries);

  const auto counted = allowed.logical_and(rows.unsqueeze(-1));  // [B, H, L, S]
  const double inf = std::numeric_limits<double>::infinity();
  const auto min_weight = torch::where(counted, p, inf).amin({0, 2, 3});
  const auto max_weight = torch::where(counted, p, -inf).amax({0, 2, 3});
  const auto row_max = torch::where(counted, p, 0.0).amax(-1);  // [B, H, L]
  const auto mean_max = (row_max * rows_d).sum(batch_and_queries) / count;
  // A head with no valid query at all (an empty batch entry only): NaN, not ±inf.
  const auto none = count == 0;
  return {entropy, normalized, min_weight.masked_fill(none, kNaN),
          max_weight.masked_fill(none, kNaN), mean_max};
}

std::vector<std::vector<double>> rows_of(const torch::Tensor& t) {
  std::vector<std::vector<double>> out(static_cast<size_t>(t.size(0)));
  const auto c = t.contiguous();
  for (int64_t i = 0; i < c.size(0); ++i) {
    const auto row = c[i];
    out[static_cast<size_t>(i)].assign(row.data_ptr<double>(), row.data_ptr<double>() + c.size(1));
  }
  return out;
}

nlohmann::json matrix_json(const torch::Tensor& t) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& row : rows_of(t)) {
    nlohmann::json r = nlohmann::json::array();
    for (double v : row) r.push_back(std::isfinite(v) ? nlohmann::json(v) : nlohmann::json());
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

AttentionStatistics attention_statistics(const std::vector<AttentionRecord>& records) {
  AttentionStatistics s;
  const auto empty = torch::empty({0, 0}, torch::kDouble);
  if (records.empty()) {
    s.entropy = s.normalized_entropy = s.min_weight = s.max_weight = s.mean_max_weight = empty;
    return s;
  }
  int64_t heads = -1;
  for (const auto& record : records) {
    if (!record.weights.defined()) continue;
    TORCH_CHECK_VALUE(record.weights.dim() == 4, "attention_statistics: weights must be ",
                      "[B, H, L, S], got ", shape_string(record.weights.sizes()));
    TORCH_CHECK_VALUE(heads < 0 || record.weights.size(1) == heads,
                      "attention_statistics: every layer must have the same number of heads, got ",
                      heads, " and ", record.weights.size(1));
    heads = record.weights.size(1);
  }
  TORCH_CHECK_VALUE(heads > 0,
                    "attention_statistics: no record has probabilities (the "
                    "backends approximate softmax attention)");
  std::vector<std::vector<torch::Tensor>> columns(5);
  for (const auto& record : records) {
    const auto layer =
        record.weights.defined()
            ? layer_statistics(record)
            : std::vector<torch::Tensor>(5, torch::full({heads}, kNaN, torch::kDouble));
    for (size_t i = 0; i < 5; ++i) columns[i].push_back(layer[i]);
  }
  s.entropy = torch::stack(columns[0]);
  s.normalized_entropy = torch::stack(columns[1]);
  s.min_weight = torch::stack(columns[2]);
  s.max_weight = torch::stack(columns[3]);
  s.mean_max_weight = torch::stack(columns[4]);
  return s;
}

std::vector<AttentionRecord> record_attention(torch::nn::Module& module,
                                              const std::function<void()>& forward) {
  const bool training = module.is_training();
  module.eval();
  std::vector<AttentionRecord> records;
  try {
    torch::NoGradGuard no_grad;
    AttentionRecorder recorder;
    forward();
    records = recorder.take();
  } catch (...) {
    module.train(training);
    throw;
  }
  module.train(training);
  return records;
}

std::vector<AttentionRecord> record_attention(VisionTransformerImpl& model,
                                              const torch::Tensor& images) {
  return record_attention(model, [&] { model.forward_features(images); });
}

std::vector<AttentionRecord> record_attention(ConformerEncoderImpl& model,
                                              const torch::Tensor& features,
                                              const torch::Tensor& lengths, int64_t chunk_size,
                                              int64_t num_left_chunks) {
  return record_attention(model,
                          [&] { model.forward(features, lengths, chunk_size, num_left_chunks); });
}

std::vector<AttentionRecord> record_attention(ConformerImpl& model, const torch::Tensor& x,
                                              const torch::Tensor& lengths) {
  return record_attention(model, [&] { model.forward(x, lengths); });
}

AttentionStatistics attention_statistics(VisionTransformerImpl& model,
                                         const torch::Tensor& images) {
  return attention_statistics(record_attention(model, images));
}

AttentionStatistics attention_statistics(ConformerEncoderImpl& model, const torch::Tensor& features,
                                         const torch::Tensor& lengths) {
  return attention_statistics(record_attention(model, features, lengths));
}

AttentionStatistics attention_statistics(ConformerImpl& model, const torch::Tensor& x,
                                         const torch::Tensor& lengths) {
  return attention_statistics(record_attention(model, x, lengths));
}

torch::Tensor attention_rollout(const std::vector<torch::Tensor>& weights) {
  TORCH_CHECK_VALUE(!weights.empty(), "attention_rollout: no layers");
  torch::NoGradGuard no_grad;
  torch::Tensor rollout;
  for (size_t l = 0; l < weights.size(); ++l) {
    const auto& w = weights[l];
    TORCH_CHECK_VALUE(w.defined() && w.dim() == 4 && w.size(2) == w.size(3),
                      "attention_rollout: layer ", l, " must be [B, H, N, N], got ",
                      w.defined() ? shape_string(w.sizes()) : "no probabilities");
    TORCH_CHECK_VALUE(
        !rollout.defined() || (w.size(0) == rollout.size(0) && w.size(2) == rollout.size(1)),
        "attention_rollout: layer ", l, " is ", shape_string(w.sizes()), ", the layers before it [",
        rollout.defined() ? rollout.size(0) : 0, ", H, ", rollout.defined() ? rollout.size(1) : 0,
        "]");
    const int64_t n = w.size(2);
    auto a = w.to(torch::kDouble).mean(1) + torch::eye(n, w.options().dtype(torch::kDouble));
    a = a / a.sum(-1, /*keepdim=*/true);
    rollout = rollout.defined() ? torch::matmul(a, rollout) : a;
  }
  return rollout.to(torch::kFloat);
}

GradientNorms gradient_norms(const torch::OrderedDict<std::string, torch::Tensor>& parameters) {
  GradientNorms out;
  std::vector<torch::Tensor> norms;
  for (const auto& item : parameters) {
    const auto& grad = item.value().grad();
    if (!grad.defined()) {
      out.without_gradient.push_back(item.key());
      continue;
    }
    // Accumulated in float64 whatever the gradient's dtype (bf16 gradients overflow nothing here),
    // and brought to the CPU in one transfer.
    norms.push_back(at::linalg_vector_norm(grad.detach(), 2, {}, false, torch::kDouble));
    out.parameters.emplace_back(item.key(), 0.0);
  }
  if (norms.empty()) return out;
  const auto values = torch::stack(norms).to(torch::kCPU).contiguous();
  const double* v = values.data_ptr<double>();
  double squares = 0.0;
  for (size_t i = 0; i < out.parameters.size(); ++i) {
    out.parameters[i].second = v[i];
    squares += v[i] * v[i];
  }
  out.total = std::sqrt(squares);
  return out;
}

nlohmann::json to_json(const AttentionStatistics& s) {
  const bool any = s.layers() > 0;
  const auto m = [&](const torch::Tensor& t) {
    return any ? matrix_json(t) : nlohmann::json::array();
  };
  return {{"layers", s.layers()},
          {"heads", s.heads()},
          {"entropy", m(s.entropy)},
          {"normalized_entropy", m(s.normalized_entropy)},
          {"min_weight", m(s.min_weight)},
          {"max_weight", m(s.max_weight)},
          {"mean_max_weight", m(s.mean_max_weight)}};
}

nlohmann::json to_json(const GradientNorms& norms) {
  nlohmann::json parameters = nlohmann::json::object();
  for (const auto& [name, norm] : norms.parameters) {
    parameters[name] = std::isfinite(norm) ? nlohmann::json(norm) : nlohmann::json();
  }
  return {{"total", std::isfinite(norms.total) ? nlohmann::json(norms.total) : nlohmann::json()},
          {"parameters", std::move(parameters)},
          {"without_gradient", norms.without_gradient}};
}

std::string to_text(const AttentionStatistics& s) {
  if (s.layers() == 0) return {};
  std::ostringstream out;
  out << std::setprecision(3);
  const auto entropy = rows_of(s.entropy);
  const auto normalized = rows_of(s.normalized_entropy);
  const auto max_weight = rows_of(s.mean_max_weight);
  const auto list = [&](const std::vector<double>& values) {
    for (double v : values) out << ' ' << v;
  };
  for (size_t l = 0; l < entropy.size(); ++l) {
    out << "layer " << l << " entropy";
    list(entropy[l]);
    out << " | norm";
    list(normalized[l]);
    out << " | max";
    list(max_weight[l]);
    out << '\n';
  }
  return out.str();
}

std::string to_text(const GradientNorms& norms, size_t top) {
  auto sorted = norms.parameters;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::ostringstream out;
  out << std::setprecision(4) << "grad norm " << norms.total;
  for (size_t i = 0; i < std::min(top, sorted.size()); ++i) {
    out << (i == 0 ? " | " : ", ") << sorted[i].first << ' ' << sorted[i].second;
  }
  if (!norms.without_gradient.empty()) out << " | " << norms.without_gradient.size() << " no grad";
  return out.str();
}

}  // namespace attnzoo
