#include <attnzoo/core/error.h>
#include <attnzoo/io/zip_archive.h>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>

namespace attnzoo::io {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr size_t kEndOfDirectorySize = 22;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kZip64LocatorSize = 20;
constexpr size_t kZip64EndSize = 56;
constexpr uint16_t kStored = 0;
constexpr uint16_t kDeflated = 8;
// Compressed bytes read per step while inflating.
constexpr size_t kInflateBlock = size_t{1} << 20;

uint16_t u16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t u64(const unsigned char* p) {
  return static_cast<uint64_t>(u32(p)) | (static_cast<uint64_t>(u32(p + 4)) << 32);
}

[[noreturn]] void zip_fail(const ByteSource& source, const std::string& what) {
  throw CheckpointError(source.name() + ": " + what);
}

std::string zip_entry_label(const std::string& name) {
  return "zip entry '" + name.substr(0, 200) + "'";
}

// The zip64 extended-information extra field replaces the 32-bit fields that are all ones, in
// the order: size, compressed size, local header offset.
void apply_zip64_extra(const ByteSource& source, const std::string& extra, ZipEntry& entry,
                       uint64_t& local_offset, bool need_size, bool need_compressed,
                       bool need_offset) {
  size_t at = 0;
  const auto* bytes = reinterpret_cast<const unsigned char*>(extra.data());
  while (at + 4 <= extra.size()) {
    const uint16_t id = u16(bytes + at);
    const uint16_t length = u16(bytes + at + 2);
    at += 4;
    if (length > extra.size() - at) break;
    if (id == 0x0001) {
      size_t field = at;
      const size_t end = at + length;
      auto take = [&](uint64_t& value, const char* what) {
        if (field + 8 > end) {
          zip_fail(source, zip_entry_label(entry.name) + ": its zip64 field lacks the " + what);
        }
        value = u64(bytes + field);
        field += 8;
      };
      if (need_size) take(entry.size, "size");
      if (need_compressed) take(entry.compressed_size, "compressed size");
      if (need_offset) take(local_offset, "header offset");
      return;
    }
    at += length;
  }
  if (need_size || need_compressed || need_offset) {
    zip_fail(source,
             zip_entry_label(entry.name) + ": its sizes need a zip64 field, and it has none");
  }
}

}  // namespace

bool ZipArchive::is_zip(const ByteSource& source) {
  if (source.size() < 4) return false;
  unsigned char magic[4];
  source.read(0, magic, 4, "the first bytes");
  return u32(magic) == kLocalHeader;
}

