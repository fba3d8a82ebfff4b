// attnzoo::ImageClassifier against timm (make_classifier_reference.py: timm's eval transform and
// softmax on the same images and weights), its labels, batching, thread safety and errors.
#include <attnzoo/api/image_classifier.h>
#include <attnzoo/api/inference_dtype.h>
#include "common/test_util.h"

#include <attnzoo/io/safetensors.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <fstream>
#include <thread>

namespace attnzoo {
namespace test_image_classifier {
using testing::error_of;

using ::testing::HasSubstr;

const std::string kRef = ATTNZOO_API_REFERENCE_DIR;
const std::string kYaml = std::string(ATTNZOO_API_TEST_DATA_DIR) + "/vit_micro_classifier.yaml";

ImageClassifierOptions with_weights() {
  ImageClassifierOptions options;
  options.weights = kRef + "/weights.safetensors";
  return options;
}

// Our top-k against timm's probabilities: the same classes in the same order, the same values.
void expect_matches_timm(const std::vector<Prediction>& top, const torch::Tensor& timm_probs,
                         const std::vector<std::string>& labels, double tolerance) {
  const auto [values, indices] = timm_probs.topk(static_cast<int64_t>(top.size()));
  for (size_t i = 0; i < top.size(); ++i) {
    const auto k = static_cast<int64_t>(i);
    EXPECT_EQ(top[i].index, indices[k].item<int64_t>()) << "rank " << i;
    EXPECT_NEAR(top[i].probability, values[k].item<double>(), tolerance) << "rank " << i;
    EXPECT_EQ(top[i].label, labels[static_cast<size_t>(top[i].index)]);
  }
}

TEST(ImageClassifier, MatchesTimmOnEveryImageKind) {
  const ImageClassifier classifier(kYaml, with_weights());
  const auto timm = io::load_safetensors(kRef + "/probabilities.safetensors");
  ASSERT_EQ(classifier.labels().size(), 7u);
  EXPECT_EQ(classifier.labels()[6], "grey cat");
  EXPECT_THAT(classifier.weights_description(), HasSubstr("(timm layout)"));
  for (const char* name : {"a.png", "b.jpg", "c.png", "d.png"}) {
    SCOPED_TRACE(name);
    const auto top = classifier.classify(kRef + "/" + name, 5);
    ASSERT_EQ(top.size(), 5u);
    // End to end the frontend differs from PIL's uint8 resize by its rounding (within 1/255 per
    // pixel, tests/preprocess), which these noise images and a sensitive random model turn into
    // up to ~1e-3 of probability; the model itself matches timm to 1e-4 (tests/cli forward).
    expect_matches_timm(top, timm.tensors[name], classifier.labels(), 2e-3);
    EXPECT_GE(top[0].probability, top[4].probability);
  }
  // topk beyond the classes is clamped.
  EXPECT_EQ(classifier.classify(kRef + "/a.png", 100).size(), 7u);
}

TEST(ImageClassifier, MatsInEitherChannelOrderEqualTheFile) {
  const ImageClassifier classifier(kYaml, with_weights());
  const auto from_file = classifier.classify(kRef + "/b.jpg", 3);
  const cv::Mat bgr = cv::imread(kRef + "/b.jpg", cv::IMREAD_COLOR);
  const auto from_bgr = classifier.classify(bgr, 3);
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  const auto from_rgb = classifier.classify(rgb, 3, ChannelOrder::kRGB);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(from_bgr[i].index, from_file[i].index);
    EXPECT_NEAR(from_bgr[i].probability, from_file[i].probability, 1e-6);
    EXPECT_EQ(from_rgb[i].index, from_file[i].index);
    EXPECT_NEAR(from_rgb[i].probability, from_file[i].probability, 1e-6);
  }
  // Swapping the order is another image: the test can tell.
  const auto swapped = classifier.classify(bgr, 1, ChannelOrder::kRGB);
  EXPECT_GT(std::abs(swapped[0].probability - from_file[0].probability) +
                (swapped[0].index != from_file[0].index),
            1e-6);
  EXPECT_THAT(error_of([&] { classifier.classify(cv::Mat(), 1); }), HasSubstr("image is empty"));
  EXPECT_THAT(error_of([&] { classifier.classify(cv::Mat(4, 4, CV_32FC3), 1); }),
              HasSubstr("must be 8-bit"));
}

TEST(ImageClassifier, BatchesKeepEachImagesResultAndReportBadOnes) {
  auto options = with_weights();
  options.batch_size = 2;
  const ImageClassifier classifier(kYaml, options);
  const std::vector<std::string> paths = {
      kRef + "/a.png", kRef + "/missing.png", kRef + "/b.jpg", kRef + "/not_an_image.png",
      kRef + "/c.png", kRef + "/empty.jpg",   kRef + "/d.png"};
  const auto results = classifier.classify(paths, 3);
  ASSERT_EQ(results.size(), paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    SCOPED_TRACE(paths[i]);
    EXPECT_EQ(results[i].image, paths[i]);
    const bool bad = i == 1 || i == 3 || i == 5;
    EXPECT_EQ(results[i].ok(), !bad) << results[i].error;
    if (bad) {
      EXPECT_THAT(results[i].error, HasSubstr(paths[i]));
      continue;
    }
    const auto alone = classifier.classify(paths[i], 3);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(results[i].top[k].index, alone[k].index);
      EXPECT_NEAR(results[i].top[k].probability, alone[k].probability, 1e-6);
    }
  }
}

