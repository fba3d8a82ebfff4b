// The options of the AdamW optimizer (train/optimizer.h). Defined here, beside the training
// config, so that a training YAML's `optimizer:` section reads straight into them
// (configs/train_config.h): the optimizer and the config share one struct.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace attnzoo {

struct SliceSettings {
  std::optional<double> lr;            // unset: the rule's (or the default) learning rate
  std::optional<double> weight_decay;  // unset: the rule's (or the default)
};

// Parameters whose name matches `pattern` (a regular expression matched against the whole name,
// e.g. `.*\.attn\.qkv\.weight`) take these settings. The first matching rule wins.
struct ParameterGroupRule {
  std::string pattern;
  std::optional<double> lr;
  std::optional<double> weight_decay;
  // Equal parts of the first dimension with their own settings: 3 for a fused q/k/v weight or
  // bias (rows q, then k, then v). Empty: the whole tensor as one.
  std::vector<SliceSettings> slices;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  // No weight decay, unless a rule sets one, for parameters of at most one dimension (norms,
  // biases, BatchNorm) and for those named like tokens and position embeddings (cls_token,
  // reg_token, pos_embed, pos_bias_u, pos_bias_v, mask_token), as timm and the notes advise.
  bool no_decay_on_norms_biases_tokens = true;
  std::vector<ParameterGroupRule> rules;
};

}  // namespace attnzoo
