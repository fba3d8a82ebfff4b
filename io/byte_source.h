// Random access to the bytes of a file or of a buffer, for readers of container formats (zip,
// pickle streams) that look up a directory first and then read only the parts they need: a
// tensor's bytes go straight from the file into its storage, never through a second copy of the
// file in memory. This header depends on the standard library only (the fuzz targets build it
// with the sanitizers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace attnzoo::io {

class ByteSource {
 public:
  virtual ~ByteSource() = default;

  // What the bytes are, for messages: the file's path, or a name given to a buffer.
  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }

  // Copies [offset, offset + count) into `destination`. A range outside size() is a
  // CheckpointError naming the source and `what` (e.g. "entry data/3"), as is a failed read.
  void read(uint64_t offset, void* destination, size_t count, std::string_view what) const;
  // The same range as a string (for headers, names and pickles: small, bounded by the caller).
  std::string read_string(uint64_t offset, size_t count, std::string_view what) const;

 protected:
  ByteSource(std::string name, uint64_t size) : name_(std::move(name)), size_(size) {}
  virtual void read_in_range(uint64_t offset, void* destination, size_t count) const = 0;

 private:
  std::string name_;
  uint64_t size_;
};

// A buffer the caller keeps alive for as long as the source is used.
class MemorySource final : public ByteSource {
 public:
  MemorySource(const void* data, size_t size, std::string name = "<memory>");

 private:
  void read_in_range(uint64_t offset, void* destination, size_t count) const override;
  const unsigned char* data_;
};

// Bytes the source owns (what a decompressor produced).
class BufferSource final : public ByteSource {
 public:
  BufferSource(std::string bytes, std::string name);
  // Bytes shared with others (io/inflated_files.h), held while the source lives.
  BufferSource(std::shared_ptr<const std::string> bytes, std::string name);
  const std::string& bytes() const { return *bytes_; }

 private:
  void read_in_range(uint64_t offset, void* destination, size_t count) const override;
  std::shared_ptr<const std::string> bytes_;
};

// Bytes [offset, offset + size) of another source, which must outlive the slice: a file inside an
// archive, read in place. The range must lie inside the parent (CheckpointError otherwise).
class SliceSource final : public ByteSource {
 public:
  SliceSource(const ByteSource& parent, uint64_t offset, uint64_t size, std::string name);

 private:
  void read_in_range(uint64_t offset, void* destination, size_t count) const override;
  const ByteSource* parent_;
  uint64_t offset_;
};

// A regular file, opened read-only and read with pread: several readers may share it, and no read
// moves a position. Throws CheckpointError naming the path when it is missing, a directory or
// cannot be opened.
class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path);
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

 private:
  FileSource(const std::string& path, int fd);
  void read_in_range(uint64_t offset, void* destination, size_t count) const override;
  int fd_;
};

}  // namespace attnzoo::io
