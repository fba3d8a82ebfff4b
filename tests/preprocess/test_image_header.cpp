// The header reader: formats and sizes of crafted and real files, and every kind of truncated,
// malformed or unsupported data refused with a message naming the source.
#include <attnzoo/preprocess/image/header.h>
#include "preprocess_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace attnzoo {
namespace test_image_header {

using ::testing::HasSubstr;
using testing::image_file;
using testing::read_file;
using testing::reference;
using ::testing::StartsWith;

std::string be16(uint32_t v) { return {static_cast<char>(v >> 8), static_cast<char>(v)}; }
std::string be32(uint32_t v) { return be16(v >> 16) + be16(v & 0xFFFF); }
std::string le16(uint32_t v) { return {static_cast<char>(v), static_cast<char>(v >> 8)}; }
std::string le32(uint32_t v) { return le16(v & 0xFFFF) + le16(v >> 16); }

ImageHeader header_of(const std::string& bytes, const std::string& source = "test.img") {
  return read_image_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), source);
}

std::string error_of(const std::string& bytes, const std::string& source = "test.img") {
  try {
    header_of(bytes, source);
  } catch (const ImageError& e) {
    return e.what();
  }
  return "(no error)";
}

// A minimal baseline JPEG structure (not decodable data, but every marker a parser sees):
// SOI, APP0, SOF0, SOS, entropy bytes with a stuffed 0xFF and a restart marker, fill bytes, EOI.
std::string jpeg(uint32_t width, uint32_t height) {
  std::string s = "\xFF\xD8";
  s += "\xFF\xE0" + be16(16) + std::string("JFIF\0\1\1\0\0\1\0\1\0\0", 14);
  s += "\xFF\xC0" + be16(11) + "\x08" + be16(height) + be16(width) +
       std::string("\x01\x01\x11\x00", 4);
  s += "\xFF\xDA" + be16(8) + std::string("\x01\x01\x00\x00\x3F\x00", 6);
  s += std::string("\x12\x34\xFF\x00\x56\xFF\xD0\x78\xFF\xFF", 10);
  s += "\xFF\xD9";
  return s;
}

std::string png_chunk(const std::string& type, const std::string& data) {
  return be32(static_cast<uint32_t>(data.size())) + type + data + be32(0);  // CRCs are not read
}

std::string png(uint32_t width, uint32_t height) {
  return "\x89PNG\r\n\x1A\n" +
         png_chunk("IHDR", be32(width) + be32(height) + std::string("\x08\x02\0\0\0", 5)) +
         png_chunk("IDAT", "xyz") + png_chunk("IEND", "");
}

std::string riff(const std::string& chunk) {
  return "RIFF" + le32(static_cast<uint32_t>(4 + chunk.size())) + "WEBP" + chunk;
}

std::string bmp(int32_t width, int32_t height, uint32_t dib = 40) {
  std::string s = "BM" + le32(0) + le32(0) + le32(54) + le32(dib);
  s += le32(static_cast<uint32_t>(width)) + le32(static_cast<uint32_t>(height));
  s += std::string(40 - 12, '\0');
  return s;
}

// Classic little-endian TIFF with one directory of LONG/SHORT entries.
std::string tiff(const std::vector<std::array<uint32_t, 3>>& entries) {  // tag, type, value
  std::string s =
      "II\x2A" + std::string(1, '\0') + le32(8) + le16(static_cast<uint32_t>(entries.size()));
  for (const auto& [tag, type, value] : entries) {
    s += le16(tag) + le16(type) + le32(1) + (type == 3 ? le16(value) + le16(0) : le32(value));
  }
  return s + le32(0);
}

