// The training YAML: defaults, values, and errors that name the file, the key, the line and the
// column (or the override).
#include "common/test_util.h"
#include "trainer_test_util.h"

#include <attnzoo/configs/model_config.h>
#include <attnzoo/configs/train_config.h>
#include <attnzoo/models/vit.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace attnzoo {
namespace test_train_config {
using testing::error_of;

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
  EXPECT_EQ(c.train.loss, TrainLoss::kCrossEntropy);
  EXPECT_EQ(c.train.dynamic_chunk, 0);  // no dynamic chunks unless asked
  EXPECT_DOUBLE_EQ(c.train.full_context_prob, 0.5);
  EXPECT_FALSE(c.train.dynamic_left_chunks);
  const auto averaged = load_train_config(path, {"train.ema_decay=0.999", "train.ema_warmup=0"});
  EXPECT_DOUBLE_EQ(averaged.train.ema_decay, 0.999);
  EXPECT_EQ(averaged.train.ema_warmup, 0);
}

TEST(TrainConfig, TheShippedRunsLoad) {
  // configs/train/: the runs that trained the shipped models. Their data sets are made by
  // tools/data/ and need not exist here: the lists are pointed at an existing file (only their
  // existence is checked when the config is read).
  for (const std::string name : {"vit_digits", "conformer_kws", "conformer_digits_ctc"}) {
    const std::string path = std::string(ATTNZOO_CONFIGS_SOURCE_DIR) + "/train/" + name + ".yaml";
    const auto c = load_train_config(path, {"data.train=" + path, "data.val=" + path});
    EXPECT_EQ(c.model.name, name);
    EXPECT_EQ(c.train.seed, 0);
    if (name == "vit_digits") {
      EXPECT_EQ(c.data.kind, TrainDataKind::kImageList);
      EXPECT_DOUBLE_EQ(c.augment.affine_degrees, 15.0);
      EXPECT_EQ(c.augment.affine_scale, (std::array<double, 2>{0.85, 1.15}));
      EXPECT_DOUBLE_EQ(c.augment.elastic_alpha, 50.0);
      EXPECT_DOUBLE_EQ(c.augment.elastic_p, 0.7);
      EXPECT_DOUBLE_EQ(c.augment.hflip, 0.0);    // digits are not mirror-symmetric
      EXPECT_DOUBLE_EQ(c.train.ema_decay, 0.0);  // the shipped weights are the last ones
      EXPECT_EQ(c.model.options<ViTOptions>().img_size(), 32);
    } else if (name == "conformer_kws") {
      EXPECT_EQ(c.data.kind, TrainDataKind::kAudioList);
      EXPECT_TRUE(c.augment.spec_augment);
      EXPECT_EQ(c.data.classes.size(), 12u);
      EXPECT_EQ(c.train.loss, TrainLoss::kCrossEntropy);
    } else {
      // The speech recognizer: CTC over its word units, with dynamic chunks so that it streams.
      EXPECT_EQ(c.data.kind, TrainDataKind::kAudioList);
      EXPECT_EQ(c.train.loss, TrainLoss::kCtc);
      EXPECT_EQ(c.train.dynamic_chunk, 25);
      EXPECT_DOUBLE_EQ(c.train.full_context_prob, 0.5);
      EXPECT_FALSE(c.train.dynamic_left_chunks);
      EXPECT_TRUE(c.data.classes.empty());
      EXPECT_DOUBLE_EQ(c.train.label_smoothing, 0.0);
      EXPECT_TRUE(c.model.decoding.defined());
      EXPECT_EQ(c.model.decoding.text, decoding::TextJoin::kWords);
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

// A small Conformer with a CTC head over 6 word units: with or without the decoding section
// (the units train.loss ctc tokenizes with) and the causal convolution (streaming needs it).
// decoder: architecture.decoder's flow map, or empty for none.
std::string write_ctc_model(const std::string& dir, const std::string& name, bool decoding,
                            bool causal, const std::string& decoder = "") {
  std::ofstream(dir + "/units.txt") << "<blank> 0\n<unk> 1\nhigh 2\nlow 3\nmid 4\n<sos/eos> 5\n";
  const auto path = dir + "/" + name + ".yaml";
  std::ofstream out(path);
  out << "name: " << name << "\n"
      << "family: conformer\n"
      << "architecture: {input_dim: 20, encoder_dim: 16, num_layers: 1, num_heads: 2, ffn_dim: 32, "
      << "depthwise_conv_kernel_size: 5, subsampling: conv2d4, position: rel_pos_wenet, "
      << "vocab_size: 6, causal_conv: " << (causal ? "true" : "false")
      << (decoder.empty() ? "" : ", decoder: " + decoder) << "}\n"
      << "features: {kind: fbank, num_mel_bins: 20}\n";
  if (decoding) out << "decoding: {units: units.txt, text: words}\n";
  return path;
}

TEST(TrainConfig, CtcObjective) {
  const auto dir = testing::fresh_dir("train_config_ctc");
  const auto model = write_ctc_model(dir, "ctc_micro", true, true);
  const auto path = write(dir,
                          "model: ctc_micro.yaml\n"
                          "data: {kind: audio_list, train: ctc_micro.yaml}\n"
                          "train: {loss: ctc, dynamic_chunk: 8, full_context_prob: 0.25, "
                          "dynamic_left_chunks: true}\n");
  const auto c = load_train_config(path);
  EXPECT_EQ(c.model.name, "ctc_micro");
  EXPECT_EQ(c.train.loss, TrainLoss::kCtc);
  EXPECT_EQ(c.train.dynamic_chunk, 8);
  EXPECT_DOUBLE_EQ(c.train.full_context_prob, 0.25);
  EXPECT_TRUE(c.train.dynamic_left_chunks);
  EXPECT_EQ(c.model.decoding.units, dir + "/units.txt");
  EXPECT_DOUBLE_EQ(c.train.ctc_weight, 1.0);  // CTC alone unless said
  EXPECT_DOUBLE_EQ(c.train.reverse_weight, 0.0);
  write_ctc_model(dir, "ctc_u2pp", true, true,
                  "{kind: bitransformer, num_heads: 2, ffn_dim: 32, num_blocks: 1, "
                  "right_blocks: 1}");
  std::ofstream(dir + "/joint.yaml")
      << "model: ctc_u2pp.yaml\ndata: {kind: audio_list, train: ctc_micro.yaml}\n"
         "train: {loss: ctc, ctc_weight: 0.3, reverse_weight: 0.4, label_smoothing: 0.1}\n";
  const auto joint = load_train_config(dir + "/joint.yaml");
  EXPECT_DOUBLE_EQ(joint.train.ctc_weight, 0.3);
  EXPECT_DOUBLE_EQ(joint.train.reverse_weight, 0.4);
  EXPECT_DOUBLE_EQ(joint.train.label_smoothing, 0.1);
  // Dynamic chunks leave the model's own streaming section alone (offline unless it says).
  EXPECT_EQ(c.model.streaming.chunk_size, 0);
  const auto overridden = load_train_config(
      path,
      {"train.dynamic_chunk=0", "train.full_context_prob=1", "train.dynamic_left_chunks=false"});
  EXPECT_EQ(overridden.train.dynamic_chunk, 0);
  EXPECT_DOUBLE_EQ(overridden.train.full_context_prob, 1.0);
  EXPECT_FALSE(overridden.train.dynamic_left_chunks);
  // A model made causal by model_set can stream, so it can train with dynamic chunks.
  write_ctc_model(dir, "ctc_offline", true, false);
  const auto made_causal =
      write(dir,
            "model: ctc_offline.yaml\nmodel_set: [architecture.causal_conv=true]\n"
            "data: {kind: audio_list, train: ctc_micro.yaml}\n"
            "train: {loss: ctc, dynamic_chunk: 4}\n");
  EXPECT_EQ(load_train_config(made_causal).train.dynamic_chunk, 4);
}

// Every refusal of train.loss and train.dynamic_chunk: a ConfigError at the key that asks for
// what the model or the data cannot give, its message saying why.
TEST(TrainConfig, CtcObjectiveRefusalsNameTheirKey) {
  const auto dir = testing::fresh_dir("train_config_ctc_errors");
  write_ctc_model(dir, "ctc_micro", true, true);
  write_ctc_model(dir, "ctc_no_units", false, true);
  write_ctc_model(dir, "ctc_offline", true, false);
  const std::string audio = "data: {kind: audio_list, train: ctc_micro.yaml}\n";
  const std::string vit = "model: " + kData + "/vit_train_micro.yaml\n";
  const std::string vit_data = "data: {kind: image_folder, train: imgs}\n";
  std::filesystem::create_directories(dir + "/imgs/a");
  const auto refused = [&](const std::string& text, const std::string& key, const std::string& what,
                           const std::vector<std::string>& overrides = {}) {
    const auto path = write(dir, text);
    try {
      load_train_config(path, overrides);
      ADD_FAILURE() << "accepted:\n" << text;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.key_path(), key) << text << e.what();
      EXPECT_THAT(e.what(), HasSubstr(what)) << text;
      EXPECT_THAT(e.what(), HasSubstr("t.yaml")) << text;
    }
  };
  // train.loss ctc on a model without a CTC head (a classifier).
  refused(vit + vit_data + "train: {loss: ctc}\n", "train.loss",
          "ctc needs a model with a CTC head; vit_train_micro has none (architecture.vocab_size "
          "is 0)");
  refused("model: " + kData + "/conformer_train_micro.yaml\n" + audio + "train: {loss: ctc}\n",
          "train.loss", "ctc needs a model with a CTC head; conformer_train_micro has none");
  // ... on a CTC head without a token table to tokenize the transcripts with.
  refused("model: ctc_no_units.yaml\n" + audio + "train: {loss: ctc}\n", "train.loss",
          "ctc_no_units.yaml has no decoding.units");
  // ... with a classifier's settings.
  refused(
      "model: ctc_micro.yaml\ndata: {kind: audio_list, train: ctc_micro.yaml, classes: [a, b]}\n"
      "train: {loss: ctc}\n",
      "data", "data.classes name the classes of a classifier");
  refused("model: ctc_micro.yaml\n" + audio + "train: {loss: ctc, label_smoothing: 0.1}\n",
          "train.label_smoothing", "label smoothing is for train.loss cross_entropy");
  // init_new without the weights it qualifies, with weights in another layout, or empty names.
  refused("model: ctc_micro.yaml\n" + audio + "init_new: [decoder.]\ntrain: {loss: ctc}\n",
          "init_new", "names what init_weights may lack; give init_weights");
  refused("model: ctc_micro.yaml\n" + audio +
              "init_weights: ctc_micro.yaml\ninit_format: wenet\ninit_new: [decoder.]\n"
              "train: {loss: ctc}\n",
          "init_new", "needs init_weights in attnzoo's layout (init_format: attnzoo), not wenet");
  refused("model: ctc_micro.yaml\n" + audio +
              "init_weights: ctc_micro.yaml\ninit_new: ['']\ntrain: {loss: ctc}\n",
          "init_new[0]", "expected a non-empty string");
  // Joint CTC/attention training without the decoders it trains, or with its settings alone.
  write_ctc_model(dir, "ctc_u2", true, true,
                  "{kind: transformer, num_heads: 2, ffn_dim: 32, num_blocks: 1}");
  refused("model: ctc_micro.yaml\n" + audio + "train: {loss: ctc, ctc_weight: 0.3}\n",
          "train.ctc_weight",
          "a ctc_weight below 1 trains an attention decoder; " + dir +
              "/ctc_micro.yaml has none (architecture.decoder)");
  refused(
      "model: ctc_u2.yaml\n" + audio + "train: {loss: ctc, ctc_weight: 0.3, reverse_weight: 0.3}\n",
      "train.reverse_weight",
      "reverse_weight trains a right-to-left decoder; " + dir +
          "/ctc_u2.yaml's decoder has none (architecture.decoder.kind: bitransformer)");
  refused("model: ctc_u2.yaml\n" + audio + "train: {loss: ctc, reverse_weight: 0.3}\n",
          "train.reverse_weight", "the right-to-left decoder learns with train.ctc_weight < 1");
  refused("model: ctc_u2.yaml\n" + audio + "train: {loss: ctc, label_smoothing: 0.1}\n",
          "train.label_smoothing", "or for an attention decoder (train.ctc_weight < 1)");
  refused(vit + vit_data + "train: {ctc_weight: 0.5}\n", "train.ctc_weight",
          "joint CTC/attention training is for train.loss ctc");
  refused("model: ctc_u2.yaml\n" + audio + "train: {loss: ctc, ctc_weight: 1.5}\n",
          "train.ctc_weight", "");
  // cross_entropy (said, or the default) on a model with a CTC head and no classifier.
  refused("model: ctc_micro.yaml\n" + audio + "train: {loss: cross_entropy}\n", "train.loss",
          "cross_entropy needs a model with a classification head; ctc_micro has none");
  refused("model: ctc_micro.yaml\n" + audio + "train: {epochs: 2}\n", "train.loss",
          "cross_entropy needs a model with a classification head");
  refused("model: ctc_micro.yaml\n" + audio, "train.loss",
          "cross_entropy needs a model with a classification head");
  // Not a loss.
  refused("model: ctc_micro.yaml\n" + audio + "train: {loss: mse}\n", "train.loss", "mse");
  // Dynamic chunks on models that cannot stream: a centred convolution (in the YAML or made so by
  // model_set), a ViT.
  refused("model: ctc_offline.yaml\n" + audio + "train: {loss: ctc, dynamic_chunk: 4}\n",
          "train.dynamic_chunk", "dynamic chunks train a model to stream");
  refused("model: ctc_offline.yaml\n" + audio + "train: {loss: ctc, dynamic_chunk: 4}\n",
          "train.dynamic_chunk", "causal_conv");
  refused("model: ctc_micro.yaml\nmodel_set: [architecture.causal_conv=false]\n" + audio +
              "train: {loss: ctc, dynamic_chunk: 4}\n",
          "train.dynamic_chunk", "causal_conv");
  refused(
      "model: " + kData + "/conformer_train_micro.yaml\n" + audio + "train: {dynamic_chunk: 2}\n",
      "train.dynamic_chunk", "dynamic chunks train a model to stream");
  refused(vit + vit_data + "train: {dynamic_chunk: 2}\n", "train.dynamic_chunk",
          "dynamic chunks train a model to stream");
  // Out of range.
  refused("model: ctc_micro.yaml\n" + audio + "train: {loss: ctc, dynamic_chunk: -1}\n",
          "train.dynamic_chunk", "train.dynamic_chunk");
  refused("model: ctc_micro.yaml\n" + audio + "train: {loss: ctc, full_context_prob: 1.5}\n",
          "train.full_context_prob", "train.full_context_prob");
  refused("model: ctc_micro.yaml\n" + audio + "train: {loss: ctc, dynamic_left_chunks: 3}\n",
          "train.dynamic_left_chunks", "train.dynamic_left_chunks");
  // Set by an override: the message names the override.
  refused(vit + vit_data, "train.loss", "override 'train.loss=ctc'", {"train.loss=ctc"});
  refused("model: ctc_offline.yaml\n" + audio + "train: {loss: ctc}\n", "train.dynamic_chunk",
          "override 'train.dynamic_chunk=3'", {"train.dynamic_chunk=3"});
}

}  // namespace test_train_config
}  // namespace attnzoo
