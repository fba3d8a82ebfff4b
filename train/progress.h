// What a training run prints as it goes: on a terminal, a bar redrawn in place after every step,
//
//   [##########..............] 20/48 loss 0.7312 lr 2.41e-03 815.2 ex/s ETA 12s
//
// otherwise one plain line per logged row,
//
//   step 24/48 epoch 4.00 loss 0.7312 lr 2.41e-03 grad 0.416 815.2 ex/s
//
// and, either way, the evaluations' and diagnostics' lines (a bar's line is ended before them, and
// the bar redrawn below them at the next step).
#pragma once

#include <attnzoo/train/metrics_writer.h>

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace attnzoo {

// "42s", "3m07s", "1h05m"; "?" for a negative or infinite time.
std::string duration_text(double seconds);

class ProgressReport {
 public:
  // bar: redraw a bar (a terminal) instead of printing plain lines. first_step: the step the run
  // starts (or resumes) at, for the ETA; total_steps: the run's length. The stream must outlive
  // the report.
  ProgressReport(std::ostream& out, bool bar, int64_t first_step, int64_t total_steps);

  bool bar() const { return bar_; }

  // After each step: the bar with the mean loss and throughput of the current window, the
  // learning rate and the ETA from the time since the report was made. Nothing without a bar.
  void step(int64_t step, double loss, double lr, double examples_per_second);
  // A logged row as a plain line. Nothing with a bar.
  void row(const TrainMetrics& row);
  // "step N: val loss L, top-1 A%, top-5 B% (E examples)".
  void evaluation(int64_t step, double loss, double top1, double top5, int64_t examples);
  // "step N: val CTC loss L, WER W%, CER C% (E utterances)".
  void transcription_evaluation(int64_t step, double loss, double wer, double cer,
                                int64_t examples);
  // A message of its own lines (its text ends with a newline), below the bar.
  void message(const std::string& text);
  // Ends the bar's line (nothing without a bar), at the end of the loop.
  void finish();

 private:
  std::ostream& out_;
  bool bar_;
  int64_t first_step_, total_steps_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace attnzoo
