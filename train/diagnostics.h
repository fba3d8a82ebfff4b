// Training diagnostics: what each attention head does and
// how large each parameter's gradient is, as numbers a trainer logs every N steps.
//
//   attnzoo::AttentionRecorder recorder;                  // layers/attention.h
//   auto loss = criterion(model->forward(images), labels);  // the training forward, recorded
//   auto stats = attnzoo::attention_statistics(recorder.records());
//   loss.backward();
//   auto grads = attnzoo::gradient_norms(model->named_parameters());
//   log << attnzoo::to_json(stats).dump() << attnzoo::to_json(grads).dump();
//
// or, on a batch of its own (an extra forward in eval mode, without gradients):
//   auto stats = attnzoo::attention_statistics(*model, images);
//
// Attention entropy is the entropy of each query's attention distribution, in nats: log(n) for
// uniform attention over n keys (a head that does not choose), 0 for a head that attends to one
// key. Heads whose entropy collapses to 0 early in training, or stays at log(n), are the design
// notes' warning signs; so is a parameter whose gradient norm dwarfs the others.
#pragma once

#include <attnzoo/layers/attention.h>
#include <attnzoo/models/conformer.h>
#include <attnzoo/models/vit.h>

#include <torch/ordered_dict.h>
#include <torch/types.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace attnzoo {

// Per attention layer (one row per recorded attention call, in forward order: the blocks of a ViT
// or a Conformer) and per head; float64 tensors [layers, heads] on the CPU. Means run over the
// batch and the valid queries: padded queries and queries that see no key do not count. A layer
// whose backend has no probabilities (an approximation such as "linear") is NaN throughout.
struct AttentionStatistics {
  torch::Tensor entropy;             // mean entropy of a query's distribution, nats
  torch::Tensor normalized_entropy;  // entropy / log(keys the query may see), in [0, 1]; mean
                                     // over queries that see at least 2 keys (NaN if none does)
  torch::Tensor min_weight;          // smallest probability on a key a valid query may see
  torch::Tensor max_weight;          // largest probability
  torch::Tensor mean_max_weight;     // mean over valid queries of their largest probability

  int64_t layers() const { return entropy.defined() ? entropy.size(0) : 0; }
  int64_t heads() const { return entropy.defined() ? entropy.size(1) : 0; }
};

// The statistics of recorded attention calls (AttentionRecorder::records()). Every record must
// have the same number of heads.
AttentionStatistics attention_statistics(const std::vector<AttentionRecord>& records);

// The model's attention calls on one batch: a forward in eval mode (no dropout, no update of
// BatchNorm's running statistics) without gradients; the model's mode is restored afterwards.
//   ViT:        images [B, C, H, W] -> depth records [B, H, N, N]
//   encoder:    features [B, T, F], lengths [B] (undefined: all valid), the chunk mask of
//               chunk_size / num_left_chunks as in its forward -> num_layers records [B, H, T', T']
//   Conformer:  x [B, T, D] (the blocks alone), lengths [B]
std::vector<AttentionRecord> record_attention(VisionTransformerImpl& model,
                                              const torch::Tensor& images);
// Any forward of `module` (e.g. its family's, configs/model_family.h), in the same conditions.
std::vector<AttentionRecord> record_attention(torch::nn::Module& module,
                                              const std::function<void()>& forward);
std::vector<AttentionRecord> record_attention(ConformerEncoderImpl& model,
                                              const torch::Tensor& features,
                                              const torch::Tensor& lengths = {},
                                              int64_t chunk_size = 0, int64_t num_left_chunks = -1);
std::vector<AttentionRecord> record_attention(ConformerImpl& model, const torch::Tensor& x,
                                              const torch::Tensor& lengths = {});

// attention_statistics(record_attention(...)).
AttentionStatistics attention_statistics(VisionTransformerImpl& model, const torch::Tensor& images);
AttentionStatistics attention_statistics(ConformerEncoderImpl& model, const torch::Tensor& features,
                                         const torch::Tensor& lengths = {});
AttentionStatistics attention_statistics(ConformerImpl& model, const torch::Tensor& x,
                                         const torch::Tensor& lengths = {});

// Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", section
// 3): per layer the mean over heads plus the identity (the residual connection), rows
// renormalised to sum to 1, multiplied through the layers: R = Â_L · ... · Â_1.
// weights: per layer [B, H, N, N] (at least one) -> [B, N, N] float32, row i = how much each input
// token contributes to token i after the last layer.
torch::Tensor attention_rollout(const std::vector<torch::Tensor>& weights);

// L2 norms of the gradients of named parameters (Module::named_parameters()).
struct GradientNorms {
  std::vector<std::pair<std::string, double>> parameters;  // with a gradient, in the given order
  std::vector<std::string> without_gradient;               // .grad undefined
  double total = 0.0;  // sqrt of the sum of squares: the norm gradient clipping compares
};
GradientNorms gradient_norms(const torch::OrderedDict<std::string, torch::Tensor>& parameters);

// JSON: {"layers", "heads", "entropy": [[...] per layer], "normalized_entropy", "min_weight",
// "max_weight", "mean_max_weight"} (NaN is null) and {"total", "parameters": {name: norm},
// "without_gradient": [...]}.
nlohmann::json to_json(const AttentionStatistics& statistics);
nlohmann::json to_json(const GradientNorms& norms);

// Compact text for a log: one line per layer ("layer 0 entropy 2.07 2.08 | norm 0.99 1.00 | max
// 0.15 0.18"), and a line with the total gradient norm and the `top` largest parameter norms.
std::string to_text(const AttentionStatistics& statistics);
std::string to_text(const GradientNorms& norms, size_t top = 5);

}  // namespace attnzoo
