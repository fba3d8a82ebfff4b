// What every test binary needs to compare tensors, read errors and write scratch files.
#pragma once

#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/types.h>
#include <unistd.h>

#include <exception>
#include <filesystem>
#include <string>
#include <type_traits>

namespace attnzoo::test_util {

// max |a − b| over all elements, computed in float64 on the CPU (a and b broadcastable).
inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kCPU, torch::kDouble) - b.to(torch::kCPU, torch::kDouble))
      .abs()
      .max()
      .item<double>();
}

// The message of the exception of type E that `f` throws (a c10::Error's without LibTorch's
// backtrace), or "(no error)" when it throws nothing. An exception of another type propagates and
// fails the test, so error_of<AudioError>(...) also asserts the type.
template <typename E = std::exception, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    if constexpr (std::is_base_of_v<c10::Error, E>) {
      return e.what_without_backtrace();
    } else {
      if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e)) {
        return torch_error->what_without_backtrace();
      }
      return e.what();
    }
  }
  return "(no error)";
}

// An empty folder of the temp dir, private to this process: CTest runs each case as its own
// process, several at a time (-j), and two cases must not clear each other's files.
inline std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) /
                   ("attnzoo_" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace attnzoo::test_util
