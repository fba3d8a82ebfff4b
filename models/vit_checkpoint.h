// ViT checkpoints in the three layouts users bring, mapped onto timm's names (the model's own):
//   timm          blocks.{i}.attn.qkv.weight, ... (canonical: loaded as is)
//   torchvision   conv_proj, encoder.layers.encoder_layer_{i}.self_attention.in_proj_weight, ...
//   hf            (vit. | deit. | audio_spectrogram_transformer.)embeddings.patch_embeddings.
//                 projection (and DeiT's and AST's distillation_token),
//                 encoder.layer.{i}.attention. attention.{query,key,value} (separate: fused into
//                 qkv as rows [q; k; v]), ... as in the Hub's files, or
//                 layers.{i}.attention.{q,k,v,o}_proj, mlp.fc1, ... as transformers >= 5 names its
//                 state_dict; AST's classifier.{layernorm,dense}, DeiT's cls_classifier and
//                 distillation_classifier
// This is the one place where those layouts are known.
#pragma once

#include <attnzoo/io/safetensors.h>
#include <attnzoo/models/vit.h>

#include <optional>

#include <set>
#include <string>

namespace attnzoo {

enum class ViTCheckpointFormat { kTimm, kTorchvision, kHuggingFace };

// "timm" | "torchvision" | "hf"; throws naming the accepted names.
ViTCheckpointFormat parse_vit_format(const std::string& name);
const char* vit_format_name(ViTCheckpointFormat format);

// Guesses the layout from the tensor names.
ViTCheckpointFormat detect_vit_format(const io::TensorDict& tensors);

struct MappedCheckpoint {
  io::TensorDict tensors;         // timm names
  std::set<std::string> ignored;  // source tensors with no counterpart (e.g. HF's pooler)
};

// Renames (and for Hugging Face fuses q, k, v) into timm's layout. Unknown names are kept as they
// are, so that the strict loader reports them.
MappedCheckpoint to_timm_layout(const io::TensorDict& tensors, ViTCheckpointFormat format);

struct ViTLoadReport {
  ViTCheckpointFormat format;
  std::set<std::string> ignored;  // source tensors without a counterpart
  bool pos_embed_resampled = false;
};

// Loads a checkpoint of any supported layout into `model`: the layout is `format` or detected,
// mapped onto timm's names, the position embedding resampled when the checkpoint was trained at
// another resolution (with the rule of the library that wrote it), then loaded strictly (`optional`
// names may be absent, e.g. the classifier when fine-tuning). Throws CheckpointError naming
// `source` and every problem.
ViTLoadReport load_vit_checkpoint(VisionTransformerImpl& model, const io::TensorDict& tensors,
                                  std::optional<ViTCheckpointFormat> format,
                                  const std::string& source,
                                  const std::set<std::string>& optional = {});

}  // namespace attnzoo
