// An append-only file of a training run, one line per logged step: metrics.csv, diagnostics.jsonl.
// Each line is flushed as it is written (a plot or a person may read the file while the run goes
// on), so a kill leaves at most a torn last line.
//
// A run resumed at step S continues the file: the complete lines of steps up to S are kept, in
// order and each step once; lines past S (written after the checkpoint by a run that was then
// killed) and a torn last line are dropped, and the file so trimmed replaces the old one atomically
// (io/atomic_file.h) before anything is appended.
//
//   RunLog log(run / "diagnostics.jsonl", resume_step, "", diagnostics_line_step);
//   log.append(json.dump());
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <string>

namespace attnzoo {

class RunLog {
 public:
  // The step of a complete line, or -1 for a line that is not one (torn, or not of this format).
  using StepOfLine = std::function<int64_t(const std::string& line)>;

  // resume_step 0, or no file at `path`: a new file, starting with `header` when it is not empty
  // (an existing file is replaced). resume_step > 0: the existing file continued as above (the
  // header written first if the file has none). The folder must exist. Throws attnzoo::Error
  // naming the file when it cannot be read or written.
  RunLog(std::string path, int64_t resume_step, std::string header, StepOfLine step_of_line);

  // Appends `line` and a newline, and flushes.
  void append(const std::string& line);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

// The "step" of a diagnostics.jsonl line (a JSON object), or -1.
int64_t diagnostics_line_step(const std::string& line);

}  // namespace attnzoo
