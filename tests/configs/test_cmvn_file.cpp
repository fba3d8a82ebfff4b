// `checkpoint.cmvn_file`: CMVN statistics (io/cmvn_stats.h) beside a speech checkpoint. They are
// the built model's global CMVN, they stand where the checkpoint has none, and a checkpoint's own
// replace them (with a note when they differ), as WeNet and ESPnet load them. WeNet experiment
// folders name their global_cmvn so. Models without global CMVN refuse the key.
#include <attnzoo/configs/model_source.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/io/cmvn_stats.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/io/weights_file.h>
#include <attnzoo/models/checkpoint.h>
#include <attnzoo/models/conformer.h>
#include "common/test_util.h"
#include "config_test_util.h"

#include <torch/torch.h>

#include <filesystem>

namespace attnzoo {
namespace test_cmvn_file {

using testing::error_of;
using ::testing::HasSubstr;
using testing::Scratch;
using testing::write_file;

const std::string kWenetU2 = std::string(ATTNZOO_MODELS_DATA_DIR) + "/wenet_u2/u2";

std::string conformer_yaml(const std::string& extra) {
  return R"(name: cmvn_test
family: conformer
architecture:
  input_dim: 20
  encoder_dim: 16
  num_layers: 1
  num_heads: 4
  ffn_dim: 16
  depthwise_conv_kernel_size: 3
  global_cmvn: true
  vocab_size: 5
)" + extra;
}

ConformerEncoderImpl& encoder_of(ZooModel& model) {
  return *model.module->as<ConformerEncoderImpl>();
}

torch::Tensor as_float(const std::vector<double>& values) {
  return torch::tensor(values, torch::kDouble).to(torch::kFloat);
}

TEST(CmvnFile, BuildsTheModelWithTheStatistics) {
  Scratch scratch;
  const auto yaml = scratch.path("model.yaml");
  write_file(yaml, conformer_yaml("checkpoint:\n  cmvn_file: " + kWenetU2 + "/global_cmvn\n"));
  auto model = build_model(model_config_from_yaml(yaml));
  const auto stats = io::load_cmvn_stats(kWenetU2 + "/global_cmvn");
  EXPECT_TRUE(torch::equal(encoder_of(model).global_cmvn->mean, as_float(stats.mean)));
  EXPECT_TRUE(torch::equal(encoder_of(model).global_cmvn->istd, as_float(stats.istd)));

  // A checkpoint without statistics leaves the file's; one with other statistics replaces them,
  // with a note naming the file.
  auto tensors = state_dict(*model.module);
  io::TensorDict without;
  for (const auto& item : tensors) {
    if (item.key().rfind("global_cmvn.", 0) != 0) without.insert(item.key(), item.value());
  }
  io::save_safetensors(scratch.path("without.safetensors"), without);
  auto fresh = build_model(model_config_from_yaml(yaml));
  const auto loaded = load_weights(fresh, scratch.path("without.safetensors"));
  EXPECT_TRUE(loaded.notes.empty());
  EXPECT_TRUE(torch::equal(encoder_of(fresh).global_cmvn->mean, as_float(stats.mean)));

  tensors["global_cmvn.mean"] = tensors["global_cmvn.mean"] + 0.5;
  io::save_safetensors(scratch.path("other.safetensors"), tensors);
  auto other = build_model(model_config_from_yaml(yaml));
  const auto replaced = load_weights(other, scratch.path("other.safetensors"));
  EXPECT_TRUE(torch::equal(encoder_of(other).global_cmvn->mean, tensors["global_cmvn.mean"]));
  ASSERT_EQ(replaced.notes.size(), 1u);
  EXPECT_THAT(replaced.notes[0], HasSubstr("differs from " + kWenetU2 + "/global_cmvn"));
}

TEST(CmvnFile, RefusedWhereItCannotApply) {
  Scratch scratch;
  const auto bad = [&](const std::string& yaml) {
    write_file(scratch.path("bad.yaml"), yaml);
    return error_of<Error>(
        [&] { (void)build_model(model_config_from_yaml(scratch.path("bad.yaml"))); });
  };
  EXPECT_THAT(
      bad(testing::with(conformer_yaml("checkpoint:\n  cmvn_file: " + kWenetU2 + "/global_cmvn\n"),
                        "global_cmvn: true", "global_cmvn: false")),
      HasSubstr("checkpoint.cmvn_file: this model has no global CMVN"));
  EXPECT_THAT(bad(conformer_yaml("checkpoint:\n  cmvn_file: missing_stats\n")),
              HasSubstr("missing_stats' is not a file"));
  // The shipped statistics are of 20 features; a model of 30 cannot take them.
  const auto wide =
      testing::with(conformer_yaml("checkpoint:\n  cmvn_file: " + kWenetU2 + "/global_cmvn\n"),
                    "input_dim: 20", "input_dim: 30");
  EXPECT_THAT(bad(wide), HasSubstr("global_cmvn: CMVN statistics of 20 features; the model takes "
                                   "30 (architecture.input_dim)"));
  EXPECT_THAT(
      bad(std::string(testing::kTinyConfig) + "  cmvn_file: " + kWenetU2 + "/global_cmvn\n"),
      HasSubstr("this model has no global CMVN to take statistics (family vit"));
}

TEST(CmvnFile, WenetFolderNamesItsGlobalCmvn) {
  const auto config = load_model_source(kWenetU2);
  EXPECT_EQ(config.cmvn_file,
            std::filesystem::absolute(kWenetU2 + "/global_cmvn").lexically_normal().string());
  // final.pt's statistics are those of the file (WeNet made them from it): no note.
  auto model = build_model(config);
  const auto loaded = load_weights(model, config.checkpoint_file);
  EXPECT_TRUE(loaded.notes.empty());
}

}  // namespace test_cmvn_file
}  // namespace attnzoo