TEST(ImageHeader, CraftedFormats) {
  auto h = header_of(jpeg(641, 479));
  EXPECT_EQ(h.format, ImageFormat::kJpeg);
  EXPECT_EQ(h.width, 641);
  EXPECT_EQ(h.height, 479);
  h = header_of(png(50000, 3));
  EXPECT_EQ(h.format, ImageFormat::kPng);
  EXPECT_EQ(h.width, 50000);
  EXPECT_EQ(h.height, 3);
  // VP8X: canvas minus one in 24 bits.
  h = header_of(riff("VP8X" + le32(10) + std::string(4, '\0') + std::string("\xFF\xFF\xFF", 3) +
                     std::string("\x01\0\0", 3)));
  EXPECT_EQ(h.format, ImageFormat::kWebP);
  EXPECT_EQ(h.width, 1 << 24);
  EXPECT_EQ(h.height, 2);
  // VP8: key frame, start code, 14-bit sizes (the top two bits are the scale).
  h = header_of(riff("VP8 " + le32(10) + std::string("\x10\x02\x00\x9D\x01\x2A", 6) +
                     le16(0xC000 | 300) + le16(211)));
  EXPECT_EQ(h.width, 300);
  EXPECT_EQ(h.height, 211);
  // VP8L: signature 0x2F, then 14 bits of width - 1 and 14 of height - 1.
  h = header_of(riff("VP8L" + le32(5) + "\x2F" + le32(299u | (210u << 14)) + std::string(1, '\0')));
  EXPECT_EQ(h.width, 300);
  EXPECT_EQ(h.height, 211);
  h = header_of(bmp(129, -97));  // top-down
  EXPECT_EQ(h.format, ImageFormat::kBmp);
  EXPECT_EQ(h.width, 129);
  EXPECT_EQ(h.height, 97);
  h = header_of(tiff({{256, 4, 150}, {257, 3, 203}, {278, 4, 16}}));
  EXPECT_EQ(h.format, ImageFormat::kTiff);
  EXPECT_EQ(h.width, 150);
  EXPECT_EQ(h.height, 203);
  EXPECT_EQ(h.block_pixels, 150 * 16);
  h = header_of(tiff({{256, 4, 10}, {257, 4, 10}, {322, 4, 65536}, {323, 4, 65536}}));
  EXPECT_EQ(h.block_pixels, int64_t{65536} * 65536);
  // BigTIFF: magic 43, offsets of 8 bytes, 20-byte entries.
  std::string big = "MM" + std::string("\0\x2B\0\x08\0\0", 6) + std::string(7, '\0') + "\x10";
  big += std::string(7, '\0') + "\x02";  // two entries (big-endian u64)
  big += std::string("\x01\x00\x00\x04", 4) + std::string(7, '\0') + "\x01" +
         std::string("\x00\x00\x01\x2C", 4) + std::string(4, '\0');  // width 300 (LONG)
  big += std::string("\x01\x01\x00\x03", 4) + std::string(7, '\0') + "\x01" +
         std::string("\x00\xD3", 2) + std::string(6, '\0');  // height 211 (SHORT)
  h = header_of(big);
  EXPECT_EQ(h.format, ImageFormat::kTiff);
  EXPECT_EQ(h.width, 300);
  EXPECT_EQ(h.height, 211);
}

TEST(ImageHeader, RealFilesMatchPil) {
  for (const auto& [name, image] : reference().manifest()["images"].items()) {
    const auto bytes = read_file(image_file(name));
    const auto h = header_of(bytes, name);
    EXPECT_EQ(h.width, image["size"][0].get<int64_t>()) << name;
    EXPECT_EQ(h.height, image["size"][1].get<int64_t>()) << name;
  }
}

// Every prefix of a JPEG or PNG is refused as truncated: no EOI, no IEND.
TEST(ImageHeader, EveryPrefixIsTruncated) {
  for (const char* name : {"jpeg_333x517", "jpeg_progressive_257x263", "png_37x53"}) {
    const auto bytes = read_file(image_file(name));
    ASSERT_NO_THROW(header_of(bytes)) << name;
    // From 8 bytes on, where the signature is complete.
    for (size_t cut = 8; cut < bytes.size(); cut += 1 + cut / 7) {
      EXPECT_THAT(error_of(bytes.substr(0, cut), name), HasSubstr(": truncated "))
          << name << " cut at " << cut;
    }
    EXPECT_THAT(error_of(bytes.substr(0, bytes.size() - 1), name), HasSubstr(": truncated "));
  }
  const auto webp = read_file(image_file("webp_lossy_211x300"));
  EXPECT_THAT(error_of(webp.substr(0, webp.size() - 1), "x.webp"),
              HasSubstr("x.webp: truncated WebP (the RIFF header announces"));
}

