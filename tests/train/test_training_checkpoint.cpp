// The training checkpoint: saved then restored into fresh parts, it gives back the same tensors
// (model, optimiser moments, weight average), the step, the average's update count and the CPU
// generator's state; restoring a missing, malformed, foreign or mismatched file throws a
// CheckpointError that starts with the file's name.
#include "trainer_test_util.h"

#include <attnzoo/io/safetensors.h>
#include <attnzoo/train/training_checkpoint.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <memory>
#include <string>

namespace attnzoo {
namespace test_training_checkpoint {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t hidden = 4) {
    fc1 = register_module("fc1", torch::nn::Linear(3, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 2));
    steps = register_buffer("steps", torch::zeros({1}, torch::kLong));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::Tensor steps;
};
TORCH_MODULE(Net);

// A model, its optimiser and (optionally) its average, trained a few steps from `seed`.
struct Training {
  Net model, copy;
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<WeightAverage> average;

  Training(uint64_t seed, int steps, bool with_average, int64_t hidden = 4)
      : model(hidden), copy(hidden) {
    torch::manual_seed(seed);
    for (auto& p : model->parameters()) p.data().normal_();
    optimizer = std::make_unique<AdamW>(model->named_parameters(), AdamWOptions{});
    if (with_average)
      average = std::make_unique<WeightAverage>(*model, *copy, WeightAverageOptions{0.5, 2});
    for (int i = 0; i < steps; ++i) {
      optimizer->zero_grad();
      model->forward(torch::randn({5, 3})).pow(2).mean().backward();
      optimizer->step();
      model->steps += 1;
      if (average) average->update();
    }
  }
  TrainingParts parts() { return {model.get(), optimizer.get(), average.get()}; }
};

void expect_same(const io::TensorDict& a, const io::TensorDict& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& item : a) {
    const auto* other = b.find(item.key());
    ASSERT_TRUE(other) << what << ": " << item.key();
    EXPECT_TRUE(torch::equal(item.value().cpu(), other->cpu())) << what << ": " << item.key();
  }
}

const TrainingCheckpointInfo kInfo = {"net", 3, 10, "configs/train/net.yaml", {"a", "b"}};

TEST(TrainingCheckpoint, RestoreGivesBackWhatWasSaved) {
  const auto path = testing::fresh_dir("ckpt_round_trip") + "/checkpoint.safetensors";
  Training saved(1, 3, true);
  save_training_checkpoint(path, saved.parts(), kInfo);
  const auto after_save = torch::rand({8});  // the generator's next numbers after the save

  Training fresh(2, 0, true);
  EXPECT_EQ(restore_training_checkpoint(path, fresh.parts(), "net", 10), 3);
  EXPECT_TRUE(torch::equal(torch::rand({8}), after_save));
  expect_same(state_dict(*saved.model), state_dict(*fresh.model), "model");
  expect_same(saved.optimizer->state_dict(), fresh.optimizer->state_dict(), "optimizer");
  expect_same(saved.average->state_dict(), fresh.average->state_dict(), "average");
  EXPECT_EQ(fresh.average->updates(), 3);
  EXPECT_EQ(fresh.optimizer->steps(), 3);

  // The file's layout and metadata.
  const auto file = io::load_safetensors(path);
  EXPECT_EQ(file.metadata.at("model"), "net");
  EXPECT_EQ(file.metadata.at("step"), "3");
  EXPECT_EQ(file.metadata.at("total_steps"), "10");
  EXPECT_EQ(file.metadata.at("config"), "configs/train/net.yaml");
  EXPECT_EQ(file.metadata.at("ema_updates"), "3");
  EXPECT_EQ(file.metadata.at("classes"), R"(["a","b"])");
  EXPECT_TRUE(file.tensors.contains("model.fc1.weight"));
  EXPECT_TRUE(file.tensors.contains("model.steps"));
  EXPECT_TRUE(file.tensors.contains("optimizer.step"));
  EXPECT_TRUE(file.tensors.contains("ema.fc2.bias"));
  EXPECT_TRUE(file.tensors.contains("rng.cpu"));

  // Both continue alike.
  for (auto* run : {&saved, &fresh}) {
    torch::manual_seed(9);
    run->optimizer->zero_grad();
    run->model->forward(torch::randn({5, 3})).sum().backward();
    run->optimizer->step();
    run->average->update();
  }
  expect_same(state_dict(*saved.model), state_dict(*fresh.model), "model after a step");
  expect_same(saved.average->state_dict(), fresh.average->state_dict(), "average after a step");
}

