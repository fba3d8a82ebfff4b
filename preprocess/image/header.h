// What an image file claims to be, read from its bytes before any decoder runs.
//
// Decoders allocate the image from the size in its header, so a 60-byte PNG that claims
// 50000×50000 pixels costs 7.5 GB before the first row is read. OpenCV's own guard
// (OPENCV_IO_MAX_IMAGE_PIXELS) is read once per process from the environment; we need a limit
// per call, so the few header fields that size the allocations are parsed here first, for the
// five formats the frontend accepts: JPEG, PNG, WebP, BMP and TIFF. Anything else (GIF, PPM,
// OpenEXR, JPEG 2000, a text file) is refused here and never reaches a decoder, which also keeps
// OpenCV's less-travelled decoders away from untrusted input.
//
// The structure is walked far enough to know that the data is complete: libjpeg decodes a
// truncated JPEG "successfully" (a warning, the missing rows grey), where PIL raises "image file
// is truncated"; so a JPEG must reach its EOI marker, a PNG its IEND chunk, and a WebP file must
// hold the bytes its RIFF header announces.
//
// This file is torch-free and OpenCV-free so that it can be fuzzed and tested on its own.
#pragma once

#include <attnzoo/core/error.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace attnzoo {

// Any unreadable, malformed, truncated, unsupported or oversized image. The message names the
// source (the file path, or what the caller called an in-memory buffer) first.
class ImageError : public Error {
 public:
  using Error::Error;
  // "<source>: <what>"
  ImageError(const std::string& source, const std::string& what) : Error(source + ": " + what) {}
};

enum class ImageFormat { kJpeg, kPng, kWebP, kBmp, kTiff };
const char* image_format_name(ImageFormat format);  // "JPEG", "PNG", ...

struct ImageHeader {
  ImageFormat format = ImageFormat::kJpeg;
  int64_t width = 0;  // as stored, before any EXIF orientation
  int64_t height = 0;
  // TIFF only: the pixels of one tile or strip, which OpenCV allocates as a separate buffer
  // (TileWidth × TileLength, or ImageWidth × RowsPerStrip); 0 when the file does not say.
  int64_t block_pixels = 0;
};

// Identifies the format from the signature and reads the dimensions, checking the structure as
// described above. Throws ImageError naming `source` for an empty buffer, an unsupported format,
// a malformed or truncated header or stream, or a zero dimension.
ImageHeader read_image_header(const uint8_t* data, size_t size, const std::string& source);

}  // namespace attnzoo
