#include <attnzoo/core/error.h>
#include <attnzoo/io/atomic_file.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <thread>

namespace attnzoo::io {
namespace {

namespace fs = std::filesystem;

std::string temporary_name(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

// fsync of a file or folder by name; `what` says which in the error.
void sync_path(const std::string& path, const std::string& destination, const char* what,
               int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) {
    throw Error(destination + ": cannot open " + what + " to sync it (" + std::strerror(errno) +
                ")");
  }
  const int synced = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (synced != 0) {
    throw Error(destination + ": cannot sync " + what + " to the disk (" + std::strerror(error) +
                ")");
  }
}

// The kill tests' hook: with ATTNZOO_WRITE_PAUSE_MS=N in the environment, every write says on
// stderr when it begins and pauses N/3 ms at each of three moments (the temporary open and empty,
// written but not synced, renamed but the folder not synced), so that a test can kill inside it.
void pause_for_kill_tests(const std::string& path, const char* moment) {
  static const long pause_ms = [] {
    const char* value = std::getenv("ATTNZOO_WRITE_PAUSE_MS");
    return value ? std::max(0L, std::strtol(value, nullptr, 10)) : 0L;
  }();
  if (pause_ms == 0) return;
  std::fprintf(stderr, "attnzoo: write %s: %s\n", moment, path.c_str());
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms / 3));
}

std::string folder_of(const std::string& path) {
  const auto parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), temporary_(temporary_name(path_)) {
  out_.open(temporary_, std::ios::binary | std::ios::trunc);
  if (!out_) {
    throw Error(path_ + ": cannot write (" + std::strerror(errno) + ")");
  }
  pause_for_kill_tests(path_, "begin");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  if (out_.is_open()) out_.close();
  std::remove(temporary_.c_str());
}

void AtomicFileWriter::commit() {
  if (committed_) throw Error(path_ + ": committed twice");
  out_.flush();
  const bool written = static_cast<bool>(out_);
  out_.close();
  if (!written || out_.fail()) throw Error(path_ + ": write failed (disk full?)");
  pause_for_kill_tests(path_, "written");
  sync_path(temporary_, path_, "the written file", O_RDONLY);
  std::error_code ec;
  fs::rename(temporary_, path_, ec);
  if (ec) {
    throw Error(path_ + ": cannot move the written file into place (" + ec.message() + ")");
  }
  committed_ = true;
  pause_for_kill_tests(path_, "renamed");
  sync_path(folder_of(path_), path_, "its folder", O_RDONLY | O_DIRECTORY);
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicFileWriter file(path);
  file.stream().write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.commit();
}

void sync_file_and_folder(const std::string& path) {
  sync_path(path, path, "the file", O_RDONLY);
  sync_path(folder_of(path), path, "its folder", O_RDONLY | O_DIRECTORY);
}

int remove_abandoned_temporaries(const std::string& folder) {
  static const std::regex temporary(R"(.+\.tmp-([0-9]{1,9})-[0-9]+)");
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    std::smatch match;
    if (!std::regex_match(name, match, temporary)) continue;
    const auto pid = static_cast<pid_t>(std::stol(match[1].str()));
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code removal;
    removed += fs::remove(it->path(), removal) ? 1 : 0;
  }
  return removed;
}

}  // namespace attnzoo::io
