// Decoding image files to the 8-bit RGB pixels that vision models are trained on.
//
// The reference pipelines (timm, torchvision) open images with PIL and call .convert('RGB'), so
// that is the behaviour matched here:
//   - grayscale is replicated to three channels; an alpha channel is dropped (not composited);
//     palette images are expanded. One exception: OpenCV reads 8-bit TIFFs through libtiff's
//     RGBA interface, which premultiplies an unassociated alpha, so an RGBA TIFF comes out
//     composited on black;
//   - 16-bit images become 8-bit (v / 257, rounded): PIL reads 16-bit RGB as 8-bit, and its
//     convert('RGB') of 16-bit grayscale ("I;16") even clips everything above 255 to white, which
//     we do not copy;
//   - the EXIF orientation of a JPEG is applied (OpenCV does it for every read mode except
//     IMREAD_UNCHANGED, hence IMREAD_COLOR | IMREAD_ANYDEPTH here). timm's loader does not call
//     ImageOps.exif_transpose, so for a rotated photo we match timm after exif_transpose.
//
// Every file is checked before a decoder sees it (preprocess/image/header.h): the format must be
// JPEG, PNG, WebP, BMP or TIFF, the data complete, and the pixel count within a limit. Errors are
// ImageError, naming the file.
#pragma once

#include <attnzoo/preprocess/image/header.h>

#include <opencv2/core/mat.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnzoo {

struct ImageDecodeOptions {
  // Largest image accepted, in pixels (width × height, checked from the header before decoding;
  // also bounds a TIFF tile or strip). 100 megapixels: a 108-MP phone photo needs more.
  int64_t max_pixels = 100'000'000;
  // Largest file read into memory by decode_image(path).
  int64_t max_file_bytes = int64_t{1} << 30;
};

// The image in `path` as 8-bit RGB (CV_8UC3, rows = height), orientation applied. Throws
// ImageError naming `path` for a missing file, a directory or other non-regular file, an empty,
// unreadable, oversized, truncated or corrupt file, or an unsupported format.
cv::Mat decode_image(const std::string& path, const ImageDecodeOptions& options = {});

// The same for an encoded image in memory; `source` names it in errors.
cv::Mat decode_image_from_memory(const void* data, size_t size,
                                 const std::string& source = "<memory>",
                                 const ImageDecodeOptions& options = {});

}  // namespace attnzoo
