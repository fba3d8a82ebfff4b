// The eval transform against timm's (resolve_data_config + create_transform) and torchvision's
// ImageClassification preset: the same resize geometry exactly, and after normalisation a mean
// absolute difference of at most 1/255 on every image (the max is printed).
#include <attnzoo/api/frontend_options.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/preprocess/image/transform.h>
#include "common/test_util.h"
#include "preprocess_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>

namespace attnzoo {
namespace test_image_transform {
using testing::error_of;

using ::testing::HasSubstr;
using testing::image_file;
using testing::options_from_json;
using testing::reference;

constexpr double kMeanTolerance = 1.0 / 255.0;

// Decodes each image and compares our tensor with the reference file's; prints one line each.
void compare(const std::string& reference_file, const ImageTransformOptions& options,
             const std::vector<std::string>& names, const std::string& label) {
  const EvalImageTransform transform(options);
  const auto& references = reference().tensors(reference_file);
  std::printf("%s (%lldx%lld, crop_pct %g, %s)\n", label.c_str(),
              static_cast<long long>(options.height), static_cast<long long>(options.width),
              options.crop_pct, to_string(options.interpolation));
  for (const auto& name : names) {
    SCOPED_TRACE(label + ": " + name);
    const auto ours = transform(decode_image(image_file(name)));
    const auto* theirs = references.find(name);
    ASSERT_NE(theirs, nullptr);
    ASSERT_EQ(ours.sizes(), theirs->sizes());
    const auto d = testing::difference(ours, *theirs);
    std::printf("  %-28s max %.3f/255  mean %.4f/255\n", name.c_str(), d.max * 255, d.mean * 255);
    EXPECT_LE(d.mean, kMeanTolerance);
  }
}

std::vector<std::string> names_of(const nlohmann::json& list, bool photos) {
  const auto& all_photos = reference().manifest()["photos"];
  std::vector<std::string> names;
  for (const auto& n : list) {
    const bool is_photo = std::find(all_photos.begin(), all_photos.end(), n) != all_photos.end();
    if (is_photo == photos) names.push_back(n.get<std::string>());
  }
  return names;
}

// The photos are part of the suite (tools/setup.sh installs opencv-doc): a missing one is a
// failure, not a skip, so that a broken setup cannot pass the parity test on synthetic images only.
void require_photos() {
  EXPECT_FALSE(reference().manifest()["photos"].empty())
      << "the opencv-doc photos are missing; tools/setup.sh installs opencv-doc";
  EXPECT_TRUE(reference().manifest()["missing_photos"].empty())
      << "missing opencv-doc photos: " << reference().manifest()["missing_photos"];
}

// timm's Resize step gives these sizes (recorded by the fixture): ours must be the same.
TEST(EvalTransform, GeometryMatchesTimm) {
  const auto& decoded = reference().tensors("decoded.safetensors");
  for (const auto& [config_name, run] : reference().manifest()["timm"].items()) {
    const EvalImageTransform transform(
        options_from_json(reference().manifest()["configs"][config_name]));
    for (const auto& [name, size] : run["resized"].items()) {
      const auto& image = decoded[name];  // [H, W, 3]
      const auto p = transform.plan(image.size(0), image.size(1));
      EXPECT_EQ(p.resized_height, size[0].get<int64_t>()) << config_name << " " << name;
      EXPECT_EQ(p.resized_width, size[1].get<int64_t>()) << config_name << " " << name;
    }
  }
}

TEST(EvalTransform, TimmPhotos) {
  require_photos();
  for (const auto& [config_name, run] : reference().manifest()["timm"].items()) {
    compare("timm_" + config_name + ".safetensors",
            options_from_json(reference().manifest()["configs"][config_name]),
            names_of(run["images"], true), "timm " + config_name);
  }
}

TEST(EvalTransform, TimmSynthetic) {
  for (const auto& [config_name, run] : reference().manifest()["timm"].items()) {
    compare("timm_" + config_name + ".safetensors",
            options_from_json(reference().manifest()["configs"][config_name]),
            names_of(run["images"], false), "timm " + config_name);
  }
}

TEST(EvalTransform, TorchvisionPreset) {
  for (const auto& [preset, run] : reference().manifest()["torchvision"].items()) {
    auto names = names_of(run["images"], true);
    const auto synthetic = names_of(run["images"], false);
    names.insert(names.end(), synthetic.begin(), synthetic.end());
    compare("torchvision_" + preset + ".safetensors", options_from_json(run["config"]), names,
            "torchvision " + preset);
  }
}

// torchvision's center_crop rounds (H - h) / 2 with Python's round: half to even.
TEST(EvalTransform, CenterCropRoundsHalfToEven) {
  ImageTransformOptions options;
  options.crop_pct = 1.0;  // resize the shorter side to 224 exactly
  const EvalImageTransform transform(options);
  EXPECT_EQ(transform.plan(224, 257).left, 16);  // 16.5 -> 16
  EXPECT_EQ(transform.plan(224, 259).left, 18);  // 17.5 -> 18
  EXPECT_EQ(transform.plan(258, 224).top, 17);
  const auto p = transform.plan(224, 224);
  EXPECT_EQ(p.resized_height, 224);
  EXPECT_EQ(p.top, 0);
  EXPECT_EQ(p.left, 0);
}

// The float path (any other source than an 8-bit decode) is the same filter without PIL's
// rounding: close to the uint8 path, within the rounding it skips.
TEST(EvalTransform, FloatPixelsCloseToBytes) {
  ImageTransformOptions options;
  options.interpolation = Interpolation::kBicubic;
  options.mean = {0.0, 0.0, 0.0};
  options.std = {1.0, 1.0, 1.0};
  const EvalImageTransform transform(options);
  const auto bytes = image_to_tensor(decode_image(image_file("jpeg_333x517")));
  const auto from_bytes = transform(bytes);
  const auto from_float = transform(bytes.to(torch::kFloat).div(255));
  EXPECT_GE(from_float.min().item<float>(), 0.0f);
  EXPECT_LE(from_float.max().item<float>(), 1.0f);
  const auto d = testing::difference(from_bytes, from_float);
  EXPECT_LE(d.mean, 0.5 / 255);
  EXPECT_LE(d.max, 3.0 / 255);
}

TEST(EvalTransform, OnePixelScalesUp) {
  ImageTransformOptions options;
  const EvalImageTransform transform(options);
  const auto out = transform(decode_image(image_file("one_pixel_png")));
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{3, 224, 224}));
  const std::array<int, 3> rgb = {200, 30, 90};
  for (int c = 0; c < 3; ++c) {
    const double expected = (rgb[c] / 255.0 - options.mean[c]) / options.std[c];
    EXPECT_NEAR(out[c].min().item<double>(), expected, 1e-5);
    EXPECT_NEAR(out[c].max().item<double>(), expected, 1e-5);
  }
}

