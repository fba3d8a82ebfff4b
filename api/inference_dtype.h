// The dtype a model runs in when its caller leaves the choice to the config (inference.dtype):
// `auto` is bfloat16 where the CPU multiplies bfloat16 natively (AVX512-BF16, or AMX's tiles, which
// oneDNN's GEMMs use: 5x the float32 rate on a 2-core Sapphire Rapids, docs/benchmarks.md), and
// float32 everywhere else, CUDA included.
//
//   const auto dtype = attnzoo::resolve_inference_dtype(InferenceDtype::kAuto, torch::kCPU);
#pragma once

#include <attnzoo/configs/model_config.h>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace attnzoo {

// What the CPU offers bfloat16 matrix products (as LibTorch's cpuinfo reads it).
struct CpuBf16Support {
  bool avx512_bf16 = false;
  bool amx_bf16 = false;
};
CpuBf16Support cpu_bf16_support();

// fp32, bf16 and fp16 as named; auto: bf16 on a CPU with either of `cpu`'s features, else fp32.
c10::ScalarType resolve_inference_dtype(InferenceDtype dtype, c10::Device device,
                                        const CpuBf16Support& cpu);
// The same on this process's CPU.
c10::ScalarType resolve_inference_dtype(InferenceDtype dtype, c10::Device device);

// A flag's or key's value: "auto" resolved on `device`, else parse_dtype(who, name, accept_fp64)
// ("fp32", "bf16", "fp16", and "fp64" where accepted; c10::ValueError naming `who` otherwise).
c10::ScalarType parse_inference_dtype(const std::string& who, const std::string& name,
                                      c10::Device device, bool accept_fp64 = false);

}  // namespace attnzoo
