// What the classifiers of api/ share: a labelled prediction, a config's labels, and the top-k of
// a logits row.
#pragma once

#include <attnzoo/configs/model_config.h>

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo {

struct Prediction {
  int64_t index = 0;
  std::string label;  // "class <index>" when the config names no labels
  double probability = 0.0;
};

// The labels file of a config: the shipped ImageNet-1k names for `labels: imagenet`, the named
// file for `labels: FILE`, nothing for no labels. Throws naming the file when it cannot be read
// or does not have exactly `classes` non-empty lines.
std::vector<std::string> load_labels(const LabelsConfig& labels, int64_t classes);

// The ImageNet-1k class names file of the zoo (labels/imagenet1k.txt in the first zoo folder
// that has it: configs/zoo_path.h). Throws naming the folders searched when none has it.
std::string imagenet_labels_file();

// Checks a caller's top-k (at least 1): throws c10::ValueError "<who>: topk must be >= 1, got k".
void check_topk(const char* who, int64_t topk);

// logits [classes] -> the `topk` most probable classes (softmax in float64), most probable
// first; topk is clamped to the classes. `labels`: one per class, or empty.
std::vector<Prediction> top_predictions(const torch::Tensor& logits, int64_t topk,
                                        const std::vector<std::string>& labels);

}  // namespace attnzoo
