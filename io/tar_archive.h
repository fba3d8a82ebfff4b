// tar archives (POSIX ustar, GNU and pax, as Python's tarfile writes them: NeMo's .nemo model
// files), read through a ByteSource: every header checked (checksum, octal or base-256 sizes,
// entries inside the file) before anything is read, then the files asked for, or a view of one
// in place (a checkpoint inside the archive, read without extracting it). A gzipped archive is
// inflated into memory first (io/gunzip.h), once for the readers of one load
// (io/inflated_files.h). Only regular files are entries; directories, links
// and devices are skipped (nothing is ever written to disk). Names lose a leading "./". Errors
// are CheckpointError naming the file and the entry. Standard library and zlib only (fuzzed).
#pragma once

#include <attnzoo/io/byte_source.h>
#include <attnzoo/io/entry_index.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attnzoo::io {

struct TarEntry {
  std::string name;
  uint64_t size = 0;
  uint64_t data_offset = 0;  // where the file's bytes start in the (inflated) archive
};

struct TarLimits {
  size_t max_entries = 100'000;
  // A pax extended header or a GNU long name: a few path names, never megabytes.
  uint64_t max_extended_header = uint64_t{1} << 20;
  // The inflated size of a gzipped archive, held in memory while it is read.
  uint64_t max_gunzip_bytes = uint64_t{32} << 30;
};

class TarArchive {
 public:
  // Whether `source` starts with a tar header (a valid checksum). A gzipped archive does not:
  // ask io::is_gzip too.
  static bool is_tar(const ByteSource& source);

  // Reads and checks every header of `source` (inflated first when it is gzipped). `source` must
  // outlive the archive.
  explicit TarArchive(const ByteSource& source, TarLimits limits = {});

  // What is read: `source`, or the inflated bytes of a gzipped one.
  const ByteSource& source() const { return inflated_ ? *inflated_ : *source_; }
  bool gzipped() const { return inflated_ != nullptr; }
  const std::vector<TarEntry>& entries() const { return entries_; }
  // The entry called `name` (without a leading "./"), or nullptr.
  const TarEntry* find(std::string_view name) const;

  // The entry's bytes; entries larger than `max_bytes` are a CheckpointError naming `what`.
  std::string read_string(const TarEntry& entry, uint64_t max_bytes, std::string_view what) const;
  // The entry's bytes in place, as a source named "<archive>:<entry>"; valid while the archive is.
  std::unique_ptr<ByteSource> open(const TarEntry& entry) const;

 private:
  const ByteSource* source_;
  std::unique_ptr<ByteSource> inflated_;
  std::vector<TarEntry> entries_;  // in archive order
  EntryIndex by_name_;
};

}  // namespace attnzoo::io
