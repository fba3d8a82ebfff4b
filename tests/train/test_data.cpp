// Datasets and the loader: folder and list parsing with their errors, epochs that visit every
// example once, the same batches whatever the number of workers or where a run resumes, and a
// worker's error reaching the consumer with the file's name.
#include "common/test_util.h"
#include "trainer_test_util.h"

#include <attnzoo/train/data.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace attnzoo {
namespace test_data {
using testing::error_of;

using ::testing::HasSubstr;

TEST(Data, ImageFolderClassesAndFiles) {
  const auto dir = testing::fresh_dir("folder");
  testing::write_stripes_folder(dir, 3, 1);
  std::ofstream(dir + "/vertical/.hidden") << "x";
  std::filesystem::create_directories(dir + "/.cache");
  const auto d = image_folder_dataset(dir);
  EXPECT_EQ(d.classes, (std::vector<std::string>{"diagonal", "horizontal", "vertical"}));
  ASSERT_EQ(d.examples.size(), 9u);
  EXPECT_EQ(d.examples[0].label, 0);
  EXPECT_THAT(d.examples[0].path, HasSubstr("diagonal/000.png"));
  EXPECT_EQ(d.examples[8].label, 2);
  // Given classes: their order, one without a folder allowed; an unknown folder is an error.
  const auto given = image_folder_dataset(dir, {"vertical", "horizontal", "diagonal", "spiral"});
  EXPECT_EQ(given.examples[0].label, 0);
  EXPECT_THAT(given.examples[0].path, HasSubstr("vertical/000.png"));
  EXPECT_THAT(error_of([&] {
                image_folder_dataset(dir, {"vertical", "horizontal"});
              }),
              HasSubstr("subfolder 'diagonal' is not one of the classes given"));
  EXPECT_THAT(error_of([&] { image_folder_dataset(dir + "/nope"); }),
              HasSubstr("nope: no such folder"));
  const auto empty = testing::fresh_dir("empty_folder");
  EXPECT_THAT(error_of([&] { image_folder_dataset(empty); }), HasSubstr("no class subfolders"));
}

TEST(Data, ListFilesWithCommentsAndErrors) {
  const auto dir = testing::fresh_dir("lists");
  std::ofstream(dir + "/list.txt") << "# a comment\n\na.wav yes\n  sub dir/b c.wav\tno  \n"
                                   << "/abs/c.wav yes\n";
  const auto d = list_dataset(dir + "/list.txt");
  EXPECT_EQ(d.classes, (std::vector<std::string>{"no", "yes"}));
  ASSERT_EQ(d.examples.size(), 3u);
  EXPECT_EQ(d.examples[0].path, dir + "/a.wav");
  EXPECT_EQ(d.examples[0].label, 1);
  EXPECT_EQ(d.examples[1].path, dir + "/sub dir/b c.wav");
  EXPECT_EQ(d.examples[1].label, 0);
  EXPECT_EQ(d.examples[2].path, "/abs/c.wav");
  std::ofstream(dir + "/bad.txt") << "a.wav yes\nlonely\n";
  EXPECT_THAT(error_of([&] { list_dataset(dir + "/bad.txt"); }),
              HasSubstr("bad.txt:2: expected 'PATH LABEL', got 'lonely'"));
  EXPECT_THAT(error_of([&] { list_dataset(dir + "/list.txt", {"yes"}); }),
              HasSubstr("label 'no' is not one of the classes given"));
  std::ofstream(dir + "/empty.txt") << "# nothing\n";
  EXPECT_THAT(error_of([&] { list_dataset(dir + "/empty.txt"); }), HasSubstr("no examples"));
  EXPECT_THAT(error_of([&] { list_dataset(dir + "/missing.txt"); }),
              HasSubstr("missing.txt: cannot open"));
}

// A dataset of 23 "examples" whose input is a random number from the example's generator and its
// index: what the loader hands out can be compared exactly.
LabelledDataset numbers(int n) {
  LabelledDataset d;
  d.classes = {"a", "b"};
  for (int i = 0; i < n; ++i) d.examples.push_back({"item" + std::to_string(i), i % 2});
  return d;
}

torch::Tensor draw(const LabelledExample& e, std::mt19937_64& rng) {
  return torch::tensor({static_cast<double>(rng() % 1000000), std::stod(e.path.substr(4))});
}

std::vector<torch::Tensor> epoch(const LabelledDataset& d, LoaderOptions o, int64_t e,
                                 int64_t start = 0) {
  EpochLoader loader(d, draw, o, e, start);
  std::vector<torch::Tensor> out;
  while (auto b = loader.next()) {
    EXPECT_TRUE(torch::equal(b->inputs.select(1, 1).to(torch::kLong), b->indices));
    EXPECT_TRUE(torch::equal(b->labels, b->indices % 2));
    out.push_back(b->inputs);
  }
  return out;
}

TEST(Data, EpochsAreReproducibleWhateverTheWorkers) {
  const auto d = numbers(23);
  LoaderOptions o;
  o.batch_size = 4;
  o.seed = 7;
  o.workers = 0;
  const auto reference = epoch(d, o, 3);
  ASSERT_EQ(reference.size(), 5u);  // drop_last: 23 / 4
  std::set<int64_t> seen;
  for (const auto& b : reference) {
    for (int64_t i = 0; i < b.size(0); ++i)
      seen.insert(static_cast<int64_t>(b[i][1].item<double>()));
  }
  EXPECT_EQ(seen.size(), 20u);  // no example twice
  for (const int64_t workers : {1, 3, 8}) {
    o.workers = workers;
    o.prefetch = workers == 8 ? 1 : 3;
    const auto got = epoch(d, o, 3);
    ASSERT_EQ(got.size(), reference.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], reference[i]));
  }
  // Resuming at batch 2 gives batches 2.. of the same epoch; another epoch another order.
  const auto resumed = epoch(d, o, 3, 2);
  ASSERT_EQ(resumed.size(), 3u);
  EXPECT_TRUE(torch::equal(resumed[0], reference[2]));
  EXPECT_FALSE(torch::equal(epoch(d, o, 4)[0], reference[0]));
  // Without shuffle nor drop_last: the dataset in order, the last batch short.
  o.shuffle = false;
  o.drop_last = false;
  const auto ordered = epoch(d, o, 0);
  ASSERT_EQ(ordered.size(), 6u);
  EXPECT_EQ(ordered.back().size(0), 3);
  EXPECT_EQ(ordered[1][0][1].item<double>(), 4.0);
  EXPECT_EQ(batches_per_epoch(23, 4, true), 5);
  EXPECT_EQ(batches_per_epoch(23, 4, false), 6);
}

