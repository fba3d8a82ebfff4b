#include <attnzoo/train/progress.h>

#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

namespace attnzoo {

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  std::ostringstream out;
  if (s >= 3600)
    out << s / 3600 << "h" << std::setw(2) << std::setfill('0') << (s / 60) % 60 << "m";
  else if (s >= 60)
    out << s / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
  else
    out << s << "s";
  return out.str();
}

ProgressReport::ProgressReport(std::ostream& out, bool bar, int64_t first_step, int64_t total_steps)
    : out_(out),
      bar_(bar),
      first_step_(first_step),
      total_steps_(total_steps),
      start_(std::chrono::steady_clock::now()) {}

void ProgressReport::step(int64_t step, double loss, double lr, double examples_per_second) {
  if (!bar_) return;
  const double done = static_cast<double>(step) / static_cast<double>(total_steps_);
  const double since =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta =
      since / static_cast<double>(step - first_step_) * static_cast<double>(total_steps_ - step);
  const int width = 24, filled = static_cast<int>(done * width);
  out_ << "\r[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << step
       << "/" << total_steps_ << " loss " << std::fixed << std::setprecision(4) << loss << " lr "
       << std::scientific << std::setprecision(2) << lr << std::fixed << std::setprecision(1) << " "
       << examples_per_second << " ex/s ETA " << duration_text(eta) << std::defaultfloat << "   "
       << std::flush;
}

void ProgressReport::row(const TrainMetrics& row) {
  if (bar_) return;
  out_ << "step " << row.step << "/" << total_steps_ << " epoch " << std::fixed
       << std::setprecision(2) << row.epoch << " loss " << std::setprecision(4) << row.loss
       << " lr " << std::scientific << std::setprecision(2) << row.lr << std::fixed << " grad "
       << std::setprecision(3) << row.grad_norm << " " << std::setprecision(1)
       << row.examples_per_second << " ex/s" << std::defaultfloat << "\n";
}

void ProgressReport::evaluation(int64_t step, double loss, double top1, double top5,
                                int64_t examples) {
  if (bar_) out_ << "\n";
  out_ << "step " << step << ": val loss " << std::fixed << std::setprecision(4) << loss
       << ", top-1 " << std::setprecision(2) << 100.0 * top1 << "%, top-5 " << 100.0 * top5 << "% ("
       << examples << " examples)" << std::defaultfloat << "\n";
}

void ProgressReport::transcription_evaluation(int64_t step, double loss, double wer, double cer,
                                              int64_t examples) {
  if (bar_) out_ << "\n";
  out_ << "step " << step << ": val CTC loss " << std::fixed << std::setprecision(4) << loss
       << ", WER " << std::setprecision(2) << 100.0 * wer << "%, CER " << 100.0 * cer << "% ("
       << examples << " utterances)" << std::defaultfloat << "\n";
}

void ProgressReport::message(const std::string& text) {
  if (bar_) out_ << "\n";
  out_ << text;
}

void ProgressReport::finish() {
  if (bar_) out_ << "\n";
}

}  // namespace attnzoo
