// metrics.csv: the header and one row per write, numbers to 8 significant digits and NaN as an
// empty cell; a resumed run continues the file with each step once, in order, without the rows a
// killed run wrote after its checkpoint or its torn last line.
#include "trainer_test_util.h"

#include <attnzoo/core/error.h>
#include <attnzoo/train/metrics_writer.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/test_util.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace attnzoo {
namespace test_metrics_writer {

using ::testing::HasSubstr;

using testing::read_file;

TrainMetrics row_at(int64_t step, bool evaluated = false) {
  TrainMetrics r;
  r.step = step;
  r.epoch = static_cast<double>(step) / 6.0;
  r.loss = 1.0 / static_cast<double>(step + 1);
  r.lr = 3e-3;
  r.grad_norm = 0.25;
  r.examples_per_second = 812.5;
  if (evaluated) {
    r.val_loss = 0.5;
    r.val_top1 = 0.75;
    r.val_top5 = 1.0;
  }
  return r;
}

// The steps of a file's rows, after checking its header and that every row is complete.
std::vector<int64_t> steps_of(const std::string& path) {
  const auto text = read_file(path);
  EXPECT_TRUE(text.empty() || text.back() == '\n');
  const auto rows = testing::csv_cells(text);
  std::vector<int64_t> steps;
  if (rows.empty()) return steps;
  EXPECT_EQ(rows[0].size(), 11u);
  EXPECT_EQ(text.substr(0, text.find('\n')), MetricsWriter::kHeader);
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].size(), 11u) << "row " << i;
    steps.push_back(std::stoll(rows[i][0]));
  }
  return steps;
}

TEST(Metrics, RowsAsWritten) {
  const auto path = testing::fresh_dir("metrics_rows") + "/metrics.csv";
  {
    MetricsWriter csv(path, 0);
    TrainMetrics r = row_at(6, true);
    r.loss = 0.123456789;
    r.epoch = 1.0;
    csv.write(r);
    // Flushed as written: readable while the writer is open.
    EXPECT_EQ(read_file(path), std::string(MetricsWriter::kHeader) +
                                   "\n6,1,0.12345679,0.003,0.25,812.5,0.5,0.75,1,,\n");
    csv.write(row_at(7));
    // A CTC model's evaluation: val_wer and val_cer, the classifier's columns empty.
    TrainMetrics ctc = row_at(8);
    ctc.val_loss = 2.5;
    ctc.val_wer = 0.125;
    ctc.val_cer = 1.0 / 3.0;
    csv.write(ctc);
  }
  const auto rows = testing::csv_cells(read_file(path));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"step", "epoch", "loss", "lr", "grad_norm",
                                               "examples_per_second", "val_loss", "val_top1",
                                               "val_top5", "val_wer", "val_cer"}));
  EXPECT_EQ(rows[2][0], "7");
  ASSERT_EQ(rows[2].size(), 11u);
  for (size_t i = 6; i < 11; ++i) EXPECT_EQ(rows[2][i], "") << i;  // no evaluation: empty cells
  EXPECT_NEAR(std::stod(rows[2][2]), 1.0 / 8.0, 1e-8);
  EXPECT_NEAR(std::stod(rows[2][1]), 7.0 / 6.0, 1e-7);
  EXPECT_EQ(rows[3], (std::vector<std::string>{"8", "1.3333333", "0.11111111", "0.003", "0.25",
                                               "812.5", "2.5", "", "", "0.125", "0.33333333"}));
  TrainMetrics blank;
  EXPECT_TRUE(std::isnan(blank.val_loss) && std::isnan(blank.val_top1) &&
              std::isnan(blank.val_top5) && std::isnan(blank.val_wer) && std::isnan(blank.val_cer));
}

TEST(Metrics, AFreshRunReplacesTheFile) {
  const auto path = testing::fresh_dir("metrics_fresh") + "/metrics.csv";
  std::ofstream(path) << "old,contents\n1,2\n";
  MetricsWriter(path, 0).write(row_at(1));
  EXPECT_EQ(steps_of(path), (std::vector<int64_t>{1}));
  // Resumed, but the file is gone: a new one with the header.
  const auto gone = testing::fresh_dir("metrics_gone") + "/metrics.csv";
  MetricsWriter(gone, 5).write(row_at(6));
  EXPECT_EQ(steps_of(gone), (std::vector<int64_t>{6}));
}

