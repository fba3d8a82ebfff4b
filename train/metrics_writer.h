// metrics.csv of a training run: a header, then one row per logged step, flushed as it is written
// (a plot or a person may read the file while the run goes on).
//
//   step,epoch,loss,lr,grad_norm,examples_per_second,val_loss,val_top1,val_top5,val_wer,val_cer
//   6,1,0.98147631,0.003,0.41621,812.5,0.8123,0.625,1,,
//
// A classifier's evaluations fill val_top1 and val_top5, a CTC model's (train.loss ctc) val_wer
// and val_cer, the word and character error rates.
//
// Numbers with 8 significant digits; a NaN (no evaluation on that row) is an empty cell.
//
// A resumed run continues the file: the rows up to the checkpoint's step are kept and the new ones
// appended (a file of the nine columns before val_wer and val_cer gets them, empty). Rows past that
// step (written after the checkpoint by a run that was then killed) and a torn last line are
// dropped first, so that the file has each step once, in order.
#pragma once

#include <attnzoo/train/run_log.h>

#include <cstdint>
#include <limits>
#include <string>

namespace attnzoo {

// One row of metrics.csv. Validation columns are NaN on rows without an evaluation.
struct TrainMetrics {
  int64_t step = 0;        // optimiser steps done
  double epoch = 0.0;      // fractional: examples seen / examples per epoch
  double loss = 0.0;       // mean training loss since the previous row
  double lr = 0.0;         // the base learning rate times the schedule's factor at this step
  double grad_norm = 0.0;  // the global gradient norm of the last step, before clipping
  double examples_per_second = 0.0;
  double val_loss = std::numeric_limits<double>::quiet_NaN();
  double val_top1 = std::numeric_limits<double>::quiet_NaN();
  double val_top5 = std::numeric_limits<double>::quiet_NaN();
  double val_wer = std::numeric_limits<double>::quiet_NaN();
  double val_cer = std::numeric_limits<double>::quiet_NaN();
};

class MetricsWriter {
 public:
  static constexpr const char* kHeader =
      "step,epoch,loss,lr,grad_norm,examples_per_second,val_loss,val_top1,val_top5,val_wer,"
      "val_cer";

  // resume_step 0, or no file at `path`: a new file with the header (an existing one is
  // replaced). resume_step > 0: the existing file continued after its rows up to resume_step (the
  // header written first if the file has none). The folder must exist. Throws attnzoo::Error
  // naming the file when it cannot be read or written.
  MetricsWriter(const std::string& path, int64_t resume_step);

  // Appends the row and flushes.
  void write(const TrainMetrics& row);

  const std::string& path() const { return log_.path(); }

  // A row as written (without the newline).
  static std::string format(const TrainMetrics& row);

 private:
  RunLog log_;
};

}  // namespace attnzoo
