// The zip archives PyTorch writes (torch.save since 1.6: `<record>/data.pkl`, `<record>/data/N`,
// ...), read through a ByteSource: the central directory first (zip64 included), every entry
// checked against the file before anything is read, then the entries asked for, straight into
// the caller's memory. Stored entries (all that torch.save writes) and deflated ones (a checkpoint
// re-zipped by another tool) are read; anything else (encryption, other methods, split archives)
// is refused by name.
//
// Against hostile archives: entries may not overlap (the overlapping-entry zip bomb), a deflated
// entry may not claim more than deflate's own maximum ratio of its compressed size, inflation
// stops at the size the directory states, and every entry's CRC-32 is checked, so that a damaged
// download is an error, not weights with a few wrong bits. Errors are CheckpointError naming the
// file and the entry. Standard library and zlib only (fuzzed on its own).
#pragma once

#include <attnzoo/io/byte_source.h>
#include <attnzoo/io/entry_index.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnzoo::io {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;  // 0 stored, 8 deflated
  uint64_t compressed_size = 0;
  uint64_t size = 0;         // uncompressed
  uint64_t data_offset = 0;  // where the entry's (compressed) bytes start, after its local header
  uint32_t crc32 = 0;
};

struct ZipLimits {
  // Entries in one archive: torch.save writes one per storage, and attnzoo's readers take at most
  // 50,000 tensors.
  size_t max_entries = 200'000;
  // Uncompressed over compressed size of a deflated entry: 1032 is the most deflate can reach
  // (258-byte matches in 2-bit codes), so a larger claim is a lie.
  uint64_t max_inflation_ratio = 1032;
};

class ZipArchive {
 public:
  // Whether `source` starts as a zip archive does (a local file header).
  static bool is_zip(const ByteSource& source);

  // Reads and checks the directory. `source` must outlive the archive.
  explicit ZipArchive(const ByteSource& source, ZipLimits limits = {});

  const ByteSource& source() const { return *source_; }
  const std::vector<ZipEntry>& entries() const { return entries_; }
  // The entry called `name`, or nullptr.
  const ZipEntry* find(std::string_view name) const;

  // The entry's uncompressed bytes into `destination` (entry.size bytes), CRC checked.
  void read(const ZipEntry& entry, void* destination) const;
  // The same as a string; entries larger than `max_bytes` are a CheckpointError naming `what`.
  std::string read_string(const ZipEntry& entry, uint64_t max_bytes, std::string_view what) const;

 private:
  const ByteSource* source_;
  std::vector<ZipEntry> entries_;  // in directory order
  EntryIndex by_name_;
};

}  // namespace attnzoo::io
