#include <attnzoo/io/error.h>
#include <attnzoo/train/metrics_writer.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iterator>
#include <sstream>
#include <vector>

namespace attnzoo {
namespace {

std::string metrics_cell(double v) {
  if (std::isnan(v)) return "";
  std::ostringstream out;
  out << std::setprecision(8) << v;
  return out.str();
}

// The step of a complete metrics row (nine cells, the first an integer), or -1.
int64_t row_step(const std::string& line) {
  int64_t commas = 0;
  for (const char ch : line) commas += ch == ',';
  if (commas != 8 || line.empty() || line[0] == ',') return -1;
  errno = 0;
  char* end = nullptr;
  const long long step = std::strtoll(line.c_str(), &end, 10);
  if (errno != 0 || *end != ',' || step < 0) return -1;
  return static_cast<int64_t>(step);
}

// The content of an existing metrics.csv for a run resumed at `resume_step`: the header, then its
// complete rows of steps up to resume_step, in order, each step once.
std::string continued_metrics(const std::string& text, int64_t resume_step) {
  std::string kept = std::string(MetricsWriter::kHeader) + "\n";
  int64_t last = 0;
  size_t begin = 0;
  for (size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
    const auto line = text.substr(begin, end - begin);
    const int64_t step = row_step(line);
    if (step > last && step <= resume_step) {
      kept += line + "\n";
      last = step;
    }
  }
  return kept;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int64_t resume_step) : path_(path) {
  namespace fs = std::filesystem;
  const bool fresh = resume_step <= 0 || !fs::exists(path);
  if (!fresh) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path + ": cannot read");
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const auto kept = continued_metrics(text, resume_step);
    if (kept != text) {
      const auto staged = path + ".partial";
      {
        std::ofstream out(staged, std::ios::binary | std::ios::trunc);
        out << kept;
        out.flush();
        if (!out) throw Error(staged + ": cannot write");
      }
      std::error_code ec;
      fs::rename(staged, path, ec);
      if (ec) throw Error(path + ": cannot replace (" + ec.message() + ")");
    }
  }
  out_.open(path, fresh ? std::ios::trunc : std::ios::app);
  if (!out_) throw Error(path + ": cannot write");
  if (fresh) out_ << kHeader << "\n";
}

std::string MetricsWriter::format(const TrainMetrics& row) {
  return std::to_string(row.step) + "," + metrics_cell(row.epoch) + "," + metrics_cell(row.loss) +
         "," + metrics_cell(row.lr) + "," + metrics_cell(row.grad_norm) + "," +
         metrics_cell(row.examples_per_second) + "," + metrics_cell(row.val_loss) + "," +
         metrics_cell(row.val_top1) + "," + metrics_cell(row.val_top5);
}

void MetricsWriter::write(const TrainMetrics& row) {
  out_ << format(row) << "\n";
  out_.flush();
}

}  // namespace attnzoo
