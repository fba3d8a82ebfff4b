#include <attnzoo/core/error.h>
#include <attnzoo/io/archive_entry.h>
#include <attnzoo/io/gunzip.h>
#include <attnzoo/io/tar_archive.h>

#include <filesystem>

namespace attnzoo::io {
namespace {

namespace fs = std::filesystem;

bool is_file(const std::string& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

}  // namespace

std::optional<ArchiveEntryPath> split_archive_entry(const std::string& path) {
  if (is_file(path)) return std::nullopt;
  const auto hash = path.rfind('#');
  if (hash == std::string::npos || hash == 0 || hash + 1 == path.size()) return std::nullopt;
  ArchiveEntryPath out{path.substr(0, hash), path.substr(hash + 1)};
  if (out.entry.rfind("./", 0) == 0) out.entry.erase(0, 2);
  if (out.entry.empty() || !is_file(out.archive)) return std::nullopt;
  return out;
}

std::string archive_entry_path(const std::string& archive, const std::string& entry) {
  return archive + "#" + entry;
}

bool is_file_or_entry(const std::string& path) {
  if (is_file(path)) return true;
  const auto split = split_archive_entry(path);
  if (!split) return false;
  try {
    const FileSource source(split->archive);
    if (!TarArchive::is_tar(source) && !is_gzip(source)) return false;
    const TarArchive archive(source);
    return archive.find(split->entry) != nullptr;
  } catch (const CheckpointError&) {
    return false;
  }
}

std::string read_file_or_entry(const std::string& path, uint64_t max_bytes,
                               const std::string& what) {
  const auto split = split_archive_entry(path);
  if (!split) {
    if (!is_file(path)) throw CheckpointError(path + ": no such file (" + what + ")");
    const FileSource source(path);
    if (source.size() > max_bytes) {
      throw CheckpointError(path + ": " + std::to_string(source.size()) + " bytes, more than the " +
                            std::to_string(max_bytes) + " a " + what + " may have");
    }
    return source.read_string(0, static_cast<size_t>(source.size()), what);
  }
  const FileSource source(split->archive);
  if (!TarArchive::is_tar(source) && !is_gzip(source)) {
    throw CheckpointError(split->archive + ": not a tar archive, so it holds no entry '" +
                          split->entry + "' (" + what + ")");
  }
  const TarArchive archive(source);
  const auto* entry = archive.find(split->entry);
  if (!entry) {
    throw CheckpointError(split->archive + ": no entry '" + split->entry + "' (" + what + ")");
  }
  return archive.read_string(*entry, max_bytes, what);
}

}  // namespace attnzoo::io
