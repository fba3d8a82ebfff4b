#include <attnzoo/api/prediction.h>

#include <attnzoo/configs/zoo_path.h>
#include <attnzoo/core/error.h>

#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <stdexcept>

namespace attnzoo {

std::string imagenet_labels_file() {
  constexpr const char* kRelative = "labels/imagenet1k.txt";
  if (auto file = find_in_zoo(kRelative)) return *file;
  std::string searched;
  for (const auto& folder : zoo_search_path()) {
    searched += (searched.empty() ? "" : ", ") + folder.path;
  }
  throw Error(std::string(kRelative) + ": not found in the zoo (searched: " +
              (searched.empty() ? "nothing" : searched) + "; set " + kZooPathVariable + ")");
}

std::vector<std::string> load_labels(const LabelsConfig& labels, int64_t classes) {
  if (labels.source == LabelsConfig::Source::kNone) return {};
  if (labels.source == LabelsConfig::Source::kInline) {
    if (static_cast<int64_t>(labels.names.size()) != classes) {
      throw Error("labels: " + std::to_string(labels.names.size()) + " names for a model of " +
                  std::to_string(classes) + " classes");
    }
    return labels.names;
  }
  const std::string file =
      labels.source == LabelsConfig::Source::kImageNet ? imagenet_labels_file() : labels.file;
  std::ifstream in(file);
  if (!in) throw Error(file + ": cannot read the labels file");
  std::vector<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) {
      throw Error(file + ":" + std::to_string(names.size() + 1) +
                  ": empty label (one label per line, line i for class i)");
    }
    names.push_back(line);
  }
  if (static_cast<int64_t>(names.size()) != classes) {
    throw Error(file + ": " + std::to_string(names.size()) + " labels for a model of " +
                std::to_string(classes) + " classes");
  }
  return names;
}

void check_topk(const char* who, int64_t topk) {
  TORCH_CHECK_VALUE(topk >= 1, who, ": topk must be >= 1, got ", topk);
}

std::vector<Prediction> top_predictions(const torch::Tensor& logits, int64_t topk,
                                        const std::vector<std::string>& labels) {
  TORCH_CHECK_VALUE(logits.dim() == 1 && logits.size(0) >= 1,
                    "top_predictions: logits must be [classes], got ", logits.sizes());
  TORCH_CHECK_VALUE(labels.empty() || static_cast<int64_t>(labels.size()) == logits.size(0),
                    "top_predictions: ", labels.size(), " labels for ", logits.size(0), " classes");
  const auto probabilities = torch::softmax(logits.to(torch::kCPU, torch::kDouble), -1);
  const int64_t k = std::min<int64_t>(std::max<int64_t>(topk, 1), probabilities.size(0));
  const auto [values, indices] = probabilities.topk(k);
  std::vector<Prediction> out;
  out.reserve(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    Prediction p;
    p.index = indices[i].item<int64_t>();
    p.probability = values[i].item<double>();
    p.label =
        labels.empty() ? "class " + std::to_string(p.index) : labels[static_cast<size_t>(p.index)];
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace attnzoo
