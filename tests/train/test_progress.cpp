// Progress reporting: plain lines when not on a terminal, a bar redrawn in place on one, the
// evaluation and diagnostics lines below either, and durations as the ETA shows them.
#include <attnzoo/train/progress.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <sstream>

namespace attnzoo {
namespace test_progress {

using ::testing::MatchesRegex;

TrainMetrics logged_row() {
  TrainMetrics r;
  r.step = 6;
  r.epoch = 1.0;
  r.loss = 0.98147631;
  r.lr = 0.003;
  r.grad_norm = 0.41621;
  r.examples_per_second = 812.54;
  return r;
}

TEST(Progress, PlainLines) {
  std::ostringstream out;
  ProgressReport progress(out, /*bar=*/false, 0, 48);
  EXPECT_FALSE(progress.bar());
  progress.step(6, 0.9, 0.003, 800.0);  // nothing: no bar
  progress.row(logged_row());
  progress.evaluation(6, 0.81234, 0.625, 1.0, 24);
  progress.message("diagnostics at step 6:\nlayer 0 entropy 1.0\n");
  progress.finish();
  EXPECT_EQ(out.str(),
            "step 6/48 epoch 1.00 loss 0.9815 lr 3.00e-03 grad 0.416 812.5 ex/s\n"
            "step 6: val loss 0.8123, top-1 62.50%, top-5 100.00% (24 examples)\n"
            "diagnostics at step 6:\nlayer 0 entropy 1.0\n");
}

TEST(Progress, ABarOnATerminal) {
  std::ostringstream out;
  ProgressReport progress(out, /*bar=*/true, 0, 48);
  progress.row(logged_row());  // nothing: the bar shows it
  progress.step(12, 0.73124, 0.00241, 815.24);
  const auto bar = out.str();
  EXPECT_THAT(bar, MatchesRegex("\r\\[######\\.{18}\\] 12/48 loss 0\\.7312 lr 2\\.41e-03 815\\.2 "
                                "ex/s ETA [0-9hms]+   "));
  progress.evaluation(12, 0.5, 0.75, 1.0, 24);
  progress.message("diagnostics\n");
  progress.step(48, 0.5, 0.0003, 800.0);
  progress.finish();
  const auto rest = out.str().substr(bar.size());
  const std::string below =
      "\nstep 12: val loss 0.5000, top-1 75.00%, top-5 100.00% (24 examples)\n\ndiagnostics\n";
  EXPECT_EQ(rest.substr(0, below.size()), below);
  EXPECT_THAT(rest.substr(below.size()), MatchesRegex("\r\\[#{24}\\] 48/48 .* ETA 0s   \n"));
}

TEST(Progress, DurationText) {
  EXPECT_EQ(duration_text(0.0), "0s");
  EXPECT_EQ(duration_text(42.4), "42s");
  EXPECT_EQ(duration_text(59.6), "1m00s");
  EXPECT_EQ(duration_text(187.0), "3m07s");
  EXPECT_EQ(duration_text(3900.0), "1h05m");
  EXPECT_EQ(duration_text(-1.0), "?");
  EXPECT_EQ(duration_text(std::numeric_limits<double>::infinity()), "?");
  EXPECT_EQ(duration_text(std::numeric_limits<double>::quiet_NaN()), "?");
}

}  // namespace test_progress
}  // namespace attnzoo
