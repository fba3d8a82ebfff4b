// The family vit (configs/vit_family.cpp), open to the families whose module is also a
// VisionTransformer (ast_family.cpp): they override what differs (their input, sections, outputs)
// and share the rest. Internal to configs/.
#pragma once

#include <attnzoo/configs/model_family.h>
#include <attnzoo/models/vit.h>
#include <attnzoo/models/vit_checkpoint.h>

#include <optional>
#include <string>
#include <vector>

namespace attnzoo {

// The module of a family whose module is a VisionTransformer; throws naming `family` otherwise.
VisionTransformerImpl& vit_module(torch::nn::Module& module, const std::string& family);

class ViTFamily : public ModelFamily {
 public:
  const std::string& name() const override;
  InputKind input_kind() const override;
  std::vector<std::string> checkpoint_formats() const override;
  void read(detail::MapReader& root, ModelConfig& config) const override;
  std::shared_ptr<torch::nn::Module> build(const ModelConfig& config) const override;
  LoadedWeights load_weights(torch::nn::Module& module, ModelConfig& config,
                             const io::TensorDict& tensors, const std::string& format,
                             const std::string& source) const override;
  ModelStats stats(const ModelConfig& config) const override;
  int64_t num_classes(const ModelConfig& config) const override;
  int64_t attention_layers(const ModelConfig& config) const override;
  std::string attention_backend(const ModelConfig& config) const override;
  // [B, C, H, W] with C = in_chans and H, W multiples of the patch size (at least the patch size
  // when patches overlap); other sizes than the config's are fine: the position embedding is
  // resampled.
  void check_input(const ModelConfig& config, const ModelInput& input,
                   const std::string& what) const override;
  ModelInput random_input(const ModelConfig& config, int64_t batch, int64_t) const override;
  torch::Tensor classify(torch::nn::Module& module, const ModelConfig&,
                         const ModelInput& input) const override;
  NamedTensors forward(torch::nn::Module& module, const ModelConfig& config,
                       const ModelInput& input, bool) const override;
  TokenLayout token_layout(const ModelConfig& config, const ModelInput& input) const override;

 protected:
  // The LayerNorm eps a checkpoint layout implies (Hugging Face's 1e-12; timm's and torchvision's
  // 1e-6), given to a model whose config does not state it for that layout; nullopt: none.
  virtual std::optional<double> layout_norm_eps(ViTCheckpointFormat layout) const;

 private:
  std::string name_ = "vit";
};

}  // namespace attnzoo