TEST(TrainingCheckpoint, WithoutAnAverage) {
  const auto path = testing::fresh_dir("ckpt_plain") + "/checkpoint.safetensors";
  Training saved(3, 2, false);
  save_training_checkpoint(path, saved.parts(), {"net", 2, 10, "net.yaml", {}});
  const auto file = io::load_safetensors(path);
  EXPECT_EQ(file.metadata.at("ema_updates"), "0");
  for (const auto& item : file.tensors) EXPECT_THAT(item.key(), ::testing::Not(StartsWith("ema.")));
  Training fresh(4, 0, false);
  EXPECT_EQ(restore_training_checkpoint(path, fresh.parts(), "net", 2), 2);
  expect_same(state_dict(*saved.model), state_dict(*fresh.model), "model");
  // A run that keeps an average cannot continue it.
  Training averaged(5, 0, true);
  try {
    restore_training_checkpoint(path, averaged.parts(), "net", 10);
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), StartsWith(path + ": no ema.* tensors"));
    EXPECT_THAT(e.what(), HasSubstr("train.ema_decay"));
  }
}

// The message of the CheckpointError that restoring `path` into a fresh run throws.
std::string restore_error(const std::string& path, const std::string& model = "net",
                          int64_t total_steps = 10, int64_t hidden = 4) {
  Training run(7, 0, true, hidden);
  try {
    restore_training_checkpoint(path, run.parts(), model, total_steps);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "(no CheckpointError)";
}

TEST(TrainingCheckpoint, RestoreRefusesWhatDoesNotFit) {
  const auto dir = testing::fresh_dir("ckpt_errors");
  const auto good = dir + "/checkpoint.safetensors";
  Training saved(1, 3, true);
  save_training_checkpoint(good, saved.parts(), kInfo);

  EXPECT_THAT(restore_error(dir + "/missing.safetensors"),
              StartsWith(dir + "/missing.safetensors"));
  std::ofstream(dir + "/text.safetensors") << "not a checkpoint";
  EXPECT_THAT(restore_error(dir + "/text.safetensors"), StartsWith(dir + "/text.safetensors"));

  // The weights alone (as model.safetensors holds them): not a training checkpoint.
  io::save_safetensors(dir + "/weights.safetensors", state_dict(*saved.model));
  EXPECT_EQ(restore_error(dir + "/weights.safetensors"),
            dir + "/weights.safetensors: not a training checkpoint (no 'model' in its metadata)");

  EXPECT_EQ(restore_error(good, "other"),
            good + ": a checkpoint of model 'net', the config trains 'other'");
  EXPECT_THAT(restore_error(good, "net", 10, /*hidden=*/5),
              ::testing::AllOf(StartsWith(good + ": the weights do not fit the model"),
                               HasSubstr("fc1.weight")));
  EXPECT_EQ(restore_error(good, "net", 2), good + ": at step 3, past this run's 2 steps");

  // Edited copies of the good file: without the generator, with a step that is not a number,
  // with the optimiser's state of another model.
  const auto file = io::load_safetensors(good);
  const auto edited = [&](const std::string& name, auto&& edit) {
    io::TensorDict tensors;
    for (const auto& item : file.tensors) tensors.insert(item.key(), item.value());
    auto metadata = file.metadata;
    edit(tensors, metadata);
    const auto path = dir + "/" + name;
    io::save_safetensors(path, tensors, metadata);
    return path;
  };
  const auto no_rng =
      edited("no_rng.safetensors", [](io::TensorDict& t, auto&) { t.erase("rng.cpu"); });
  EXPECT_EQ(restore_error(no_rng), no_rng + ": no rng.cpu state");
  const auto bad_step =
      edited("bad_step.safetensors",
             [](auto&, std::map<std::string, std::string>& m) { m["step"] = "three"; });
  EXPECT_THAT(restore_error(bad_step), StartsWith(bad_step + ": "));
  EXPECT_THAT(restore_error(bad_step), HasSubstr("'three'"));
  const auto bad_moments = edited("bad_moments.safetensors", [](io::TensorDict& t, auto&) {
    t.erase("optimizer.exp_avg.fc1.weight");
  });
  EXPECT_THAT(restore_error(bad_moments), StartsWith(bad_moments + " (optimizer.*): "));
}

}  // namespace test_training_checkpoint
}  // namespace attnzoo
