// Progress of a long command on stderr: on a terminal, one line rewritten in place; otherwise one
// plain line per finished step, which is what logs and CI keep.
#pragma once

#include <string>

namespace attnzoo::cli {

class ProgressLine {
 public:
  ProgressLine();
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // What is running now (shown on a terminal only).
  void status(const std::string& text);
  // A finished step: on a terminal it replaces the status; otherwise a line of its own.
  void done(const std::string& text);
  // Clears the terminal's line (before other output).
  void clear();

 private:
  bool tty_;
  bool shown_ = false;
};

}  // namespace attnzoo::cli
