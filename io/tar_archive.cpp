#include <attnzoo/core/error.h>
#include <attnzoo/io/gunzip.h>
#include <attnzoo/io/inflated_files.h>
#include <attnzoo/io/tar_archive.h>

#include <algorithm>
#include <array>
#include <optional>

namespace attnzoo::io {
namespace {

constexpr uint64_t kTarBlock = 512;
using Header = std::array<unsigned char, kTarBlock>;

[[noreturn]] void tar_fail(const ByteSource& source, const std::string& what) {
  throw CheckpointError(source.name() + ": " + what);
}

std::string tar_entry_label(const std::string& name) {
  return "tar entry '" + name.substr(0, 200) + "'";
}

std::string at_byte(uint64_t offset) { return "tar header at byte " + std::to_string(offset); }

// A text field: up to its first NUL.
std::string text(const Header& h, size_t offset, size_t length) {
  const char* p = reinterpret_cast<const char*>(h.data() + offset);
  size_t n = 0;
  while (n < length && p[n] != '\0') ++n;
  return std::string(p, n);
}

// A number field: octal digits between spaces and NULs, or GNU's base-256 (the first byte's top
// bit set, the rest big-endian). Negative and oversized values are refused.
std::optional<uint64_t> number(const Header& h, size_t offset, size_t length) {
  const unsigned char* p = h.data() + offset;
  uint64_t value = 0;
  if (p[0] & 0x80) {
    if (p[0] & 0x40) return std::nullopt;  // negative
    value = p[0] & 0x3f;
    for (size_t i = 1; i < length; ++i) {
      if (value >> 55) return std::nullopt;
      value = (value << 8) | p[i];
    }
    return value;
  }
  size_t i = 0;
  while (i < length && p[i] == ' ') ++i;
  bool digits = false;
  for (; i < length && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (value >> 60) return std::nullopt;
    value = value * 8 + static_cast<uint64_t>(p[i] - '0');
    digits = true;
  }
  for (; i < length; ++i) {
    if (p[i] != ' ' && p[i] != '\0') return std::nullopt;
  }
  if (!digits) return std::nullopt;
  return value;
}

bool all_zero(const Header& h) {
  return std::all_of(h.begin(), h.end(), [](unsigned char c) { return c == 0; });
}

// The header checksum: the sum of its bytes with the checksum field read as spaces, unsigned
// (POSIX) or signed (some old writers).
bool checksum_ok(const Header& h) {
  const auto stored = number(h, 148, 8);
  if (!stored) return false;
  uint64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kTarBlock; ++i) {
    const unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
    unsigned_sum += c;
    signed_sum += static_cast<signed char>(c);
  }
  return *stored == unsigned_sum || static_cast<int64_t>(*stored) == signed_sum;
}

std::string without_dot_slash(std::string name) {
  while (name.size() >= 2 && name[0] == '.' && name[1] == '/') name.erase(0, 2);
  return name;
}

// pax extended header records, "<length> <key>=<value>\n": the path and size it overrides.
void read_pax(const ByteSource& source, const std::string& records, uint64_t offset,
              std::optional<std::string>& path, std::optional<uint64_t>& size) {
  size_t at = 0;
  while (at < records.size()) {
    if (records[at] == '\0') break;  // padding
    size_t space = at;
    uint64_t length = 0;
    while (space < records.size() && records[space] >= '0' && records[space] <= '9') {
      length = length * 10 + static_cast<uint64_t>(records[space] - '0');
      if (length > records.size()) break;
      ++space;
    }
    if (space == at || space >= records.size() || records[space] != ' ' ||
        length > records.size() - at || length < space - at + 3 ||
        records[at + length - 1] != '\n') {
      tar_fail(source, "pax header at byte " + std::to_string(offset) + ": malformed record");
    }
    const std::string record = records.substr(space + 1, at + length - 1 - (space + 1));
    const auto equals = record.find('=');
    if (equals == std::string::npos) {
      tar_fail(source, "pax header at byte " + std::to_string(offset) + ": a record without '='");
    }
    const std::string key = record.substr(0, equals), value = record.substr(equals + 1);
    if (key == "path") path = value;
    if (key == "size") {
      uint64_t n = 0;
      bool ok = !value.empty() && value.size() <= 19;
      for (char c : value) {
        ok = ok && c >= '0' && c <= '9';
        n = n * 10 + static_cast<uint64_t>(c - '0');
      }
      if (!ok) {
        tar_fail(source, "pax header at byte " + std::to_string(offset) + ": size '" +
                             value.substr(0, 40) + "' is not a number");
      }
      size = n;
    }
    at += length;
  }
}

}  // namespace

bool TarArchive::is_tar(const ByteSource& source) {
  if (source.size() < kTarBlock) return false;
  Header h;
  source.read(0, h.data(), kTarBlock, "tar header");
  return !all_zero(h) && checksum_ok(h);
}