TEST(EvalTransform, Batch) {
  ImageTransformOptions options;
  options.height = options.width = 32;
  const EvalImageTransform transform(options);
  const std::vector<std::string> files = {image_file("png_37x53"), image_file("gray_jpeg_90x120"),
                                          image_file("rgba_png_80x95")};
  const auto batch = load_image_batch(files, transform);
  ASSERT_EQ(batch.sizes(), (std::vector<int64_t>{3, 3, 32, 32}));
  for (size_t i = 0; i < files.size(); ++i) {
    EXPECT_TRUE(torch::equal(batch[i], transform(decode_image(files[i]))));
  }
  // One bad file: the error names it.
  const auto bad = testing::reference().path("bad/text.jpg");
  try {
    load_image_batch({files[0], bad}, transform);
    ADD_FAILURE() << "no error";
  } catch (const ImageError& e) {
    EXPECT_THAT(e.what(), HasSubstr(bad + ": not an image"));
  }
  EXPECT_THAT(error_of<c10::ValueError>([&] { load_image_batch({}, transform); }),
              HasSubstr("load_image_batch: no images"));
}

// A 1x20000 strip would become 256x5120000 before the crop: refused, not allocated.
TEST(EvalTransform, ExtremeAspectRatioRefused) {
  const EvalImageTransform transform(ImageTransformOptions{});
  EXPECT_EQ(error_of<c10::ValueError>([&] { transform.plan(1, 20000); }),
            "image of 1x20000 (HxW) would be resized to 256x5120000, more than the limit of "
            "100000000 pixels (max_resized_pixels); its aspect ratio is too extreme");
  const auto p = transform.plan(10, 3000);  // 256x76800: allowed
  EXPECT_EQ(p.resized_width, 76800);
}

