#include <attnzoo/preprocess/image/header.h>

#include <cstdio>
#include <cstring>
#include <optional>

namespace attnzoo {
namespace {

// Bounds-checked reads: every offset is checked against the size before use.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t size() const { return size_; }
  bool has(size_t offset, size_t count) const { return offset <= size_ && count <= size_ - offset; }
  uint8_t u8(size_t at) const { return data_[at]; }
  uint32_t be16(size_t at) const { return (uint32_t{data_[at]} << 8) | data_[at + 1]; }
  uint32_t be32(size_t at) const { return (be16(at) << 16) | be16(at + 2); }
  uint32_t le16(size_t at) const { return data_[at] | (uint32_t{data_[at + 1]} << 8); }
  uint32_t le24(size_t at) const { return le16(at) | (uint32_t{data_[at + 2]} << 16); }
  uint32_t le32(size_t at) const { return le16(at) | (le16(at + 2) << 16); }
  uint64_t le64(size_t at) const { return le32(at) | (uint64_t{le32(at + 4)} << 32); }
  uint64_t be64(size_t at) const { return (uint64_t{be32(at)} << 32) | be32(at + 4); }
  bool starts_with(const char* signature, size_t length, size_t at = 0) const {
    return has(at, length) && std::memcmp(data_ + at, signature, length) == 0;
  }
  // The offset of the next 0xFF at or after `from`, or size() when there is none.
  size_t find_ff(size_t from) const {
    if (from >= size_) return size_;
    const void* hit = std::memchr(data_ + from, 0xFF, size_ - from);
    return hit ? static_cast<size_t>(static_cast<const uint8_t*>(hit) - data_) : size_;
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

void check_dimensions(int64_t width, int64_t height, const char* format,
                      const std::string& source) {
  if (width <= 0 || height <= 0) {
    throw ImageError(source, std::string("invalid ") + format + " header: " +
                                 std::to_string(width) + "x" + std::to_string(height) + " pixels");
  }
}

// JPEG (ITU T.81, Annex B): markers 0xFF xx, each followed by a big-endian segment length except
// the standalone ones; entropy-coded data after each SOS, in which 0xFF is stuffed as FF 00 and
// only RSTn markers may appear. The first SOFn gives the size (libjpeg rejects a second one).
ImageHeader read_jpeg(const Bytes& b, const std::string& source) {
  const std::string truncated =
      "truncated JPEG (the data ends before the end-of-image marker; was the download or copy "
      "interrupted?)";
  ImageHeader header;
  header.format = ImageFormat::kJpeg;
  bool have_frame = false, have_scan = false;
  size_t pos = 2;  // after SOI
  while (true) {
    // libjpeg skips (with a warning) bytes that are not a marker where one is due; so do we.
    pos = b.find_ff(pos);
    if (!b.has(pos, 1)) throw ImageError(source, truncated);
    while (b.has(pos, 1) && b.u8(pos) == 0xFF) ++pos;  // fill bytes
    if (!b.has(pos, 1)) throw ImageError(source, truncated);
    const uint8_t marker = b.u8(pos++);
    if (marker == 0xD9) {  // EOI
      if (!have_scan) throw ImageError(source, "corrupt JPEG: end of image before any image data");
      return header;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;  // TEM, RSTn
    if (marker == 0xD8 || marker == 0x00) {
      throw ImageError(source,
                       "corrupt JPEG: unexpected marker at byte " + std::to_string(pos - 2));
    }
    if (!b.has(pos, 2)) throw ImageError(source, truncated);
    const size_t length = b.be16(pos);
    if (length < 2)
      throw ImageError(source, "corrupt JPEG: segment length " + std::to_string(length));
    if (!b.has(pos, length)) throw ImageError(source, truncated);
    const size_t body = pos + 2;
    const bool is_sof =
        marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (is_sof && !have_frame) {
      if (length < 8) throw ImageError(source, "corrupt JPEG: short frame header");
      header.height = b.be16(body + 1);
      header.width = b.be16(body + 3);
      if (header.height == 0) {
        throw ImageError(source,
                         "unsupported JPEG: the height is given by a DNL marker (height 0 in the "
                         "frame header)");
      }
      check_dimensions(header.width, header.height, "JPEG", source);
      have_frame = true;
    }
    pos += length;
    if (marker != 0xDA) continue;  // SOS: entropy-coded data follows
    if (!have_frame) throw ImageError(source, "corrupt JPEG: image data before the frame header");
    have_scan = true;
    while (true) {
      const size_t ff = b.find_ff(pos);
      if (!b.has(ff, 2)) throw ImageError(source, truncated);
      const uint8_t next = b.u8(ff + 1);
      if (next == 0x00 || (next >= 0xD0 && next <= 0xD7)) {
        pos = ff + 2;  // a stuffed 0xFF or a restart marker: still in the scan
      } else if (next == 0xFF) {
        pos = ff + 1;  // fill byte before a marker
      } else {
        pos = ff;
        break;
      }
    }
  }
}

// PNG: the IHDR chunk first, then chunks (length, type, data, CRC) up to IEND.
ImageHeader read_png(const Bytes& b, const std::string& source) {
  if (!b.has(8, 8 + 13)) throw ImageError(source, "truncated PNG (no complete IHDR chunk)");
  if (b.be32(8) != 13 || !b.starts_with("IHDR", 4, 12)) {
    throw ImageError(source, "corrupt PNG: the first chunk is not a 13-byte IHDR");
  }
  ImageHeader header;
  header.format = ImageFormat::kPng;
  const uint32_t width = b.be32(16), height = b.be32(20);
  // The PNG specification limits both to 2^31 - 1.
  if (width > 0x7FFFFFFFu || height > 0x7FFFFFFFu) {
    throw ImageError(source, "corrupt PNG: IHDR claims " + std::to_string(width) + "x" +
                                 std::to_string(height) + " pixels");
  }
  header.width = width;
  header.height = height;
  check_dimensions(header.width, header.height, "PNG", source);
  size_t pos = 8;
  while (true) {
    if (!b.has(pos, 8))
      throw ImageError(source, "truncated PNG (the data ends before the IEND chunk)");
    const uint32_t length = b.be32(pos);
    if (length > 0x7FFFFFFFu) {
      throw ImageError(source, "corrupt PNG: chunk length " + std::to_string(length) + " at byte " +
                                   std::to_string(pos));
    }
    char type[5] = {};
    for (int i = 0; i < 4; ++i) {
      const uint8_t c = b.u8(pos + 4 + i);
      type[i] = (c >= 0x20 && c < 0x7F) ? static_cast<char>(c) : '?';
    }
    if (!b.has(pos + 8, size_t{length} + 4)) {
      throw ImageError(source, std::string("truncated PNG (the data ends inside chunk '") + type +
                                   "', before the IEND chunk)");
    }
    if (std::strcmp(type, "IEND") == 0) return header;
    pos += 12 + size_t{length};
  }
}

// WebP (RIFF): one of the chunks VP8 (lossy), VP8L (lossless) or VP8X (extended: canvas size).
ImageHeader read_webp(const Bytes& b, const std::string& source) {
  // RIFF header (12 bytes), chunk header (8), and the sizes: 10 bytes into VP8X and VP8
  // chunks, 5 into VP8L.
  const size_t needed = b.starts_with("VP8L", 4, 12) ? 25 : 30;
  if (!b.has(0, needed)) throw ImageError(source, "truncated WebP (shorter than its headers)");
  const uint64_t riff_size = b.le32(4);
  if (riff_size + 8 > b.size()) {
    throw ImageError(source, "truncated WebP (the RIFF header announces " +
                                 std::to_string(riff_size + 8) + " bytes, the data has " +
                                 std::to_string(b.size()) + ")");
  }
  ImageHeader header;
  header.format = ImageFormat::kWebP;
  if (b.starts_with("VP8X", 4, 12)) {
    header.width = 1 + int64_t{b.le24(24)};
    header.height = 1 + int64_t{b.le24(27)};
  } else if (b.starts_with("VP8 ", 4, 12)) {
    // Frame tag (3 bytes), start code 9D 01 2A, then 14-bit width and height.
    if ((b.u8(20) & 1) != 0 || b.u8(23) != 0x9D || b.u8(24) != 0x01 || b.u8(25) != 0x2A) {
      throw ImageError(source, "corrupt WebP: the VP8 data does not start with a key frame");
    }
    header.width = b.le16(26) & 0x3FFF;
    header.height = b.le16(28) & 0x3FFF;
  } else if (b.starts_with("VP8L", 4, 12)) {
    if (b.u8(20) != 0x2F) throw ImageError(source, "corrupt WebP: bad VP8L signature");
    const uint32_t bits = b.le32(21);
    header.width = 1 + int64_t{bits & 0x3FFF};
    header.height = 1 + int64_t{(bits >> 14) & 0x3FFF};
  } else {
    throw ImageError(source, "corrupt WebP: expected a VP8, VP8L or VP8X chunk");
  }
  check_dimensions(header.width, header.height, "WebP", source);
  return header;
}

// BMP: a 14-byte file header, then the DIB header whose size tells its kind: 12 bytes (OS/2
// BITMAPCOREHEADER, 16-bit unsigned sizes) or 40 and more (32-bit signed sizes; a negative height
// means top-down rows).
ImageHeader read_bmp(const Bytes& b, const std::string& source) {
  if (!b.has(0, 26)) throw ImageError(source, "truncated BMP (shorter than its headers)");
  ImageHeader header;
  header.format = ImageFormat::kBmp;
  const uint32_t dib_size = b.le32(14);
  if (dib_size == 12) {
    header.width = b.le16(18);
    header.height = b.le16(20);
  } else if (dib_size >= 40 && dib_size <= 4096) {
    header.width = static_cast<int32_t>(b.le32(18));
    header.height = static_cast<int32_t>(b.le32(22));
    if (header.height < 0) header.height = -header.height;  // int64: no overflow for INT32_MIN
  } else {
    throw ImageError(source,
                     "unsupported BMP: DIB header of " + std::to_string(dib_size) + " bytes");
  }
  check_dimensions(header.width, header.height, "BMP", source);
  return header;
}

// TIFF (and BigTIFF): the first image file directory, which is the page OpenCV decodes.
ImageHeader read_tiff(const Bytes& b, const std::string& source) {
  if (!b.has(0, 8)) throw ImageError(source, "truncated TIFF (shorter than its header)");
  const bool little = b.u8(0) == 'I';
  const auto u16 = [&](size_t at) { return little ? b.le16(at) : b.be16(at); };
  const auto u32 = [&](size_t at) { return little ? b.le32(at) : b.be32(at); };
  const auto u64 = [&](size_t at) { return little ? b.le64(at) : b.be64(at); };
  const bool big = u16(2) == 43;
  uint64_t ifd = 0;
  if (big) {
    if (!b.has(0, 16)) throw ImageError(source, "truncated TIFF (shorter than its header)");
    if (u16(4) != 8 || u16(6) != 0) throw ImageError(source, "corrupt BigTIFF header");
    ifd = u64(8);
  } else {
    ifd = u32(4);
  }
  const size_t count_size = big ? 8 : 2, entry_size = big ? 20 : 12;
  if (ifd < 8 || ifd > b.size() || !b.has(ifd, count_size)) {
    throw ImageError(source, "truncated TIFF (the first directory at byte " + std::to_string(ifd) +
                                 " is outside the " + std::to_string(b.size()) + "-byte data)");
  }
  const uint64_t count = big ? u64(ifd) : u16(ifd);
  if (count > (b.size() - ifd - count_size) / entry_size) {
    throw ImageError(source, "truncated TIFF (the first directory has " + std::to_string(count) +
                                 " entries, more than the data holds)");
  }
  std::optional<uint64_t> width, height, tile_width, tile_height, rows_per_strip;
  for (uint64_t i = 0; i < count; ++i) {
    const size_t at = ifd + count_size + i * entry_size;
    const uint32_t tag = u16(at), type = u16(at + 2);
    const uint64_t values = big ? u64(at + 4) : u32(at + 4);
    const size_t value_at = at + (big ? 12 : 8);
    std::optional<uint64_t>* field = tag == 256   ? &width
                                     : tag == 257 ? &height
                                     : tag == 322 ? &tile_width
                                     : tag == 323 ? &tile_height
                                     : tag == 278 ? &rows_per_strip
                                                  : nullptr;
    if (!field) continue;
    // One SHORT (3), LONG (4) or LONG8 (16), held in the entry itself, left-justified. Anything
    // else, or a second differing value, may be read otherwise by libtiff than by us: refused.
    std::optional<uint64_t> value;
    if (values == 1 && type == 3) value = u16(value_at);
    if (values == 1 && type == 4) value = u32(value_at);
    if (values == 1 && type == 16 && big) value = u64(value_at);
    if (!value) {
      throw ImageError(source,
                       "unsupported TIFF: tag " + std::to_string(tag) + " is not a single integer");
    }
    if (*field && **field != *value) {
      throw ImageError(source, "corrupt TIFF: tag " + std::to_string(tag) + " given twice");
    }
    *field = value;
  }
  if (!width || !height) throw ImageError(source, "corrupt TIFF: no ImageWidth or ImageLength tag");
  // Beyond 2^31 no decoder goes; keep the products below in range.
  if (*width > 0x7FFFFFFFu || *height > 0x7FFFFFFFu) {
    throw ImageError(source, "unsupported TIFF: " + std::to_string(*width) + "x" +
                                 std::to_string(*height) + " pixels");
  }
  ImageHeader header;
  header.format = ImageFormat::kTiff;
  header.width = static_cast<int64_t>(*width);
  header.height = static_cast<int64_t>(*height);
  check_dimensions(header.width, header.height, "TIFF", source);
  const auto clamp = [](uint64_t v) { return v > 0x7FFFFFFFu ? uint64_t{0x7FFFFFFFu} : v; };
  if (tile_width && tile_height) {
    header.block_pixels = static_cast<int64_t>(clamp(*tile_width) * clamp(*tile_height));
  } else if (rows_per_strip && *rows_per_strip != 0xFFFFFFFFu) {
    header.block_pixels = static_cast<int64_t>(clamp(*width) * clamp(*rows_per_strip));
  }
  return header;
}

// Formats that are images but not ones the frontend takes: named in the error.
const char* known_unsupported(const Bytes& b) {
  if (b.starts_with("GIF8", 4)) return "GIF";
  if (b.has(0, 2) && b.u8(0) == 'P' && b.u8(1) >= '1' && b.u8(1) <= '7') return "PNM";
  if (b.starts_with("\x76\x2f\x31\x01", 4)) return "OpenEXR";
  if (b.starts_with("#?RADIANCE", 10) || b.starts_with("#?RGBE", 6)) return "Radiance HDR";
  if (b.starts_with("\x00\x00\x00\x0cjP  ", 8) || b.starts_with("\xff\x4f\xff\x51", 4)) {
    return "JPEG 2000";
  }
  if (b.starts_with("ftyp", 4, 4)) return "HEIF/AVIF";
  return nullptr;
}

}  // namespace

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kWebP:
      return "WebP";
    case ImageFormat::kBmp:
      return "BMP";
    case ImageFormat::kTiff:
      return "TIFF";
  }
  return "?";
}

ImageHeader read_image_header(const uint8_t* data, size_t size, const std::string& source) {
  if (size == 0) throw ImageError(source, "empty file (0 bytes)");
  const Bytes b(data, size);
  if (b.starts_with("\xFF\xD8\xFF", 3)) return read_jpeg(b, source);
  if (b.starts_with("\x89PNG\r\n\x1A\n", 8)) return read_png(b, source);
  if (b.starts_with("RIFF", 4) && b.starts_with("WEBP", 4, 8)) return read_webp(b, source);
  if (b.starts_with("BM", 2)) return read_bmp(b, source);
  if (b.starts_with("II\x2A\x00", 4) || b.starts_with("MM\x00\x2A", 4) ||
      b.starts_with("II\x2B\x00", 4) || b.starts_with("MM\x00\x2B", 4)) {
    return read_tiff(b, source);
  }
  if (const char* other = known_unsupported(b)) {
    throw ImageError(source,
                     std::string(other) + " images are not supported (JPEG, PNG, WebP, BMP, TIFF)");
  }
  std::string first;
  for (size_t i = 0; i < size && i < 8; ++i) {
    char hex[4];
    std::snprintf(hex, sizeof(hex), " %02x", b.u8(i));
    first += hex;
  }
  throw ImageError(
      source,
      "not an image in a supported format (JPEG, PNG, WebP, BMP, TIFF); it starts with" + first);
}

}  // namespace attnzoo
