#include <attnzoo/core/error.h>
#include <attnzoo/io/atomic_file.h>
#include <attnzoo/train/metrics_writer.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <sstream>

namespace attnzoo {
namespace {

std::string metrics_cell(double v) {
  if (std::isnan(v)) return "";
  std::ostringstream out;
  out << std::setprecision(8) << v;
  return out.str();
}

constexpr int64_t kColumns = 11;

// The step of a complete metrics row (kColumns cells, the first an integer), or -1.
int64_t row_step(const std::string& line) {
  int64_t commas = 0;
  for (const char ch : line) commas += ch == ',';
  if (commas != kColumns - 1 || line.empty() || line[0] == ',') return -1;
  errno = 0;
  char* end = nullptr;
  const long long step = std::strtoll(line.c_str(), &end, 10);
  if (errno != 0 || *end != ',' || step < 0) return -1;
  return static_cast<int64_t>(step);
}

constexpr const char* kNineColumnHeader =
    "step,epoch,loss,lr,grad_norm,examples_per_second,val_loss,val_top1,val_top5";

// A metrics.csv written before val_wer and val_cer existed, resumed: its complete rows padded with
// the two empty cells under the current header, so that the run keeps its history (RunLog then
// drops what a resume drops). Other files are left as they are. Returns `path`.
const std::string& upgraded(const std::string& path, int64_t resume_step) {
  if (resume_step <= 0) return path;
  std::ifstream in(path, std::ios::binary);
  if (!in) return path;
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string old_header = std::string(kNineColumnHeader) + "\n";
  if (text.compare(0, old_header.size(), old_header) != 0) return path;
  std::string out = std::string(MetricsWriter::kHeader) + "\n";
  size_t begin = old_header.size();
  for (size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
    const auto line = text.substr(begin, end - begin);
    if (std::count(line.begin(), line.end(), ',') == 8) out += line + ",,\n";
  }
  io::write_file_atomically(path, out);
  return path;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int64_t resume_step)
    : log_(upgraded(path, resume_step), resume_step, kHeader, row_step) {}

std::string MetricsWriter::format(const TrainMetrics& row) {
  return std::to_string(row.step) + "," + metrics_cell(row.epoch) + "," + metrics_cell(row.loss) +
         "," + metrics_cell(row.lr) + "," + metrics_cell(row.grad_norm) + "," +
         metrics_cell(row.examples_per_second) + "," + metrics_cell(row.val_loss) + "," +
         metrics_cell(row.val_top1) + "," + metrics_cell(row.val_top5) + "," +
         metrics_cell(row.val_wer) + "," + metrics_cell(row.val_cer);
}

void MetricsWriter::write(const TrainMetrics& row) { log_.append(format(row)); }

}  // namespace attnzoo
