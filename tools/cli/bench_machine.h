// The machine a benchmark ran on, as the bench commands' JSON records it: on a shared, noisy
// machine a timing means little without the CPU, the threads, the load and the versions.
#pragma once

#include <torch/types.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace attnzoo::cli {

// /proc/cpuinfo's first "model name" ("unknown" when there is none).
std::string cpu_model();
// The processors /proc/cpuinfo lists.
int64_t cpu_count();
// The 1-minute load average (/proc/loadavg); NaN when unreadable.
double load_average();
// The date and time now, UTC, ISO 8601: "2026-12-04T21:30:00Z".
std::string utc_now();
// "cpu", or the CUDA device's name.
std::string device_name(const torch::Device& device);

// {cpu_model, cpu_count, threads (LibTorch's), device_name, libtorch, attnzoo, date}.
nlohmann::json machine_json(const torch::Device& device);

// A JSON number, or null when non-finite or absent.
nlohmann::json json_number(std::optional<double> v);

}  // namespace attnzoo::cli
