// inference.dtype's auto against what the kernel says of this CPU (/proc/cpuinfo's flags), and
// the rule on every device and feature set.
#include <attnzoo/api/inference_dtype.h>

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace attnzoo {
namespace {

// The flags of the first processor in /proc/cpuinfo; empty where there is none (not Linux).
std::set<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string flag; words >> flag;) flags.insert(flag);
    return flags;
  }
  return {};
}

TEST(InferenceDtype, CpuSupportIsWhatTheKernelReports) {
  const auto flags = cpuinfo_flags();
  // Elsewhere than Linux on x86 there is no "flags" line to compare with.
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo (not Linux on x86)";
  const auto support = cpu_bf16_support();
  EXPECT_EQ(support.avx512_bf16, flags.count("avx512_bf16") == 1);
  EXPECT_EQ(support.amx_bf16, flags.count("amx_bf16") == 1);
  const bool native = flags.count("avx512_bf16") || flags.count("amx_bf16");
  EXPECT_EQ(resolve_inference_dtype(InferenceDtype::kAuto, c10::kCPU),
            native ? c10::kBFloat16 : c10::kFloat);
}

TEST(InferenceDtype, AutoIsBf16OnlyOnACpuThatMultipliesIt) {
  const CpuBf16Support none, avx512{true, false}, amx{false, true};
  const c10::Device cpu(c10::kCPU), cuda(c10::kCUDA, 0);
  EXPECT_EQ(resolve_inference_dtype(InferenceDtype::kAuto, cpu, none), c10::kFloat);
  EXPECT_EQ(resolve_inference_dtype(InferenceDtype::kAuto, cpu, avx512), c10::kBFloat16);
  EXPECT_EQ(resolve_inference_dtype(InferenceDtype::kAuto, cpu, amx), c10::kBFloat16);
  EXPECT_EQ(resolve_inference_dtype(InferenceDtype::kAuto, cuda, avx512), c10::kFloat);
  // The named ones are what they say, anywhere.
  for (const auto& device : {cpu, cuda}) {
    EXPECT_EQ(resolve_inference_dtype(InferenceDtype::kFp32, device, amx), c10::kFloat);
    EXPECT_EQ(resolve_inference_dtype(InferenceDtype::kBf16, device, none), c10::kBFloat16);
    EXPECT_EQ(resolve_inference_dtype(InferenceDtype::kFp16, device, none), c10::kHalf);
  }
}

}  // namespace
}  // namespace attnzoo
