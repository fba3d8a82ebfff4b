// Files that survive a kill. The bytes go to a temporary file in the destination's folder, which is
// flushed to the disk (fsync), renamed over the destination, and the folder flushed in turn: after
// a crash, a kill or a full disk at any moment, the destination holds its previous complete
// content or the new complete content, never a part. A temporary left by a kill is named
// `<file>.tmp-<pid>-<n>` and is never read back.
//
//   io::write_file_atomically("report.json", json.dump(2));
//
//   io::AtomicFileWriter file("model.safetensors");
//   write_safetensors(file.stream(), tensors);  // the destination is untouched so far
//   file.commit();                              // now it is the new file
//
// Errors are attnzoo::Error naming the destination; the destination is then unchanged. This header
// depends on the standard library only.
//
// For kill tests: with ATTNZOO_WRITE_PAUSE_MS=N in the environment, each write prints
// "attnzoo: write begin: <file>" on stderr and pauses N/3 ms three times (the temporary open and
// empty; written, not yet synced; renamed, the folder not yet synced).
#pragma once

#include <fstream>
#include <string>
#include <string_view>

namespace attnzoo::io {

class AtomicFileWriter {
 public:
  // Creates the temporary file. Throws when the folder cannot take it.
  explicit AtomicFileWriter(std::string path);
  // Not committed: the temporary is removed and the destination stays as it was.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  std::ostream& stream() { return out_; }
  const std::string& path() const { return path_; }

  // Flushes and syncs the temporary, renames it over the destination and syncs the folder.
  void commit();

 private:
  std::string path_, temporary_;
  std::ofstream out_;
  bool committed_ = false;
};

// `bytes` as the whole content of `path`, the same way.
void write_file_atomically(const std::string& path, std::string_view bytes);

// Makes the creation, rename or growth of the file at `path` durable: fsync of the file and of its
// folder. For files that are appended to (metrics.csv) rather than replaced. Throws on failure.
void sync_file_and_folder(const std::string& path);

// Removes from `folder` the temporaries of writers that were killed: files named
// `<file>.tmp-<pid>-<n>` whose process no longer exists. Returns how many were removed.
int remove_abandoned_temporaries(const std::string& folder);

}  // namespace attnzoo::io
