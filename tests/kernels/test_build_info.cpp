#include <attnzoo/kernels/ops.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace test_build_info {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(BuildInfo, SaysWhetherAndForWhichArchitecturesTheKernelsWereBuilt) {
  const std::string info = attnzoo::kernels::build_info();
#if ATTNZOO_WITH_CUDA
  EXPECT_THAT(info, StartsWith("CUDA kernels: built for sm_"));
  EXPECT_THAT(info, HasSubstr("(CUDA "));
#else
  EXPECT_EQ(info, "CUDA kernels: not built");
#endif
}

}  // namespace test_build_info