TEST(Data, PaddedBatchesAndWorkerErrors) {
  LabelledDataset d;
  d.classes = {"x"};
  for (int i = 0; i < 6; ++i) d.examples.push_back({std::to_string(i + 1), 0});
  LoaderOptions o;
  o.batch_size = 3;
  o.shuffle = false;
  o.pad = true;
  o.workers = 2;
  // Example i is [i, 2] of the value i: padded to the batch's longest with zeros.
  const ExampleLoader ragged = [](const LabelledExample& e, std::mt19937_64&) {
    const int64_t n = std::stoll(e.path);
    return torch::full({n, 2}, static_cast<float>(n));
  };
  EpochLoader loader(d, ragged, o, 0);
  const auto first = loader.next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->inputs.sizes().vec(), (std::vector<int64_t>{3, 3, 2}));
  EXPECT_EQ(testing::values(first->lengths), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(first->inputs[0][1][0].item<float>(), 0.0f);
  EXPECT_EQ(first->inputs[1][1][0].item<float>(), 2.0f);
  // A failing example: its error comes out of next(), and the loader's destructor joins cleanly.
  const ExampleLoader failing = [](const LabelledExample& e, std::mt19937_64&) -> torch::Tensor {
    if (e.path == "5") throw std::runtime_error(e.path + ": not an image");
    return torch::zeros({1, 2});
  };
  EpochLoader bad(d, failing, o, 0);
  EXPECT_THAT(error_of([&] {
                while (bad.next()) {
                }
              }),
              HasSubstr("5: not an image"));
}

}  // namespace test_data
}  // namespace attnzoo