TarArchive::TarArchive(const ByteSource& source, TarLimits limits) : source_(&source) {
  if (is_gzip(source)) {
    inflated_ = std::make_unique<BufferSource>(inflate_shared(source, limits.max_gunzip_bytes),
                                               source.name());
  }
  const ByteSource& bytes = this->source();
  Header first{};
  if (bytes.size() >= kTarBlock) bytes.read(0, first.data(), kTarBlock, "tar header");
  // An archive of no files is only its end marker: zero blocks.
  if (bytes.size() < kTarBlock || (!all_zero(first) && !checksum_ok(first))) {
    tar_fail(bytes, std::string("not a tar archive") + (gzipped() ? " inside its gzip" : "") +
                        " (the first header's checksum does not match)");
  }
  std::optional<std::string> long_name, pax_path;
  std::optional<uint64_t> pax_size;
  uint64_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < kTarBlock) {
      tar_fail(bytes, at_byte(at) + ": the file ends inside it (truncated)");
    }
    Header h;
    bytes.read(at, h.data(), kTarBlock, "tar header");
    if (all_zero(h)) break;  // the end-of-archive marker
    if (!checksum_ok(h)) {
      tar_fail(bytes, at_byte(at) + ": checksum mismatch (damaged, or not a tar archive)");
    }
    const char type = static_cast<char>(h[156]);
    auto size = number(h, 124, 12);
    if (!size) tar_fail(bytes, at_byte(at) + ": the size field is not a number");
    const bool regular = type == '0' || type == '\0' || type == '7';
    if (regular && pax_size) size = pax_size;
    const uint64_t data = at + kTarBlock;
    if (*size > bytes.size() - data) {
      tar_fail(bytes, at_byte(at) + ": its " + std::to_string(*size) +
                          " bytes run past the end of the file (truncated)");
    }
    const uint64_t padded = (*size + kTarBlock - 1) / kTarBlock * kTarBlock;
    if (type == 'L' || type == 'x') {
      if (*size > limits.max_extended_header) {
        tar_fail(bytes, at_byte(at) + ": an extended header of " + std::to_string(*size) +
                            " bytes (at most " + std::to_string(limits.max_extended_header) + ")");
      }
      const std::string content = bytes.read_string(data, static_cast<size_t>(*size), "tar header");
      if (type == 'L') {
        long_name = content.substr(0, content.find('\0'));
      } else {
        read_pax(bytes, content, at, pax_path, pax_size);
      }
    } else {
      if (regular) {
        std::string name = long_name ? *long_name : pax_path ? *pax_path : text(h, 0, 100);
        const std::string magic = text(h, 257, 6);
        if (!long_name && !pax_path && magic == "ustar" && h[262] == '\0') {
          const std::string prefix = text(h, 345, 155);  // POSIX ustar only
          if (!prefix.empty()) name = prefix + "/" + name;
        }
        name = without_dot_slash(name);
        if (name.empty()) tar_fail(bytes, at_byte(at) + ": a file without a name");
        if (name.back() != '/') {
          if (entries_.size() >= limits.max_entries) {
            tar_fail(bytes, "more than " + std::to_string(limits.max_entries) + " files");
          }
          entries_.push_back({std::move(name), *size, data});
        }
      }
      // Anything else (directories, links, devices, pax globals, GNU long link names) is skipped;
      // the extended names apply to the next entry only.
      if (type != 'g' && type != 'K') {
        long_name.reset();
        pax_path.reset();
        pax_size.reset();
      }
    }
    at = data + std::min(padded, bytes.size() - data);
  }
  if (const size_t twice = by_name_.build(entries_); twice != EntryIndex::kNone) {
    tar_fail(bytes, tar_entry_label(entries_[twice].name) + " appears twice");
  }
}

const TarEntry* TarArchive::find(std::string_view name) const {
  return by_name_.find(entries_, without_dot_slash(std::string(name)));
}

std::string TarArchive::read_string(const TarEntry& entry, uint64_t max_bytes,
                                    std::string_view what) const {
  if (entry.size > max_bytes) {
    tar_fail(source(), tar_entry_label(entry.name) + " is " + std::to_string(entry.size) +
                           " bytes, more than the " + std::to_string(max_bytes) + " a " +
                           std::string(what) + " may be");
  }
  return source().read_string(entry.data_offset, static_cast<size_t>(entry.size),
                              tar_entry_label(entry.name));
}

std::unique_ptr<ByteSource> TarArchive::open(const TarEntry& entry) const {
  return std::make_unique<SliceSource>(source(), entry.data_offset, entry.size,
                                       source().name() + ":" + entry.name);
}

}  // namespace attnzoo::io
