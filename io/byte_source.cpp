#include <attnzoo/core/error.h>
#include <attnzoo/io/byte_source.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace attnzoo::io {
namespace {

int open_regular_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    throw CheckpointError(
        path + (errno == ENOENT ? ": no such file"
                                : ": cannot be read (" + std::string(std::strerror(errno)) + ")"));
  }
  if (S_ISDIR(info.st_mode)) throw CheckpointError(path + ": is a directory, not a file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw CheckpointError(path + ": cannot open (" + std::string(std::strerror(errno)) + ")");
  }
  return fd;
}

uint64_t size_of(int fd, const std::string& path) {
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw CheckpointError(path + ": not a regular file");
  }
  return static_cast<uint64_t>(info.st_size);
}

}  // namespace

void ByteSource::read(uint64_t offset, void* destination, size_t count,
                      std::string_view what) const {
  if (offset > size_ || count > size_ - offset) {
    throw CheckpointError(name_ + ": " + std::string(what) + " lies outside the file (bytes " +
                          std::to_string(offset) + " to " + std::to_string(offset + count) +
                          " of " + std::to_string(size_) + ")");
  }
  if (count > 0) read_in_range(offset, destination, count);
}

std::string ByteSource::read_string(uint64_t offset, size_t count, std::string_view what) const {
  std::string bytes(count, '\0');
  read(offset, bytes.data(), count, what);
  return bytes;
}

MemorySource::MemorySource(const void* data, size_t size, std::string name)
    : ByteSource(std::move(name), size), data_(static_cast<const unsigned char*>(data)) {}

void MemorySource::read_in_range(uint64_t offset, void* destination, size_t count) const {
  std::memcpy(destination, data_ + offset, count);
}

BufferSource::BufferSource(std::string bytes, std::string name)
    : BufferSource(std::make_shared<const std::string>(std::move(bytes)), std::move(name)) {}

BufferSource::BufferSource(std::shared_ptr<const std::string> bytes, std::string name)
    : ByteSource(std::move(name), bytes->size()), bytes_(std::move(bytes)) {}

void BufferSource::read_in_range(uint64_t offset, void* destination, size_t count) const {
  std::memcpy(destination, bytes_->data() + offset, count);
}

SliceSource::SliceSource(const ByteSource& parent, uint64_t offset, uint64_t size, std::string name)
    : ByteSource(std::move(name), size), parent_(&parent), offset_(offset) {
  if (offset > parent.size() || size > parent.size() - offset) {
    throw CheckpointError(parent.name() + ": " + this->name() + " lies outside the file (bytes " +
                          std::to_string(offset) + " to " + std::to_string(offset + size) + " of " +
                          std::to_string(parent.size()) + ")");
  }
}

void SliceSource::read_in_range(uint64_t offset, void* destination, size_t count) const {
  parent_->read(offset_ + offset, destination, count, name());
}

FileSource::FileSource(const std::string& path) : FileSource(path, open_regular_file(path)) {}

FileSource::FileSource(const std::string& path, int fd)
    : ByteSource(path, size_of(fd, path)), fd_(fd) {}

FileSource::~FileSource() { ::close(fd_); }

void FileSource::read_in_range(uint64_t offset, void* destination, size_t count) const {
  auto* out = static_cast<char*>(destination);
  while (count > 0) {
    const ssize_t got = ::pread(fd_, out, count, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      throw CheckpointError(name() + ": read failed at byte " + std::to_string(offset) + " (" +
                            (got == 0 ? std::string("the file shrank") : std::strerror(errno)) +
                            ")");
    }
    out += got;
    offset += static_cast<uint64_t>(got);
    count -= static_cast<size_t>(got);
  }
}

}  // namespace attnzoo::io