TEST(ImageClassifier, FourThreadsAtOnceGiveTheSerialResults) {
  const ImageClassifier classifier(kYaml, with_weights());
  const std::vector<std::string> names = {"a.png", "b.jpg", "c.png", "d.png"};
  std::vector<std::vector<Prediction>> serial;
  for (const auto& name : names) serial.push_back(classifier.classify(kRef + "/" + name, 7));
  std::vector<std::vector<std::vector<Prediction>>> parallel(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < names.size(); ++i) {
          // Each thread starts at another image, so different images run at the same time.
          const auto& name = names[(i + t) % names.size()];
          parallel[t].push_back(classifier.classify(kRef + "/" + name, 7));
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (size_t t = 0; t < 4; ++t) {
    ASSERT_EQ(parallel[t].size(), 5 * names.size());
    for (size_t n = 0; n < parallel[t].size(); ++n) {
      const auto& expected = serial[(n % names.size() + t) % names.size()];
      const auto& got = parallel[t][n];
      for (size_t k = 0; k < expected.size(); ++k) {
        EXPECT_EQ(got[k].index, expected[k].index);
        EXPECT_EQ(got[k].probability, expected[k].probability) << "thread " << t << " call " << n;
      }
    }
  }
}

TEST(ImageClassifier, Bfloat16StaysCloseToFloat32) {
  auto options = with_weights();
  options.dtype = torch::kBFloat16;
  const ImageClassifier bf16(kYaml, options);
  const auto timm = io::load_safetensors(kRef + "/probabilities.safetensors");
  const auto top = bf16.classify(kRef + "/a.png", 1);
  EXPECT_NEAR(top[0].probability, timm.tensors["a.png"].max().item<double>(), 0.05);
}

TEST(ImageClassifier, DtypeComesFromTheConfigUnlessTheOptionsNameOne) {
  EXPECT_EQ(ImageClassifier(kYaml, with_weights()).dtype(), torch::kFloat);  // the default
  auto options = with_weights();
  options.overrides.push_back("inference.dtype=bf16");
  const ImageClassifier from_config(kYaml, options);
  EXPECT_EQ(from_config.dtype(), torch::kBFloat16);
  const auto timm = io::load_safetensors(kRef + "/probabilities.safetensors");
  const auto top = from_config.classify(kRef + "/a.png", 1);
  EXPECT_NEAR(top[0].probability, timm.tensors["a.png"].max().item<double>(), 0.05);
  options.dtype = torch::kFloat;  // the caller's choice wins
  EXPECT_EQ(ImageClassifier(kYaml, options).dtype(), torch::kFloat);
  auto automatic = with_weights();
  automatic.overrides.push_back("inference.dtype=auto");
  EXPECT_EQ(ImageClassifier(kYaml, automatic).dtype(),
            resolve_inference_dtype(InferenceDtype::kAuto, torch::kCPU));
}

TEST(ImageClassifier, Int8StaysCloseToFloat32AndRefusesWhatItCannotRun) {
  auto options = with_weights();
  options.quantize = Quantization::kInt8;
  const ImageClassifier int8(kYaml, options);
  const auto timm = io::load_safetensors(kRef + "/probabilities.safetensors");
  const auto top = int8.classify(kRef + "/a.png", 1);
  EXPECT_NEAR(top[0].probability, timm.tensors["a.png"].max().item<double>(), 0.05);
  const ImageClassifier fp32(kYaml, with_weights());
  EXPECT_NE(top[0].probability, fp32.classify(kRef + "/a.png", 1)[0].probability);
  options.dtype = torch::kHalf;
  EXPECT_THAT(error_of([&] { ImageClassifier(kYaml, options); }),
              HasSubstr("inference.quantize int8 runs on the CPU in fp32 or bf16"));
}

TEST(ImageClassifier, LabelsOfTheZooAndItsErrors) {
  // labels: imagenet -> the shipped 1000 names.
  const auto names = load_labels({LabelsConfig::Source::kImageNet, "", {}}, 1000);
  ASSERT_EQ(names.size(), 1000u);
  EXPECT_EQ(names[0], "tench");
  EXPECT_EQ(names[999], "toilet tissue");
  EXPECT_THAT(error_of([] {
                load_labels({LabelsConfig::Source::kImageNet, "", {}}, 10);
              }),
              HasSubstr("imagenet1k.txt: 1000 labels for a model of 10 classes"));
  EXPECT_THAT(error_of([] {
                load_labels({LabelsConfig::Source::kFile, "/nonexistent/l.txt", {}}, 3);
              }),
              HasSubstr("/nonexistent/l.txt: cannot read the labels file"));
  const std::string gap = ::testing::TempDir() + "/gap_labels.txt";
  std::ofstream(gap) << "a\n\nc\n";
  EXPECT_THAT(error_of([&] {
                load_labels({LabelsConfig::Source::kFile, gap, {}}, 3);
              }),
              HasSubstr("gap_labels.txt:2: empty label"));
  EXPECT_TRUE(load_labels({}, 5).empty());
}

TEST(ImageClassifier, BadModelsOptionsAndImages) {
  EXPECT_THAT(
      error_of([] { ImageClassifier("conformer_s"); }),
      HasSubstr("is a conformer model, which takes audio; an image classifier needs images"));
  ImageClassifierOptions no_head;
  no_head.overrides = {"architecture.num_classes=0"};
  EXPECT_THAT(error_of([&] { ImageClassifier(kYaml, no_head); }),
              HasSubstr("has no classifier (architecture.num_classes 0)"));
  ImageClassifierOptions wrong_count;
  wrong_count.overrides = {"architecture.num_classes=5"};
  EXPECT_THAT(error_of([&] { ImageClassifier(kYaml, wrong_count); }),
              HasSubstr("micro_labels.txt: 7 labels for a model of 5 classes"));
  ImageClassifierOptions graph_on_cpu;
  graph_on_cpu.cuda_graph = true;
  EXPECT_THAT(error_of([&] { ImageClassifier(kYaml, graph_on_cpu); }),
              HasSubstr("cuda_graph needs device cuda, got cpu"));
  ImageClassifierOptions bad_dtype;
  bad_dtype.dtype = torch::kDouble;
  EXPECT_THAT(error_of([&] { ImageClassifier(kYaml, bad_dtype); }),
              HasSubstr("ImageClassifier: dtype must be fp32, bf16 or fp16, got fp64"));
  ImageClassifierOptions bad_device;
  bad_device.device = torch::kMeta;
  EXPECT_THAT(error_of([&] { ImageClassifier(kYaml, bad_device); }),
              HasSubstr("ImageClassifier: device must be cpu, cuda or cuda:N, got meta"));
  ImageClassifierOptions bad_batch;
  bad_batch.batch_size = 0;
  EXPECT_THAT(error_of([&] { ImageClassifier(kYaml, bad_batch); }),
              HasSubstr("batch_size must be >= 1, got 0"));
  ImageClassifierOptions missing_weights;
  missing_weights.weights = kRef + "/nope.safetensors";
  EXPECT_THAT(error_of([&] { ImageClassifier(kYaml, missing_weights); }),
              HasSubstr("nope.safetensors"));
  const ImageClassifier classifier(kYaml, with_weights());
  EXPECT_THAT(error_of([&] { classifier.classify(kRef + "/a.png", 0); }),
              HasSubstr("topk must be >= 1, got 0"));
  EXPECT_THAT(error_of([&] { classifier.classify(kRef + "/not_an_image.png", 1); }),
              HasSubstr("not_an_image.png"));
  EXPECT_THAT(error_of([&] { classifier.classify(kRef, 1); }), HasSubstr(kRef));
}

}  // namespace test_image_classifier
}  // namespace attnzoo
