// The CLI's --dtype values.
#pragma once

#include <c10/util/Exception.h>
#include <torch/types.h>

#include <string>

namespace attnzoo::cli {

// "fp32" | "bf16" | "fp16" | "fp64" -> the dtype; anything else is a c10::ValueError naming
// --dtype. Each command's flag says which of them it takes.
inline torch::Dtype dtype_flag(const std::string& name) {
  if (name == "fp32") return torch::kFloat;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kHalf;
  if (name == "fp64") return torch::kDouble;
  TORCH_CHECK_VALUE(false, "--dtype must be fp32, bf16, fp16 or fp64, got '", name, "'");
  return torch::kFloat;  // unreachable; keeps -Wreturn-type quiet
}

}  // namespace attnzoo::cli
