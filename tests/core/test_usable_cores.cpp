// The cores a process may use: cgroup quotas as Kubernetes and Docker write them, and this
// process's own count against its affinity.
#include <attnzoo/core/usable_cores.h>

#include <gtest/gtest.h>

#include <sched.h>

namespace attnzoo {
namespace test_usable_cores {

TEST(UsableCores, CgroupV2CpuMaxInWholeCoresRoundedUp) {
  EXPECT_EQ(cpu_max_cores("200000 100000"), 2);
  EXPECT_EQ(cpu_max_cores("150000 100000"), 2);  // 1.5 cores: two threads can use them
  EXPECT_EQ(cpu_max_cores("50000 100000"), 1);
  EXPECT_EQ(cpu_max_cores("100000 100000\n"), 1);
  EXPECT_EQ(cpu_max_cores("max 100000"), std::nullopt);
  EXPECT_EQ(cpu_max_cores(""), std::nullopt);
  EXPECT_EQ(cpu_max_cores("12ab 100000"), std::nullopt);
  EXPECT_EQ(cpu_max_cores("100000 0"), std::nullopt);
}

TEST(UsableCores, CgroupV1QuotaOverPeriod) {
  EXPECT_EQ(cfs_quota_cores("300000", "100000"), 3);
  EXPECT_EQ(cfs_quota_cores("-1", "100000"), std::nullopt);
  EXPECT_EQ(cfs_quota_cores("", ""), std::nullopt);
}

TEST(UsableCores, AtLeastOneAndNoMoreThanTheAffinityAllows) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cores = usable_cores();
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, CPU_COUNT(&set));
}

}  // namespace test_usable_cores
}  // namespace attnzoo
