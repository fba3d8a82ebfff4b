#include <attnzoo/core/error.h>
#include <attnzoo/io/atomic_file.h>
#include <attnzoo/train/run_log.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <iterator>

namespace attnzoo {
namespace {

// What an existing file keeps for a run resumed at `resume_step`: the header, then its complete
// lines of steps up to resume_step, in order, each step once. A line counts as complete only
// with its newline.
std::string continued_text(const std::string& text, int64_t resume_step, const std::string& header,
                           const RunLog::StepOfLine& step_of_line) {
  std::string kept = header.empty() ? std::string() : header + "\n";
  int64_t last = -1;  // steps count from 0 (diagnostics of the first step)
  size_t begin = 0;
  for (size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
    const auto line = text.substr(begin, end - begin);
    const int64_t step = step_of_line(line);
    if (step > last && step <= resume_step) {
      kept += line + "\n";
      last = step;
    }
  }
  return kept;
}

}  // namespace

RunLog::RunLog(std::string path, int64_t resume_step, std::string header, StepOfLine step_of_line)
    : path_(std::move(path)) {
  namespace fs = std::filesystem;
  const bool fresh = resume_step <= 0 || !fs::exists(path_);
  std::string start = header.empty() ? std::string() : header + "\n";
  bool rewrite = true;
  if (!fresh) {
    std::ifstream in(path_, std::ios::binary);
    if (!in) throw Error(path_ + ": cannot read");
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    start = continued_text(text, resume_step, header, step_of_line);
    rewrite = start != text;  // else appended to as it is
  }
  if (rewrite) io::write_file_atomically(path_, start);
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw Error(path_ + ": cannot write");
}

void RunLog::append(const std::string& line) {
  out_ << line << "\n";
  out_.flush();
  if (!out_) throw Error(path_ + ": write failed (disk full?)");
}

int64_t diagnostics_line_step(const std::string& line) {
  const auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return -1;
  const auto step = json.find("step");
  if (step == json.end() || !step->is_number_integer()) return -1;
  return step->get<int64_t>();
}

}  // namespace attnzoo
