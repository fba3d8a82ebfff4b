// What every test binary needs to compare tensors, read errors and write scratch files.
#pragma once

#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <type_traits>

namespace attnzoo::testing {

// True in a sanitizer build (tools/sanitize.sh), where instrumented code runs 3 to 10 times
// slower: a test that streams a long input to show bounded memory streams a shorter one there
// (the Release suite streams the whole length; the code paths are the same).
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ATTNZOO_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ATTNZOO_TEST_SANITIZED 1
#endif
#ifdef ATTNZOO_TEST_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

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

// The whole of a file, as bytes (empty when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// `bytes` as the whole of the file at `path`.
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The text of the file `source` with its first `from` replaced by `to`, written as `target` (an
// edited copy of a config); false, and nothing written, when `source` holds no `from`.
inline bool copy_edited(const std::string& source, const std::string& target,
                        const std::string& from, const std::string& to) {
  auto text = read_file(source);
  const auto at = text.find(from);
  if (at == std::string::npos) return false;
  text.replace(at, from.size(), to);
  write_file(target, text);
  return true;
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

// A fresh_dir of the running test (named after its suite and case), removed with its contents
// when the test is done with it.
class Scratch {
 public:
  Scratch() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    auto name = std::string(info->test_suite_name()) + "." + info->name();
    std::replace(name.begin(), name.end(), '/', '_');  // parameterised tests: Suite/Case/0
    dir_ = fresh_dir(name);
  }
  ~Scratch() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // A file (or folder) of the scratch folder.
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

// `samples` ([n], in [-1, 1]) as a 16-bit PCM mono WAV file at `rate`: each sample times 32768,
// rounded and clamped, so that a reader that divides by 32768 (libsndfile) gets back samples
// already on that grid exactly.
inline void write_wav16(const std::string& path, const torch::Tensor& samples, int64_t rate) {
  std::ofstream out(path, std::ios::binary);
  const auto n = static_cast<uint32_t>(samples.size(0));
  const auto put32 = [&](uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  const auto put16 = [&](uint16_t v) { out.write(reinterpret_cast<const char*>(&v), 2); };
  out.write("RIFF", 4);
  put32(36 + 2 * n);
  out.write("WAVEfmt ", 8);
  put32(16);
  put16(1);  // PCM
  put16(1);  // mono
  put32(static_cast<uint32_t>(rate));
  put32(static_cast<uint32_t>(rate) * 2);
  put16(2);
  put16(16);
  out.write("data", 4);
  put32(2 * n);
  const auto pcm = (samples.to(torch::kDouble) * 32768.0)
                       .round()
                       .clamp(-32768, 32767)
                       .to(torch::kShort)
                       .contiguous();
  out.write(reinterpret_cast<const char*>(pcm.data_ptr<int16_t>()), 2 * n);
}

}  // namespace attnzoo::testing
