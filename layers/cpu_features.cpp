#include <attnzoo/layers/cpu_features.h>

#include <ATen/cpu/Utils.h>

namespace attnzoo::detail {

bool cpu_has(const char* feature) {
  static const auto capabilities = at::cpu::get_cpu_capabilities();
  const auto found = capabilities.find(feature);
  return found != capabilities.end() && found->second.isBool() && found->second.toBool();
}

}  // namespace attnzoo::detail
