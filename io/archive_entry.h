// A file inside a tar archive, named where a file's path is asked for: "ARCHIVE#ENTRY"
// (parakeet.nemo#3f2a..._tokenizer.model). What a model document says of the files a .nemo file
// holds, which are read in place, never extracted. A path that names an existing file is that
// file, even with a '#' in its name; otherwise the text after the last '#' is the entry of the
// archive before it.
//
//   auto bytes = io::read_file_or_entry("m.nemo#tokenizer.model", 64 << 20, "tokenizer");
//
// Errors are CheckpointError naming the archive and the entry (or the file).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace attnzoo::io {

struct ArchiveEntryPath {
  std::string archive;  // the tar file (plain or gzipped)
  std::string entry;    // the entry's name in it, without a leading "./"
};

// "ARCHIVE#ENTRY" when `path` is not an existing file, ARCHIVE is one and ENTRY is not empty;
// std::nullopt otherwise (a plain path).
std::optional<ArchiveEntryPath> split_archive_entry(const std::string& path);
// `archive` + "#" + `entry`.
std::string archive_entry_path(const std::string& archive, const std::string& entry);

// Whether `path` is an existing file, or an entry that its archive holds.
bool is_file_or_entry(const std::string& path);

// The bytes of the file or entry at `path`; larger than `max_bytes` is a CheckpointError naming
// it and `what`, as are a missing file, an archive that is not a tar, and an entry not in it.
std::string read_file_or_entry(const std::string& path, uint64_t max_bytes,
                               const std::string& what);

}  // namespace attnzoo::io
