// The names of dtypes and devices in options, YAML and flags, as every task API, the trainer, the
// server and the CLI take them. In LibTorch's own types (c10 is the part of LibTorch that
// torch::Dtype and torch::Device come from), so that a library needing nothing else of LibTorch
// need not link it.
//
//   const auto dtype = attnzoo::parse_dtype("--dtype", "bf16");     // c10::kBFloat16
//   const auto device = attnzoo::parse_device("--device", "cuda:1");
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace attnzoo {

// "fp32" | "bf16" | "fp16", and "fp64" where `accept_fp64`. Anything else is a c10::ValueError
// beginning with `who`, the option or flag: "--dtype must be fp32, bf16 or fp16, got 'int8'".
c10::ScalarType parse_dtype(const std::string& who, const std::string& name,
                            bool accept_fp64 = false);

// "fp32", "bf16", "fp16" or "fp64": the name parse_dtype takes; c10::ValueError for other dtypes.
const char* dtype_name(c10::ScalarType dtype);

// "cpu" | "cuda" | "cuda:N", checked against the devices this process sees (check_device);
// c10::ValueError beginning with `who` otherwise: "--device cuda: no CUDA device is available to
// this process".
c10::Device parse_device(const std::string& who, const std::string& name);

// c10::ValueError beginning with `who` unless `dtype` is one parse_dtype gives: "dtype must be
// fp32, bf16 or fp16, got Char".
void check_dtype(const std::string& who, c10::ScalarType dtype, bool accept_fp64 = false);
// c10::ValueError beginning with `who` unless `device` is the CPU or a CUDA device this process
// sees.
void check_device(const std::string& who, c10::Device device);

}  // namespace attnzoo
