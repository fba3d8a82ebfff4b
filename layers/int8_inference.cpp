#include <attnzoo/layers/attention.h>
#include <attnzoo/layers/conformer_parts.h>
#include <attnzoo/layers/int8_inference.h>
#include <attnzoo/layers/transformer_parts.h>

namespace attnzoo {

namespace {

int64_t switch_module(torch::nn::Module& module, bool on) {
  if (auto* attention = module.as<MultiheadAttentionImpl>()) return attention->set_int8(on);
  if (auto* mlp = module.as<MlpImpl>()) return mlp->set_int8(on);
  if (auto* feed_forward = module.as<ConformerFeedForwardImpl>()) return feed_forward->set_int8(on);
  return 0;
}

}  // namespace

int64_t set_int8_inference(torch::nn::Module& model, bool on) {
  // modules(include_self = true) needs the model held by a shared_ptr; the model itself first.
  int64_t switched = switch_module(model, on);
  for (const auto& module : model.modules(/*include_self=*/false)) {
    switched += switch_module(*module, on);
  }
  return switched;
}

}  // namespace attnzoo