ZipArchive::ZipArchive(const ByteSource& source, ZipLimits limits) : source_(&source) {
  const uint64_t file_size = source.size();
  if (file_size < kEndOfDirectorySize) zip_fail(source, "too short for a zip archive");
  // The end-of-directory record: in the last 22 bytes plus an archive comment of at most 65535.
  const uint64_t tail_size = std::min<uint64_t>(file_size, kEndOfDirectorySize + 0xFFFF);
  const uint64_t tail_start = file_size - tail_size;
  const std::string tail = source.read_string(tail_start, tail_size, "the end of the archive");
  const auto* t = reinterpret_cast<const unsigned char*>(tail.data());
  int64_t end_at = -1;
  for (int64_t i = static_cast<int64_t>(tail_size - kEndOfDirectorySize); i >= 0; --i) {
    if (u32(t + i) == kEndOfDirectory &&
        static_cast<uint64_t>(i) + kEndOfDirectorySize + u16(t + i + 20) <= tail_size) {
      end_at = i;
      break;
    }
  }
  if (end_at < 0) zip_fail(source, "no zip end-of-directory record (truncated, or not a zip)");
  const unsigned char* end = t + end_at;
  if (u16(end + 4) != 0 || u16(end + 6) != 0) zip_fail(source, "split zip archives are not read");
  uint64_t count = u16(end + 10);
  uint64_t directory_size = u32(end + 12);
  uint64_t directory_offset = u32(end + 16);
  const uint64_t end_offset = tail_start + static_cast<uint64_t>(end_at);
  if (count == 0xFFFF || directory_size == 0xFFFFFFFF || directory_offset == 0xFFFFFFFF) {
    if (end_offset < kZip64LocatorSize) zip_fail(source, "a zip64 archive without its locator");
    unsigned char locator[kZip64LocatorSize];
    source.read(end_offset - kZip64LocatorSize, locator, sizeof locator, "the zip64 locator");
    if (u32(locator) != kZip64Locator) zip_fail(source, "a zip64 archive without its locator");
    const uint64_t record_offset = u64(locator + 8);
    unsigned char record[kZip64EndSize];
    source.read(record_offset, record, sizeof record, "the zip64 end-of-directory record");
    if (u32(record) != kZip64EndOfDirectory) {
      zip_fail(source, "the zip64 locator points at no end-of-directory record");
    }
    count = u64(record + 32);
    directory_size = u64(record + 40);
    directory_offset = u64(record + 48);
  }
  if (count > limits.max_entries) {
    zip_fail(source, "the zip directory lists " + std::to_string(count) + " entries, more than " +
                         std::to_string(limits.max_entries));
  }
  if (directory_offset > file_size || directory_size > file_size - directory_offset ||
      directory_size < count * kCentralHeaderSize) {
    zip_fail(source, "the zip directory (" + std::to_string(count) + " entries, " +
                         std::to_string(directory_size) + " bytes at " +
                         std::to_string(directory_offset) + ") does not fit the file of " +
                         std::to_string(file_size) + " bytes");
  }
  const std::string directory =
      source.read_string(directory_offset, directory_size, "the zip directory");
  const auto* d = reinterpret_cast<const unsigned char*>(directory.data());

  struct Span {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Span> spans;
  entries_.reserve(count);
  spans.reserve(count);
  size_t at = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (at + kCentralHeaderSize > directory.size() || u32(d + at) != kCentralHeader) {
      zip_fail(source, "the zip directory is malformed at entry " + std::to_string(i));
    }
    const unsigned char* h = d + at;
    const uint16_t flags = u16(h + 8);
    ZipEntry entry;
    entry.method = u16(h + 10);
    entry.crc32 = u32(h + 16);
    entry.compressed_size = u32(h + 20);
    entry.size = u32(h + 24);
    const size_t name_length = u16(h + 28), extra_length = u16(h + 30),
                 comment_length = u16(h + 32);
    uint64_t local_offset = u32(h + 42);
    if (at + kCentralHeaderSize + name_length + extra_length + comment_length > directory.size()) {
      zip_fail(source, "the zip directory is truncated at entry " + std::to_string(i));
    }
    entry.name.assign(directory, at + kCentralHeaderSize, name_length);
    if (entry.name.find('\0') != std::string::npos) {
      zip_fail(source, "zip entry " + std::to_string(i) + " has a NUL in its name");
    }
    const std::string extra = directory.substr(at + kCentralHeaderSize + name_length, extra_length);
    apply_zip64_extra(source, extra, entry, local_offset, entry.size == 0xFFFFFFFF,
                      entry.compressed_size == 0xFFFFFFFF, local_offset == 0xFFFFFFFF);
    at += kCentralHeaderSize + name_length + extra_length + comment_length;

    const std::string label = zip_entry_label(entry.name);
    if (flags & 0x0001) zip_fail(source, label + " is encrypted");
    if (entry.method != kStored && entry.method != kDeflated) {
      zip_fail(source, label + " uses compression method " + std::to_string(entry.method) +
                           " (only stored and deflated entries are read)");
    }
    if (entry.method == kStored && entry.compressed_size != entry.size) {
      zip_fail(source, label + " is stored, yet its sizes differ (" +
                           std::to_string(entry.compressed_size) + " and " +
                           std::to_string(entry.size) + ")");
    }
    if (entry.method == kDeflated &&
        entry.size / limits.max_inflation_ratio > entry.compressed_size + 1) {
      zip_fail(source, label + " claims to inflate " + std::to_string(entry.compressed_size) +
                           " bytes to " + std::to_string(entry.size) + ", more than deflate's 1:" +
                           std::to_string(limits.max_inflation_ratio) + " (a zip bomb?)");
    }
    // The local header, which may carry another extra field (torch.save pads with it to align
    // each storage to 64 bytes).
    unsigned char local[kLocalHeaderSize];
    if (local_offset > directory_offset) zip_fail(source, label + " starts after the directory");
    source.read(local_offset, local, sizeof local, label);
    if (u32(local) != kLocalHeader)
      zip_fail(source, label + ": no local header where it should be");
    const uint64_t data_offset =
        local_offset + kLocalHeaderSize + u16(local + 26) + u16(local + 28);
    if (data_offset > directory_offset || entry.compressed_size > directory_offset - data_offset) {
      zip_fail(source, label + " (" + std::to_string(entry.compressed_size) + " bytes at " +
                           std::to_string(data_offset) + ") runs past the data into the directory");
    }
    entry.data_offset = data_offset;
    spans.push_back({local_offset, data_offset + entry.compressed_size, entries_.size()});
    entries_.push_back(std::move(entry));
  }
  // No two entries may share bytes: one deflated kernel behind many entries is how a small
  // archive inflates to terabytes.
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      zip_fail(source, zip_entry_label(entries_[spans[i].index].name) + " overlaps " +
                           zip_entry_label(entries_[spans[i - 1].index].name) + " (a zip bomb?)");
    }
  }
  if (const size_t twice = by_name_.build(entries_); twice != EntryIndex::kNone) {
    zip_fail(source, zip_entry_label(entries_[twice].name) + " appears twice");
  }
}