// Stopped at the checkpoint's step: the file is continued as it is, byte for byte.
TEST(Metrics, AResumedRunContinuesTheFile) {
  const auto path = testing::fresh_dir("metrics_resume") + "/metrics.csv";
  {
    MetricsWriter csv(path, 0);
    for (int64_t s = 1; s <= 5; ++s) csv.write(row_at(s, s == 3));
  }
  const auto before = read_file(path);
  {
    MetricsWriter csv(path, 5);
    for (int64_t s = 6; s <= 8; ++s) csv.write(row_at(s));
  }
  const auto after = read_file(path);
  EXPECT_EQ(after.substr(0, before.size()), before);
  EXPECT_EQ(steps_of(path), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

// A run resumed from a metrics.csv of the nine columns written before val_wer and val_cer: its
// rows up to the checkpoint are kept, given the two empty cells, under the current header; rows
// past the checkpoint and a torn line are dropped as for any resume.
TEST(Metrics, AResumedNineColumnFileKeepsItsRows) {
  const auto path = testing::fresh_dir("metrics_nine") + "/metrics.csv";
  std::ofstream(path, std::ios::binary)
      << "step,epoch,loss,lr,grad_norm,examples_per_second,val_loss,val_top1,val_top5\n"
      << "1,0.5,0.9,0.001,0.3,100,,,\n"
      << "2,1,0.8,0.002,0.2,100,0.7,0.6,1\n"
      << "3,1.5,0.7,0.002,0.2,100,,,\n"
      << "4,2,0.6,0.0";
  {
    MetricsWriter csv(path, 2);
    csv.write(row_at(3));
  }
  EXPECT_EQ(steps_of(path), (std::vector<int64_t>{1, 2, 3}));
  const auto rows = testing::csv_cells(read_file(path));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[2], (std::vector<std::string>{"2", "1", "0.8", "0.002", "0.2", "100", "0.7", "0.6",
                                               "1", "", ""}));
  EXPECT_EQ(testing::csv_cells(MetricsWriter::format(row_at(3))),
            (std::vector<std::vector<std::string>>{rows[3]}));
}

// Killed after writing rows 6 and 7 and half of row 8, with the checkpoint at step 5: resumed
// from it, the run writes 6, 7 and 8 again, and the file has each once, every row whole.
TEST(Metrics, AResumedRunHasNoDuplicatedOrTornRows) {
  const auto path = testing::fresh_dir("metrics_torn") + "/metrics.csv";
  {
    MetricsWriter csv(path, 0);
    for (int64_t s = 1; s <= 7; ++s) csv.write(row_at(s));
  }
  std::ofstream(path, std::ios::app) << "8,1.3333333,0.98765";
  {
    MetricsWriter csv(path, 5);
    for (int64_t s = 6; s <= 9; ++s) csv.write(row_at(s));
  }
  EXPECT_EQ(steps_of(path), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  const auto text = read_file(path);
  EXPECT_EQ(text.find("0.98765"), std::string::npos);
  const auto rows = testing::csv_cells(text);
  EXPECT_EQ(rows[6][0], "6");
  EXPECT_NEAR(std::stod(rows[6][2]), 1.0 / 7.0, 1e-8);
  // A file that lost its header (or everything) gets it back.
  std::ofstream(path, std::ios::trunc) << "1,0.1,0.5,0.003,0.2,800,,,,,\n";
  MetricsWriter(path, 1).write(row_at(2));
  EXPECT_EQ(steps_of(path), (std::vector<int64_t>{1, 2}));
}

TEST(Metrics, AnUnwritableFileIsNamed) {
  const auto dir = testing::fresh_dir("metrics_missing_dir");
  try {
    MetricsWriter(dir + "/no/such/folder/metrics.csv", 0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no/such/folder/metrics.csv"));
  }
}

}  // namespace test_metrics_writer
}  // namespace attnzoo
