// How many cores this process may keep busy: not the machine's count (`nproc` in a container
// reports the host's), but its CPU affinity capped by its cgroup's CPU quota, which Kubernetes
// CPU limits and `docker run --cpus` set. Torch-free.
#pragma once

#include <optional>
#include <string>

namespace attnzoo {

// The cores in this process's affinity mask, capped by its cgroup's quota (cgroup v2 cpu.max, of
// its own cgroup and of the root the container sees; cgroup v1 cpu.cfs_quota_us over
// cpu.cfs_period_us), rounded up; at least 1.
int usable_cores();

// The quota of a cgroup v2 cpu.max line ("QUOTA PERIOD" in microseconds, or "max PERIOD"), in
// cores rounded up: "150000 100000" -> 2; std::nullopt for "max" (no quota) or a line that is not
// one of those.
std::optional<int> cpu_max_cores(const std::string& line);

// The same for cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us contents (a quota of -1: none).
std::optional<int> cfs_quota_cores(const std::string& quota, const std::string& period);

}  // namespace attnzoo
