#include <attnzoo/io/error.h>
#include <attnzoo/train/metrics_writer.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <sstream>

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

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int64_t resume_step)
    : log_(path, resume_step, kHeader, row_step) {}

std::string MetricsWriter::format(const TrainMetrics& row) {
  return std::to_string(row.step) + "," + metrics_cell(row.epoch) + "," + metrics_cell(row.loss) +
         "," + metrics_cell(row.lr) + "," + metrics_cell(row.grad_norm) + "," +
         metrics_cell(row.examples_per_second) + "," + metrics_cell(row.val_loss) + "," +
         metrics_cell(row.val_top1) + "," + metrics_cell(row.val_top5);
}

void MetricsWriter::write(const TrainMetrics& row) { log_.append(format(row)); }

}  // namespace attnzoo
