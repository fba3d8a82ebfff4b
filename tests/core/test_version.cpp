// attnzoo's version is the CMake project's, and LibTorch's the one of the headers it was built
// against.
#include <attnzoo/core/version.h>

#include <gtest/gtest.h>
#include <torch/headeronly/version.h>

namespace attnzoo {
namespace test_version {

TEST(Version, IsTheProjectsAndLibTorchs) {
  EXPECT_STREQ(version(), ATTNZOO_TEST_PROJECT_VERSION);
  EXPECT_STREQ(torch_version(), TORCH_VERSION);
  EXPECT_EQ(std::string(torch_version()).rfind("2.", 0), 0u);
}

}  // namespace test_version
}  // namespace attnzoo