TEST(EvalTransform, Validation) {
  const auto error = [](auto change) {
    ImageTransformOptions options;
    change(options);
    return error_of<c10::ValueError>([&] { EvalImageTransform{options}; });
  };
  EXPECT_THAT(error([](auto& o) { o.crop_pct = 0.0; }),
              HasSubstr("crop_pct must be in (0, 1], got 0"));
  EXPECT_THAT(error([](auto& o) { o.crop_pct = 1.5; }), HasSubstr("crop_pct must be in (0, 1]"));
  EXPECT_THAT(error([](auto& o) { o.height = 0; }),
              HasSubstr("the input size must be at least 1x1, got 0x224"));
  EXPECT_THAT(error([](auto& o) { o.mean = {0.5}; }),
              HasSubstr("mean and std need 3 values (RGB), got 1 and 3"));
  EXPECT_THAT(error([](auto& o) { o.std[1] = 0.0; }),
              HasSubstr("std positive, got mean[1] = 0.456, std[1] = 0"));
  EXPECT_THAT(error([](auto& o) { o.crop_pct = 1e-300; }), HasSubstr("is too large"));
  EXPECT_THAT(error_of<c10::ValueError>([] { parse_interpolation("nearest"); }),
              HasSubstr("interpolation: expected 'bilinear' or 'bicubic', got 'nearest'"));
  const EvalImageTransform transform(ImageTransformOptions{});
  EXPECT_THAT(error_of<c10::ValueError>([&] {
                transform(torch::zeros({1, 8, 8}, torch::kByte));
              }),
              HasSubstr("image: expected [3, H, W] (RGB), got [1, 8, 8]"));
  EXPECT_THAT(error_of<c10::ValueError>([&] {
                transform(torch::zeros({3, 8, 8}, torch::kInt));
              }),
              HasSubstr("image: expected uint8 or floating-point pixels, got Int"));
  EXPECT_THAT(error_of<c10::ValueError>([&] { transform(cv::Mat(4, 4, CV_8UC1)); }),
              HasSubstr("image: expected an 8-bit RGB cv::Mat (CV_8UC3)"));
}

// The zoo's configs feed the transform through api/frontend_options.h.
TEST(EvalTransform, FromZooConfig) {
  const auto config = model_config("vit_base_patch16_224");
  const auto options = image_transform_options(config.image);
  EXPECT_EQ(options.height, 224);
  EXPECT_EQ(options.width, 224);
  EXPECT_DOUBLE_EQ(options.crop_pct, 0.9);
  EXPECT_EQ(options.interpolation, Interpolation::kBicubic);
  EXPECT_EQ(options.mean, (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(options.std, (std::vector<double>{0.5, 0.5, 0.5}));
  auto gray = config.image;
  gray.channels = 1;
  EXPECT_THAT(error_of<c10::ValueError>([&] { image_transform_options(gray); }),
              HasSubstr("preprocess.input_size: the image frontend makes RGB images (3 channels); "
                        "the config asks for 1"));
}

}  // namespace test_image_transform
}  // namespace attnzoo
