// The names of dtypes and devices that options, YAML and flags use, and the errors that name the
// option.
#include <attnzoo/core/dtype_device.h>

#include <c10/util/Exception.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace attnzoo {
namespace test_dtype_device {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

TEST(DtypeNames, RoundTripAndRefuseTheRest) {
  for (const char* name : {"fp32", "bf16", "fp16"}) {
    EXPECT_STREQ(dtype_name(parse_dtype("--dtype", name)), name);
  }
  EXPECT_EQ(parse_dtype("--dtype", "bf16"), c10::kBFloat16);
  EXPECT_EQ(parse_dtype("--dtype", "fp64", /*accept_fp64=*/true), c10::kDouble);
  EXPECT_THAT(
      [] { parse_dtype("--dtype", "fp64"); },
      ThrowsMessage<c10::ValueError>(HasSubstr("--dtype must be fp32, bf16 or fp16, got 'fp64'")));
  EXPECT_THAT([] { parse_dtype("--dtype", "int8", /*accept_fp64=*/true); },
              ThrowsMessage<c10::ValueError>(
                  HasSubstr("--dtype must be fp32, bf16, fp16 or fp64, got 'int8'")));
  EXPECT_THAT([] { dtype_name(c10::kInt); },
              ThrowsMessage<c10::ValueError>(HasSubstr("has no name")));
}

TEST(DtypeNames, CheckNamesWhatItRefuses) {
  check_dtype("dtype", c10::kHalf);
  check_dtype("dtype", c10::kDouble, /*accept_fp64=*/true);
  EXPECT_THAT([] { check_dtype("Task: dtype", c10::kDouble); },
              ThrowsMessage<c10::ValueError>(
                  HasSubstr("Task: dtype must be fp32, bf16 or fp16, got fp64")));
  EXPECT_THAT([] { check_dtype("Task: dtype", c10::kChar); },
              ThrowsMessage<c10::ValueError>(
                  HasSubstr("Task: dtype must be fp32, bf16 or fp16, got Char")));
}

TEST(DeviceNames, CpuAlwaysAndNothingElseWithoutCuda) {
  EXPECT_EQ(parse_device("--device", "cpu"), c10::Device(c10::kCPU));
  check_device("device", c10::kCPU);
  EXPECT_THAT(
      [] { parse_device("--device", "tpu"); },
      ThrowsMessage<c10::ValueError>(HasSubstr("--device must be cpu, cuda or cuda:N, got 'tpu'")));
  EXPECT_THAT([] { check_device("Task: device", c10::Device(c10::kMeta)); },
              ThrowsMessage<c10::ValueError>(
                  HasSubstr("Task: device must be cpu, cuda or cuda:N, got meta")));
  // This program loads c10 alone, never LibTorch's CUDA library, so it sees no CUDA device on any
  // machine: the refusal is the one a CPU-only process gives.
  EXPECT_THAT([] { parse_device("--device", "cuda:0"); },
              ThrowsMessage<c10::ValueError>(
                  HasSubstr("--device cuda:0: no CUDA device is available to this process")));
}

}  // namespace test_dtype_device
}  // namespace attnzoo
