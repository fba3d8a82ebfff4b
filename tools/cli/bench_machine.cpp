#include "tools/cli/bench_machine.h"

#include <attnzoo/core/version.h>
#include <torch/torch.h>

#if ATTNZOO_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <cmath>
#include <ctime>
#include <fstream>

namespace attnzoo::cli {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(" \t"));
        return name;
      }
    }
  }
  return "unknown";
}

int64_t cpu_count() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) n += line.rfind("processor", 0) == 0;
  return n;
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = NAN;
  in >> load;
  return load;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

std::string device_name(const torch::Device& device) {
#if ATTNZOO_WITH_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->name;
#else
  (void)device;
#endif
  return "cpu";
}

nlohmann::json machine_json(const torch::Device& device) {
  return {{"cpu_model", cpu_model()},
          {"cpu_count", cpu_count()},
          {"threads", torch::get_num_threads()},
          {"device_name", device_name(device)},
          {"libtorch", torch_version()},
          {"attnzoo", version()},
          {"date", utc_now()}};
}

nlohmann::json json_number(std::optional<double> v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace attnzoo::cli
