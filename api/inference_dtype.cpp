#include <attnzoo/api/inference_dtype.h>

#include <attnzoo/core/dtype_device.h>

#include <ATen/cpu/Utils.h>

#include <string>

namespace attnzoo {

CpuBf16Support cpu_bf16_support() {
  static const CpuBf16Support support = [] {
    CpuBf16Support out;
    const auto capabilities = at::cpu::get_cpu_capabilities();
    const auto flag = [&](const std::string& name) {
      const auto it = capabilities.find(name);
      return it != capabilities.end() && it->second.isBool() && it->second.toBool();
    };
    out.avx512_bf16 = flag("avx512_bf16");
    out.amx_bf16 = flag("amx_bf16");
    return out;
  }();
  return support;
}

c10::ScalarType resolve_inference_dtype(InferenceDtype dtype, c10::Device device,
                                        const CpuBf16Support& cpu) {
  switch (dtype) {
    case InferenceDtype::kBf16:
      return c10::kBFloat16;
    case InferenceDtype::kFp16:
      return c10::kHalf;
    case InferenceDtype::kAuto:
      return device.is_cpu() && (cpu.avx512_bf16 || cpu.amx_bf16) ? c10::kBFloat16 : c10::kFloat;
    case InferenceDtype::kFp32:
      break;
  }
  return c10::kFloat;
}

c10::ScalarType resolve_inference_dtype(InferenceDtype dtype, c10::Device device) {
  return resolve_inference_dtype(dtype, device, cpu_bf16_support());
}

c10::ScalarType parse_inference_dtype(const std::string& who, const std::string& name,
                                      c10::Device device, bool accept_fp64) {
  return name == "auto" ? resolve_inference_dtype(InferenceDtype::kAuto, device)
                        : parse_dtype(who, name, accept_fp64);
}

}  // namespace attnzoo
