#include <attnzoo/core/usable_cores.h>

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

namespace attnzoo {
namespace {

// The first line of a file; empty when it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// Whole cores for a quota over a period (both > 0), rounded up.
std::optional<int> cores_of(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<int>(std::max<long long>(1, (quota + period - 1) / period));
}

// This process's cgroup v2 path ("0::/PATH" in /proc/self/cgroup), or empty.
std::string own_cgroup_v2() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

}  // namespace

std::optional<int> cpu_max_cores(const std::string& line) {
  std::istringstream in(line);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max") return std::nullopt;
  try {
    size_t used = 0;
    const long long value = std::stoll(quota, &used);
    if (used != quota.size()) return std::nullopt;
    return cores_of(value, period);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<int> cfs_quota_cores(const std::string& quota, const std::string& period) {
  try {
    return cores_of(std::stoll(quota), std::stoll(period));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

int usable_cores() {
  int cores = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  if (cores <= 0) cores = 1;
  std::vector<std::optional<int>> quotas = {
      cpu_max_cores(first_line("/sys/fs/cgroup/cpu.max")),
      cfs_quota_cores(first_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
                      first_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us")),
      cfs_quota_cores(first_line("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"),
                      first_line("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us"))};
  const auto own = own_cgroup_v2();
  if (!own.empty() && own != "/") {
    quotas.push_back(cpu_max_cores(first_line("/sys/fs/cgroup" + own + "/cpu.max")));
  }
  for (const auto& quota : quotas) {
    if (quota) cores = std::min(cores, *quota);
  }
  return std::max(cores, 1);
}

}  // namespace attnzoo
