#include "tools/cli/progress_line.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>

namespace attnzoo::cli {

ProgressLine::ProgressLine() : tty_(isatty(fileno(stderr)) != 0) {}

ProgressLine::~ProgressLine() { clear(); }

void ProgressLine::status(const std::string& text) {
  if (!tty_) return;
  std::cerr << "\r\033[K" << text << std::flush;
  shown_ = true;
}

void ProgressLine::done(const std::string& text) {
  if (tty_) {
    status(text);
  } else {
    std::cerr << text << "\n";
  }
}

void ProgressLine::clear() {
  if (tty_ && shown_) std::cerr << "\r\033[K" << std::flush;
  shown_ = false;
}

}  // namespace attnzoo::cli