const ZipEntry* ZipArchive::find(std::string_view name) const {
  return by_name_.find(entries_, name);
}

void ZipArchive::read(const ZipEntry& entry, void* destination) const {
  const std::string label = zip_entry_label(entry.name);
  auto* out = static_cast<unsigned char*>(destination);
  if (entry.method == kStored) {
    source_->read(entry.data_offset, out, entry.size, label);
  } else {
    z_stream stream{};
    if (inflateInit2(&stream, -MAX_WBITS) != Z_OK)
      zip_fail(*source_, label + ": zlib failed to start");
    std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&stream, inflateEnd);
    std::vector<unsigned char> block(std::min<uint64_t>(kInflateBlock, entry.compressed_size + 1));
    uint64_t consumed = 0, produced = 0;
    while (true) {
      if (stream.avail_in == 0 && consumed < entry.compressed_size) {
        const size_t n =
            static_cast<size_t>(std::min<uint64_t>(block.size(), entry.compressed_size - consumed));
        source_->read(entry.data_offset + consumed, block.data(), n, label);
        consumed += n;
        stream.next_in = block.data();
        stream.avail_in = static_cast<uInt>(n);
      }
      // Past the stated size, one byte of room tells whether the stream would produce more.
      unsigned char probe = 0;
      const uint64_t room = entry.size - produced;
      stream.next_out = room > 0 ? out + produced : &probe;
      stream.avail_out = room > 0 ? static_cast<uInt>(std::min<uint64_t>(room, 1u << 30)) : 1;
      const uInt before = stream.avail_out;
      const int status = inflate(&stream, Z_NO_FLUSH);
      const uInt written = before - stream.avail_out;
      if (room == 0 && written > 0) {
        zip_fail(*source_, label + " inflates to more than the " + std::to_string(entry.size) +
                               " bytes its directory entry states");
      }
      produced += room > 0 ? written : 0;
      if (status == Z_STREAM_END) break;
      if (status == Z_BUF_ERROR) {
        // No progress was possible: the input is spent.
        zip_fail(*source_, label + " ends before its deflated stream does (truncated)");
      }
      if (status != Z_OK) {
        zip_fail(*source_, label + ": corrupt deflated data (" +
                               (stream.msg ? std::string(stream.msg) : std::string("zlib")) + ")");
      }
    }
    if (produced != entry.size) {
      zip_fail(*source_, label + " inflates to " + std::to_string(produced) + " bytes, not the " +
                             std::to_string(entry.size) + " its directory entry states");
    }
  }
  // zlib's crc32 takes at most 4 GB a call.
  uLong crc = crc32(0L, Z_NULL, 0);
  for (uint64_t done = 0; done < entry.size;) {
    const uInt n = static_cast<uInt>(std::min<uint64_t>(entry.size - done, 1u << 30));
    crc = crc32(crc, out + done, n);
    done += n;
  }
  if (static_cast<uint32_t>(crc) != entry.crc32) {
    zip_fail(*source_, label + ": CRC-32 mismatch (the file is damaged)");
  }
}

std::string ZipArchive::read_string(const ZipEntry& entry, uint64_t max_bytes,
                                    std::string_view what) const {
  if (entry.size > max_bytes) {
    zip_fail(*source_, std::string(what) + " (" + zip_entry_label(entry.name) + ") holds " +
                           std::to_string(entry.size) + " bytes, more than the limit of " +
                           std::to_string(max_bytes));
  }
  std::string bytes(entry.size, '\0');
  read(entry, bytes.data());
  return bytes;
}

}  // namespace attnzoo::io