TEST(ImageHeader, Refusals) {
  EXPECT_EQ(error_of("", "a.jpg"), "a.jpg: empty file (0 bytes)");
  EXPECT_EQ(error_of("This is a text file.\n", "t.jpg"),
            "t.jpg: not an image in a supported format (JPEG, PNG, WebP, BMP, TIFF); it starts "
            "with 54 68 69 73 20 69 73 20");
  EXPECT_EQ(error_of("GIF89a....", "a.gif"),
            "a.gif: GIF images are not supported (JPEG, PNG, WebP, BMP, TIFF)");
  EXPECT_THAT(error_of("P6\n3 3\n255\n"), HasSubstr("PNM images are not supported"));
  EXPECT_THAT(error_of(std::string("\0\0\0\x1C", 4) + "ftypavif"),
              HasSubstr("HEIF/AVIF images are not supported"));
  // Zero and absurd sizes.
  EXPECT_EQ(error_of(png(0, 5)), "test.img: invalid PNG header: 0x5 pixels");
  EXPECT_THAT(error_of(png(0x80000000u, 5)), HasSubstr("corrupt PNG: IHDR claims 2147483648x5"));
  EXPECT_THAT(error_of(jpeg(10, 0)), HasSubstr("unsupported JPEG: the height is given by a DNL"));
  EXPECT_EQ(error_of(bmp(-3, 5)), "test.img: invalid BMP header: -3x5 pixels");
  EXPECT_THAT(error_of(bmp(3, 5, 20)), HasSubstr("unsupported BMP: DIB header of 20 bytes"));
  EXPECT_THAT(error_of(tiff({{256, 4, 150}})),
              HasSubstr("corrupt TIFF: no ImageWidth or ImageLength tag"));
  EXPECT_THAT(error_of(tiff({{256, 4, 150}}).substr(0, 12)), HasSubstr("truncated TIFF"));
  EXPECT_THAT(error_of(tiff({{256, 4, 10}, {257, 4, 10}, {256, 4, 1000000}})),
              HasSubstr("corrupt TIFF: tag 256 given twice"));
  auto two_values = tiff({{256, 4, 10}, {257, 4, 10}});
  two_values[14] = 2;  // the first entry's count
  EXPECT_THAT(error_of(two_values), HasSubstr("unsupported TIFF: tag 256 is not a single integer"));
  // Found by fuzz_image: a TIFF signature and one more byte (read past the end before).
  EXPECT_EQ(error_of(std::string("MM\0*N", 5)),
            "test.img: truncated TIFF (shorter than its header)");
  EXPECT_THAT(error_of("II\x2A" + std::string(1, '\0') + le32(4000)),
              HasSubstr("truncated TIFF (the first directory at byte 4000 is outside"));
  // A JPEG whose scan comes before its frame header, or that ends before any scan.
  std::string no_frame = "\xFF\xD8\xFF\xDA" + be16(8) + std::string(6, '\0') + "\xFF\xD9";
  EXPECT_THAT(error_of(no_frame), HasSubstr("corrupt JPEG: image data before the frame header"));
  const auto j = jpeg(4, 4);
  const auto sos = j.find("\xFF\xDA");
  EXPECT_THAT(error_of(j.substr(0, sos) + "\xFF\xD9"),
              HasSubstr("corrupt JPEG: end of image before any image data"));
  // A PNG that does not start with IHDR.
  std::string bad_png = png(4, 4);
  bad_png[12] = 'X';
  EXPECT_THAT(error_of(bad_png), HasSubstr("corrupt PNG: the first chunk is not a 13-byte IHDR"));
  EXPECT_THAT(error_of(riff("VP8 " + le32(10) + std::string("\x11\x02\x00\x9D\x01\x2A", 6) +
                            le16(300) + le16(211))),
              HasSubstr("corrupt WebP: the VP8 data does not start with a key frame"));
  EXPECT_THAT(error_of(riff("ABCD" + le32(18) + std::string(18, '\0'))),
              HasSubstr("corrupt WebP: expected a VP8, VP8L or VP8X chunk"));
}

// libjpeg skips stray bytes between segments (with a warning); the reader accepts them too.
TEST(ImageHeader, JpegToleratesStrayBytesBetweenSegments) {
  auto j = jpeg(7, 9);
  const auto sof = j.find("\xFF\xC0");
  j.insert(sof, std::string("\x00\x01\x02", 3));
  const auto h = header_of(j);
  EXPECT_EQ(h.width, 7);
  EXPECT_EQ(h.height, 9);
}

TEST(ImageHeader, FormatNames) {
  EXPECT_STREQ(image_format_name(ImageFormat::kJpeg), "JPEG");
  EXPECT_STREQ(image_format_name(ImageFormat::kPng), "PNG");
  EXPECT_STREQ(image_format_name(ImageFormat::kWebP), "WebP");
  EXPECT_STREQ(image_format_name(ImageFormat::kBmp), "BMP");
  EXPECT_STREQ(image_format_name(ImageFormat::kTiff), "TIFF");
}

}  // namespace test_image_header
}  // namespace attnzoo
