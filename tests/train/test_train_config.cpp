// The training YAML: defaults, values, and errors that name the file, the key, the line and the
// column (or the override).
#include "common/test_util.h"
#include "trainer_test_util.h"

#include <attnzoo/configs/train_config.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace attnzoo {
namespace {
using test_util::error_of;

using ::testing::HasSubstr;

const std::string kData = ATTNZOO_TRAIN_TEST_DATA_DIR;

std::string write(const std::string& dir, const std::string& text) {
  std::ofstream(dir + "/t.yaml") << text;
  return dir + "/t.yaml";
}

TEST(TrainConfig, ValuesAndDefaults) {
  const auto dir = testing::fresh_dir("train_config");
  std::filesystem::create_directories(dir + "/imgs/a");
  const auto path = write(dir, "model: " + kData + "/vit_train_micro.yaml\n" +
                                   "model_set: [architecture.depth=1]\n"
                                   "data: {kind: image_folder, train: imgs}\n"
                                   "optimizer:\n"
                                   "  lr: 0.01\n"
                                   "  betas: [0.9, 0.95]\n"
                                   "  rules:\n"
                                   "    - {pattern: '.*qkv\\.weight', slices: [{lr: 1.0e-4}, "
                                   "{lr: 1.0e-4}, {lr: 2.0e-4, weight_decay: 0.01}]}\n"
                                   "    - {pattern: '.*proj\\.weight', lr: 5.0e-5}\n"
                                   "train: {steps: 100, batch_size: 16, accumulation: 2}\n");
  const auto c = load_train_config(path, {"train.seed=9"});
  EXPECT_EQ(c.model.name, "vit_train_micro");
  EXPECT_EQ(c.model.options<ViTOptions>().depth(), 1);
  EXPECT_EQ(c.data.train, dir + "/imgs");
  EXPECT_EQ(c.data.workers, 2);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.01);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  ASSERT_EQ(c.optimizer.rules.size(), 2u);
  ASSERT_EQ(c.optimizer.rules[0].slices.size(), 3u);
  EXPECT_DOUBLE_EQ(*c.optimizer.rules[0].slices[2].weight_decay, 0.01);
  EXPECT_FALSE(c.optimizer.rules[0].slices[0].weight_decay.has_value());
  EXPECT_DOUBLE_EQ(*c.optimizer.rules[1].lr, 5e-5);
  EXPECT_EQ(c.train.steps, 100);
  EXPECT_EQ(c.train.accumulation, 2);
  EXPECT_EQ(c.train.seed, 9);
  EXPECT_EQ(c.train.output, "runs/vit_train_micro");
  EXPECT_TRUE(c.augment.random_resized_crop);
  EXPECT_DOUBLE_EQ(c.augment.hflip, 0.5);
  EXPECT_DOUBLE_EQ(c.augment.affine_degrees, 0.0);
  EXPECT_DOUBLE_EQ(c.augment.elastic_alpha, 0.0);
  EXPECT_DOUBLE_EQ(c.train.ema_decay, 0.0);  // no weight average unless asked
  EXPECT_EQ(c.train.ema_warmup, 10);
  const auto averaged = load_train_config(path, {"train.ema_decay=0.999", "train.ema_warmup=0"});
  EXPECT_DOUBLE_EQ(averaged.train.ema_decay, 0.999);
  EXPECT_EQ(averaged.train.ema_warmup, 0);
}

TEST(TrainConfig, TheShippedRunsLoad) {
  // configs/train/: the runs that trained the shipped models. Their data sets are made by
  // tools/data/ and need not exist here: the lists are pointed at an existing file (only their
  // existence is checked when the config is read).
  for (const std::string name : {"vit_digits", "conformer_kws"}) {
    const std::string path = std::string(ATTNZOO_CONFIGS_SOURCE_DIR) + "/train/" + name + ".yaml";
    const auto c = load_train_config(path, {"data.train=" + path, "data.val=" + path});
    EXPECT_EQ(c.model.name, name);
    EXPECT_EQ(c.train.seed, 0);
    if (name == "vit_digits") {
      EXPECT_EQ(c.data.kind, "image_list");
      EXPECT_DOUBLE_EQ(c.augment.affine_degrees, 15.0);
      EXPECT_EQ(c.augment.affine_scale, (std::array<double, 2>{0.85, 1.15}));
      EXPECT_DOUBLE_EQ(c.augment.elastic_alpha, 50.0);
      EXPECT_DOUBLE_EQ(c.augment.elastic_p, 0.7);
      EXPECT_DOUBLE_EQ(c.augment.hflip, 0.0);    // digits are not mirror-symmetric
      EXPECT_DOUBLE_EQ(c.train.ema_decay, 0.0);  // the shipped weights are the last ones
      EXPECT_EQ(c.model.options<ViTOptions>().img_size(), 32);
    } else {
      EXPECT_EQ(c.data.kind, "audio_list");
      EXPECT_TRUE(c.augment.spec_augment);
      EXPECT_EQ(c.data.classes.size(), 12u);
    }
  }
}

TEST(TrainConfig, ErrorsNameTheKeyAndPlace) {
  const auto dir = testing::fresh_dir("train_config_errors");
  std::filesystem::create_directories(dir + "/imgs/a");
  const std::string head = "model: " + kData + "/vit_train_micro.yaml\n";
  const auto check = [&](const std::string& body, const std::string& expected,
                         const std::vector<std::string>& overrides = {}) {
    const auto path = write(dir, head + body);
    EXPECT_THAT(error_of([&] { load_train_config(path, overrides); }), HasSubstr(expected)) << body;
  };
  check("data: {kind: image_folder, train: imgs}\ntrain: {epoch: 3}\n",
        "t.yaml:3:9: train.epoch: unknown key 'epoch'");
  check("data: {kind: image_folder, train: nothere}\n",
        "data.train: '" + dir + "/nothere' is not a folder");
  check("data: {kind: audio_list, train: t.yaml}\n",
        "data: data kind audio_list does not fit a vit model");
  check("data: {kind: image_folder, train: imgs}\noptimizer: {rules: [{pattern: '(('}]}\n",
        "optimizer.rules[0].pattern: not a regular expression");
  check("data: {kind: image_folder, train: imgs}\ntrain: {precision: bf16}\n",
        "train.precision: bf16 autocast is for CUDA");
  check("data: {kind: image_folder, train: imgs}\ntrain: {device: tpu}\n",
        "train.device: expected cpu, cuda or cuda:N, got 'tpu'");
  check("data: {kind: image_folder, train: imgs}\n", "override 'train.batch_size=0'",
        {"train.batch_size=0"});
  check("data: {kind: image_folder, train: imgs}\n", "model: ", {"model=no_such_model"});
  check("train: {}\n", "data");
  check("data: {kind: image_folder, train: imgs}\naugment: {affine_scale: [1.2, 1.1]}\n",
        "augment.affine_scale: expected low <= high");
  check("data: {kind: image_folder, train: imgs}\naugment: {elastic_p: 2}\n", "augment.elastic_p");
  check("data: {kind: image_folder, train: imgs}\naugment: {affine_degrees: -5}\n",
        "augment.affine_degrees");
  check("data: {kind: image_folder, train: imgs}\ntrain: {ema_decay: 1.0}\n",
        "train.ema_decay: expected a value below 1");
  check("data: {kind: image_folder, train: imgs}\ntrain: {ema_decay: -0.5}\n", "train.ema_decay");
  EXPECT_THAT(error_of([&] { load_train_config(dir + "/missing.yaml"); }),
              HasSubstr("missing.yaml: no such training config"));
}

}  // namespace
}  // namespace attnzoo
