#include <attnzoo/preprocess/image/decode.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace attnzoo {
namespace {

void check_options(const ImageDecodeOptions& options) {
  if (options.max_pixels < 1 || options.max_file_bytes < 1) {
    throw ImageError("ImageDecodeOptions: max_pixels and max_file_bytes must be positive, got " +
                     std::to_string(options.max_pixels) + " and " +
                     std::to_string(options.max_file_bytes));
  }
}

// The limits, from the header alone: nothing has been allocated for the image yet.
void check_size(const ImageHeader& header, const ImageDecodeOptions& options,
                const std::string& source) {
  const char* format = image_format_name(header.format);
  // width, height < 2^31 (the header readers guarantee it): the product fits in int64.
  const int64_t pixels = header.width * header.height;
  if (pixels > options.max_pixels) {
    throw ImageError(source, std::string(format) + " of " + std::to_string(header.width) + "x" +
                                 std::to_string(header.height) + " = " + std::to_string(pixels) +
                                 " pixels, more than the limit of " +
                                 std::to_string(options.max_pixels) + " pixels");
  }
  if (header.block_pixels > options.max_pixels) {
    throw ImageError(source, std::string(format) + " tiles or strips of " +
                                 std::to_string(header.block_pixels) +
                                 " pixels, more than the limit of " +
                                 std::to_string(options.max_pixels) + " pixels");
  }
}

// Any depth OpenCV returns under IMREAD_ANYDEPTH, to 8 bits as PIL's RGB mode holds it.
cv::Mat to_8bit(const cv::Mat& image, const std::string& source) {
  switch (image.depth()) {
    case CV_8U:
      return image;
    case CV_16U: {
      cv::Mat out;
      image.convertTo(out, CV_8U, 1.0 / 257.0);  // 65535 -> 255, rounded to nearest
      return out;
    }
    case CV_32F:
    case CV_64F: {
      cv::Mat out;
      image.convertTo(out, CV_8U, 255.0);  // floating-point images hold [0, 1]; saturated
      return out;
    }
    default:
      throw ImageError(source, "unsupported sample format (signed integer samples)");
  }
}

}  // namespace

cv::Mat decode_image_from_memory(const void* data, size_t size, const std::string& source,
                                 const ImageDecodeOptions& options) {
  check_options(options);
  if (size > static_cast<size_t>(INT_MAX)) {
    throw ImageError(source,
                     "encoded image of " + std::to_string(size) + " bytes, more than 2 GiB");
  }
  const auto header = read_image_header(static_cast<const uint8_t*>(data), size, source);
  check_size(header, options, source);
  const std::string format = image_format_name(header.format);

  const cv::Mat encoded(1, static_cast<int>(size), CV_8UC1, const_cast<void*>(data));
  cv::Mat image;
  try {
    image = cv::imdecode(encoded, cv::IMREAD_COLOR | cv::IMREAD_ANYDEPTH);
  } catch (const cv::Exception& e) {
    throw ImageError(source, "cannot decode the " + format + " data: " + e.err);
  }
  if (image.empty()) {
    throw ImageError(source,
                     "cannot decode the " + format +
                         " data (corrupt, or a variant of the format OpenCV does not read)");
  }
  // What was decoded is what the header announced (transposed by an EXIF orientation of 5-8).
  const int64_t rows = image.rows, cols = image.cols;
  if (!((rows == header.height && cols == header.width) ||
        (rows == header.width && cols == header.height)) ||
      image.channels() != 3) {
    throw ImageError(source, "the decoder returned " + std::to_string(cols) + "x" +
                                 std::to_string(rows) + "x" + std::to_string(image.channels()) +
                                 " for a " + format + " header of " + std::to_string(header.width) +
                                 "x" + std::to_string(header.height));
  }
  cv::Mat rgb;
  cv::cvtColor(to_8bit(image, source), rgb, cv::COLOR_BGR2RGB);
  return rgb;
}

cv::Mat decode_image(const std::string& path, const ImageDecodeOptions& options) {
  check_options(options);
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) throw ImageError(path, "no such file");
  if (fs::is_directory(status)) throw ImageError(path, "is a directory, not an image");
  // A FIFO or device would block or never end: only regular files are read.
  if (!fs::is_regular_file(status)) throw ImageError(path, "is not a regular file");
  const auto size = fs::file_size(path, ec);
  if (ec) throw ImageError(path, "cannot read its size (" + ec.message() + ")");
  if (size == 0) throw ImageError(path, "empty file (0 bytes)");
  if (size > static_cast<uint64_t>(options.max_file_bytes)) {
    throw ImageError(path, "file of " + std::to_string(size) + " bytes, more than the limit of " +
                               std::to_string(options.max_file_bytes) + " bytes");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ImageError(path, std::string("cannot open (") + std::strerror(errno) + ")");
  std::vector<char> bytes(size);
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (static_cast<uint64_t>(in.gcount()) != size) {
    throw ImageError(path, "could not read all " + std::to_string(size) +
                               " bytes (was the file changed while being read?)");
  }
  return decode_image_from_memory(bytes.data(), bytes.size(), path, options);
}

}  // namespace attnzoo
