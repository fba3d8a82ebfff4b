// Decoding: every format, depth and channel layout against PIL's convert('RGB') (the pixels timm
// and torchvision start from), EXIF orientations, limits, and the bad inputs of the issue, each
// refused with one message naming the file.
#include <attnzoo/preprocess/image/decode.h>
#include <attnzoo/preprocess/image/transform.h>
#include "preprocess_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

namespace attnzoo {
namespace test_image_decode {

using ::testing::HasSubstr;
using testing::image_file;
using testing::read_file;
using testing::reference;
using testing::Scratch;
using testing::write_file;

std::string decode_error(const std::string& path, const ImageDecodeOptions& options = {}) {
  try {
    decode_image(path, options);
  } catch (const ImageError& e) {
    return e.what();
  }
  return "(no error)";
}

torch::Tensor as_tensor(const cv::Mat& rgb) {  // [H, W, 3] uint8
  return image_to_tensor(rgb).permute({1, 2, 0}).contiguous();
}

// Lossless formats decode to PIL's pixels exactly. JPEG and lossy WebP go through the same
// libraries (libjpeg-turbo, libwebp) in other versions: still exact here, which the test keeps
// as a tolerance of one level to stay robust to a library update. The reference of the RGBA TIFF
// is PIL's pixels composited on black, the documented exception (image_decode.h).
TEST(ImageDecode, MatchesPil) {
  const auto& decoded = reference().tensors("decoded.safetensors");
  std::printf("%-28s %-10s %s\n", "image", "size", "max |ours - PIL| (levels)");
  for (const auto& [name, info] : reference().manifest()["images"].items()) {
    SCOPED_TRACE(name);
    const cv::Mat rgb = decode_image(image_file(name));
    ASSERT_EQ(rgb.type(), CV_8UC3);
    const auto ours = as_tensor(rgb);
    const auto& theirs = decoded[name];
    ASSERT_EQ(ours.sizes(), theirs.sizes());
    const double max = testing::difference(ours, theirs).max;
    std::printf("%-28s %4dx%-5d %g\n", name.c_str(), rgb.cols, rgb.rows, max);
    const std::string file = info["file"].get<std::string>();
    const bool lossy = file.find(".jpg") != std::string::npos || name == "webp_lossy_211x300";
    EXPECT_LE(max, lossy ? 1.0 : 0.0);
  }
}

// A photo stored sideways with an EXIF orientation comes out upright (PIL's exif_transpose).
TEST(ImageDecode, ExifOrientation) {
  const auto& decoded = reference().tensors("decoded.safetensors");
  for (int orientation = 1; orientation <= 8; ++orientation) {
    const std::string name = "exif_orientation_" + std::to_string(orientation);
    const cv::Mat rgb = decode_image(image_file(name));
    // Stored 64x40 (WxH); orientations 5-8 swap the axes.
    EXPECT_EQ(rgb.cols, orientation >= 5 ? 40 : 64) << name;
    EXPECT_EQ(rgb.rows, orientation >= 5 ? 64 : 40) << name;
    EXPECT_LE(testing::difference(as_tensor(rgb), decoded[name]).max, 1.0) << name;
  }
}

TEST(ImageDecode, FromMemoryEqualsFromFile) {
  for (const char* name :
       {"baboon", "png_37x53", "webp_lossless_211x300", "tiff_lzw_150x203", "exif_orientation_6"}) {
    if (!reference().manifest()["images"].contains(name)) continue;
    const auto bytes = read_file(image_file(name));
    const cv::Mat a = decode_image(image_file(name));
    const cv::Mat b = decode_image_from_memory(bytes.data(), bytes.size(), name);
    EXPECT_TRUE(torch::equal(as_tensor(a), as_tensor(b))) << name;
  }
}

// The list: each a clear error naming the file; no crash, no hang.
TEST(ImageDecode, BadInputs) {
  const auto bad = [](const std::string& file) { return reference().path("bad/" + file); };
  EXPECT_EQ(decode_error(bad("missing.jpg")), bad("missing.jpg") + ": no such file");
  EXPECT_EQ(decode_error(bad("empty.jpg")), bad("empty.jpg") + ": empty file (0 bytes)");
  EXPECT_EQ(decode_error(bad("text.jpg")),
            bad("text.jpg") +
                ": not an image in a supported format (JPEG, PNG, WebP, BMP, TIFF); it starts "
                "with 54 68 69 73 20 69 73 20");
  EXPECT_EQ(decode_error(bad("truncated.jpg")),
            bad("truncated.jpg") +
                ": truncated JPEG (the data ends before the end-of-image marker; was the "
                "download or copy interrupted?)");
  EXPECT_EQ(decode_error(bad("truncated.png")),
            bad("truncated.png") +
                ": truncated PNG (the data ends inside chunk 'IDAT', before the IEND chunk)");
  EXPECT_EQ(decode_error(bad("huge_header.png")),
            bad("huge_header.png") +
                ": PNG of 50000x50000 = 2500000000 pixels, more than the limit of 100000000 "
                "pixels");
  EXPECT_EQ(decode_error(reference().path("bad")),
            reference().path("bad") + ": is a directory, not an image");

  // A FIFO would block a reader forever.
  Scratch scratch;
  const auto fifo = scratch.path("pipe.jpg");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(decode_error(fifo), fifo + ": is not a regular file");

  // Valid structure, garbage content: the decoder's failure, named.
  auto png = read_file(image_file("png_37x53"));
  for (size_t i = 41; i < png.size() - 20; ++i) png[i] = static_cast<char>(i * 37);
  write_file(scratch.path("garbage.png"), png);
  EXPECT_THAT(decode_error(scratch.path("garbage.png")),
              HasSubstr(scratch.path("garbage.png") + ": cannot decode the PNG data"));
}

// 1x1 is a valid image: it decodes, and the transform scales it up like any other.
TEST(ImageDecode, OnePixel) {
  const cv::Mat rgb = decode_image(image_file("one_pixel_png"));
  ASSERT_EQ(rgb.rows, 1);
  ASSERT_EQ(rgb.cols, 1);
  const auto pixel = rgb.at<cv::Vec3b>(0, 0);
  EXPECT_EQ(pixel[0], 200);  // RGB order
  EXPECT_EQ(pixel[1], 30);
  EXPECT_EQ(pixel[2], 90);
}

TEST(ImageDecode, Limits) {
  const auto file = image_file("png_37x53");
  ImageDecodeOptions options;
  options.max_pixels = 37 * 53;
  EXPECT_NO_THROW(decode_image(file, options));
  options.max_pixels = 37 * 53 - 1;
  EXPECT_EQ(decode_error(file, options),
            file + ": PNG of 53x37 = 1961 pixels, more than the limit of 1960 pixels");
  options = {};
  const auto size = static_cast<int64_t>(std::filesystem::file_size(file));
  options.max_file_bytes = size - 1;
  EXPECT_EQ(decode_error(file, options), file + ": file of " + std::to_string(size) +
                                             " bytes, more than the limit of " +
                                             std::to_string(size - 1) + " bytes");
  options = {};
  options.max_pixels = 0;
  EXPECT_THAT(decode_error(file, options),
              HasSubstr("ImageDecodeOptions: max_pixels and max_file_bytes must be positive"));

  // TIFF tiles or strips count too: a 10x10 image claiming 65536x65536 tiles.
  std::string tiff =
      "II*" + std::string(1, '\0') + std::string("\x08\0\0\0", 4) + std::string("\x04\0", 2);
  const auto entry = [](uint16_t tag, uint32_t value) {
    std::string e(12, '\0');
    e[0] = static_cast<char>(tag & 0xFF);
    e[1] = static_cast<char>(tag >> 8);
    e[2] = 4;  // LONG
    e[4] = 1;  // one value
    for (int i = 0; i < 4; ++i) e[8 + i] = static_cast<char>((value >> (8 * i)) & 0xFF);
    return e;
  };
  tiff += entry(256, 10) + entry(257, 10) + entry(322, 65536) + entry(323, 65536) +
          std::string(4, '\0');
  try {
    decode_image_from_memory(tiff.data(), tiff.size(), "tiles.tiff");
    ADD_FAILURE() << "no error";
  } catch (const ImageError& e) {
    EXPECT_STREQ(e.what(),
                 "tiles.tiff: TIFF tiles or strips of 4294967296 pixels, more than the limit of "
                 "100000000 pixels");
  }
}

// The fuzz target's seeds (tests/fuzz/corpus/image/): tiny valid images of every format, each
// decodes and goes through the eval transform; and the inputs that once crashed it (regress_*),
// each refused with an ImageError.
TEST(ImageDecode, FuzzSeedCorpus) {
  ImageTransformOptions options;
  options.height = options.width = 16;
  const EvalImageTransform transform(options);
  int valid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ATTNZOO_FUZZ_IMAGE_CORPUS_DIR)) {
    const auto path = entry.path().string();
    SCOPED_TRACE(path);
    if (entry.path().filename().string().rfind("regress_", 0) == 0) {
      EXPECT_THROW(decode_image(path), ImageError);
      continue;
    }
    EXPECT_EQ(transform(decode_image(path)).sizes(), (std::vector<int64_t>{3, 16, 16}));
    ++valid;
  }
  EXPECT_GE(valid, 10);
}

}  // namespace test_image_decode
}  // namespace attnzoo
