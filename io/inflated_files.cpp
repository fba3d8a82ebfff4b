#include <attnzoo/io/gunzip.h>
#include <attnzoo/io/inflated_files.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

namespace attnzoo::io {
namespace {

// name, size, modification time (nanoseconds since the file clock's epoch)
using FileKey = std::tuple<std::string, uint64_t, int64_t>;

struct Inflations {
  std::mutex mutex;
  std::map<FileKey, std::weak_ptr<const std::string>> shared;
  std::shared_ptr<const std::string> kept;
  int64_t scopes = 0;
};

Inflations& inflations() {
  static Inflations state;
  return state;
}

std::atomic<uint64_t> count{0};

std::optional<FileKey> key_of(const ByteSource& source) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(source.name(), error)) return std::nullopt;
  const auto modified = std::filesystem::last_write_time(source.name(), error);
  if (error) return std::nullopt;
  return FileKey{
      source.name(), source.size(),
      std::chrono::duration_cast<std::chrono::nanoseconds>(modified.time_since_epoch()).count()};
}

std::shared_ptr<const std::string> inflate(const ByteSource& source, uint64_t max_bytes) {
  ++count;
  return std::make_shared<const std::string>(gunzip(source, max_bytes));
}

}  // namespace

std::shared_ptr<const std::string> inflate_shared(const ByteSource& source, uint64_t max_bytes) {
  const auto key = key_of(source);
  if (!key) return inflate(source, max_bytes);
  auto& state = inflations();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    const auto it = state.shared.find(*key);
    if (it != state.shared.end()) {
      if (auto bytes = it->second.lock(); bytes && bytes->size() <= max_bytes) return bytes;
    }
  }
  // Inflated outside the lock: another file may be inflated meanwhile (two loads of one file at
  // once each inflate it, and share what the later one gives).
  auto bytes = inflate(source, max_bytes);
  std::lock_guard<std::mutex> lock(state.mutex);
  for (auto it = state.shared.begin(); it != state.shared.end();) {
    it = it->second.expired() ? state.shared.erase(it) : std::next(it);
  }
  state.shared[*key] = bytes;
  if (state.scopes > 0) state.kept = bytes;
  return bytes;
}

InflationScope::InflationScope() {
  auto& state = inflations();
  std::lock_guard<std::mutex> lock(state.mutex);
  ++state.scopes;
}

InflationScope::~InflationScope() {
  auto& state = inflations();
  std::shared_ptr<const std::string> dropped;  // freed after the lock
  std::lock_guard<std::mutex> lock(state.mutex);
  if (--state.scopes == 0) dropped = std::move(state.kept);
}

uint64_t inflation_count() { return count.load(); }

}  // namespace attnzoo::io
