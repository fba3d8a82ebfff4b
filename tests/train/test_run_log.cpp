// A run's append-only files (diagnostics.jsonl here; metrics.csv in test_metrics_writer.cpp): a
// resumed run keeps the complete lines up to its checkpoint's step, drops later ones and a torn
// last line, and appends after them.
#include "trainer_test_util.h"

#include <attnzoo/core/error.h>
#include <attnzoo/train/run_log.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/test_util.h"

#include <fstream>
#include <iterator>
#include <string>

namespace attnzoo {
namespace test_run_log {

using testing::read_file;

TEST(RunLog, DiagnosticsLineStep) {
  EXPECT_EQ(diagnostics_line_step(R"({"step": 12, "gradients": {}})"), 12);
  EXPECT_EQ(diagnostics_line_step(R"({"gradients": {}, "step": 3})"), 3);
  EXPECT_EQ(diagnostics_line_step(R"({"step": 12, "gradi)"), -1) << "torn";
  EXPECT_EQ(diagnostics_line_step(R"({"step": "12"})"), -1);
  EXPECT_EQ(diagnostics_line_step(R"({"step": 1.5})"), -1);
  EXPECT_EQ(diagnostics_line_step("[12]"), -1);
  EXPECT_EQ(diagnostics_line_step(""), -1);
}

TEST(RunLog, AResumedRunKeepsTheCompleteLinesUpToItsStep) {
  const auto path = testing::fresh_dir("run_log_resume") + "/diagnostics.jsonl";
  {
    RunLog log(path, 0, "", diagnostics_line_step);
    for (int step : {0, 2, 4, 6, 8}) log.append(R"({"step": )" + std::to_string(step) + "}");
  }
  // A run killed while writing step 10's line, after its checkpoint at step 4.
  std::ofstream(path, std::ios::app | std::ios::binary) << R"({"step": 10, "atten)";
  {
    RunLog log(path, 4, "", diagnostics_line_step);
    log.append(R"({"step": 6})");
  }
  EXPECT_EQ(read_file(path), "{\"step\": 0}\n{\"step\": 2}\n{\"step\": 4}\n{\"step\": 6}\n");
}

TEST(RunLog, AFileWithNothingToDropIsAppendedToAsItIs) {
  const auto path = testing::fresh_dir("run_log_append") + "/metrics.csv";
  std::ofstream(path, std::ios::binary) << "step\n1\n2\n";
  const auto step_of = [](const std::string& line) -> int64_t {
    return line == "step" ? -1 : std::stoll(line);
  };
  {
    RunLog log(path, 2, "step", step_of);
    log.append("3");
  }
  EXPECT_EQ(read_file(path), "step\n1\n2\n3\n");
  {
    RunLog fresh(path, 0, "step", step_of);  // a new run replaces the file
    fresh.append("1");
  }
  EXPECT_EQ(read_file(path), "step\n1\n");
}

TEST(RunLog, AnUnwritableFolderIsAnErrorNamingTheFile) {
  const auto path = testing::fresh_dir("run_log_missing") + "/no/such/diagnostics.jsonl";
  try {
    RunLog log(path, 0, "", diagnostics_line_step);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(path));
  }
}

}  // namespace test_run_log
}  // namespace attnzoo
