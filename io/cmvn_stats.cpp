#include <attnzoo/core/error.h>
#include <attnzoo/io/cmvn_stats.h>
#include <attnzoo/io/npy_format.h>
#include <attnzoo/io/zip_archive.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace attnzoo::io {
namespace {

constexpr uint64_t kMaxStatsFile = uint64_t{256} << 20;
constexpr double kCmvnVarianceFloor = 1e-20;  // WeNet's load_cmvn and ESPnet's GlobalMVN eps

[[noreturn]] void stats_fail(const ByteSource& source, const std::string& what) {
  throw CheckpointError(source.name() + ": " + what);
}

// mean and istd from the sums, as WeNet and ESPnet compute them.
CmvnStats from_sums(const ByteSource& source, CmvnStatsFormat format, double count,
                    const std::vector<double>& sum, const std::vector<double>& sum_square) {
  if (sum.empty()) stats_fail(source, "CMVN statistics of no features");
  if (sum.size() != sum_square.size()) {
    stats_fail(source, "CMVN statistics with " + std::to_string(sum.size()) + " sums and " +
                           std::to_string(sum_square.size()) + " sums of squares");
  }
  if (!std::isfinite(count) || count <= 0.0) {
    std::ostringstream value;
    value << count;
    stats_fail(source, "CMVN statistics over " + value.str() + " frames (need a positive count)");
  }
  CmvnStats stats;
  stats.format = format;
  stats.frames = count;
  for (size_t i = 0; i < sum.size(); ++i) {
    if (!std::isfinite(sum[i]) || !std::isfinite(sum_square[i])) {
      stats_fail(source, "CMVN statistics of feature " + std::to_string(i) + " are not finite");
    }
    const double mean = sum[i] / count;
    double var = sum_square[i] / count - mean * mean;
    if (!std::isfinite(mean) || !std::isfinite(var)) {
      stats_fail(source, "CMVN statistics of feature " + std::to_string(i) +
                             " give a mean or variance beyond float64's range");
    }
    if (!(var >= kCmvnVarianceFloor)) var = kCmvnVarianceFloor;
    stats.mean.push_back(mean);
    stats.istd.push_back(1.0 / std::sqrt(var));
  }
  return stats;
}

CmvnStats parse_kaldi_text(const ByteSource& source, const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  if (words.size() < 6 || words.front() != "[" || words.back() != "]" || words.size() % 2 != 0) {
    stats_fail(source,
               "not Kaldi's CMVN statistics as text: expected '[', a row of F sums and the count, "
               "a row of F sums of squares and a 0, then ']'");
  }
  std::vector<double> numbers;
  for (size_t i = 1; i + 1 < words.size(); ++i) {
    const char* begin = words[i].c_str();
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(begin, &end);
    if (end == begin || *end != '\0' || errno == ERANGE) {
      stats_fail(source, "Kaldi CMVN statistics: '" + words[i].substr(0, 40) + "' (word " +
                             std::to_string(i + 1) + ") is not a number");
    }
    numbers.push_back(value);
  }
  const size_t dim = numbers.size() / 2 - 1;
  const std::vector<double> sum(numbers.begin(), numbers.begin() + static_cast<long>(dim));
  const std::vector<double> sum_square(numbers.begin() + static_cast<long>(dim + 1),
                                       numbers.begin() + static_cast<long>(2 * dim + 1));
  return from_sums(source, CmvnStatsFormat::kKaldiText, numbers[dim], sum, sum_square);
}

CmvnStats parse_wenet_json(const ByteSource& source, const std::string& text) {
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    stats_fail(source,
               "not JSON CMVN statistics (a JSON object with mean_stat, var_stat and "
               "frame_num)");
  }
  const auto numbers = [&](const char* key) {
    if (!json.contains(key) || !json.at(key).is_array()) {
      stats_fail(source, std::string("JSON CMVN statistics: '") + key + "' is not a list");
    }
    std::vector<double> out;
    for (const auto& item : json.at(key)) {
      if (!item.is_number()) {
        stats_fail(source, std::string("JSON CMVN statistics: '") + key + "' holds a non-number");
      }
      out.push_back(item.get<double>());
    }
    return out;
  };
  if (!json.contains("frame_num") || !json.at("frame_num").is_number()) {
    stats_fail(source, "JSON CMVN statistics: 'frame_num' is not a number");
  }
  return from_sums(source, CmvnStatsFormat::kWenetJson, json.at("frame_num").get<double>(),
                   numbers("mean_stat"), numbers("var_stat"));
}

CmvnStats parse_espnet_npz(const ByteSource& source) {
  const auto arrays = read_npz(source, kMaxStatsFile);
  const auto array = [&](const char* key) -> const NpyArray& {
    const auto it = arrays.find(key);
    if (it == arrays.end()) {
      stats_fail(source, std::string("ESPnet feature statistics without '") + key +
                             "' (an .npz of count, sum and sum_square)");
    }
    return it->second;
  };
  const auto& count = array("count");
  const auto& sum = array("sum");
  const auto& sum_square = array("sum_square");
  if (count.values.size() != 1) stats_fail(source, "'count' is not one number");
  if (sum.shape.size() != 1 || sum_square.shape.size() != 1) {
    stats_fail(source, "'sum' and 'sum_square' must be vectors");
  }
  return from_sums(source, CmvnStatsFormat::kEspnetNpz, count.values[0], sum.values,
                   sum_square.values);
}

CmvnStats parse_kaldi_npy(const ByteSource& source) {
  const auto header = parse_npy_header(source);
  if (header.shape.size() != 2 || header.shape[0] != 2 || header.shape[1] < 2) {
    stats_fail(source, "an .npy of CMVN statistics is Kaldi's [2, F + 1] matrix");
  }
  const auto values = read_npy_values(source, header);
  const auto width = static_cast<size_t>(header.shape[1]);
  const std::vector<double> sum(values.begin(), values.begin() + static_cast<long>(width - 1));
  const std::vector<double> sum_square(values.begin() + static_cast<long>(width),
                                       values.begin() + static_cast<long>(2 * width - 1));
  return from_sums(source, CmvnStatsFormat::kNpy, values[width - 1], sum, sum_square);
}

}  // namespace

const char* to_string(CmvnStatsFormat format) {
  switch (format) {
    case CmvnStatsFormat::kKaldiText:
      return "kaldi_text";
    case CmvnStatsFormat::kWenetJson:
      return "wenet_json";
    case CmvnStatsFormat::kEspnetNpz:
      return "espnet_npz";
    case CmvnStatsFormat::kNpy:
      return "npy";
  }
  return "?";
}

CmvnStats parse_cmvn_stats(const ByteSource& source) {
  if (source.size() > kMaxStatsFile) {
    stats_fail(source, "CMVN statistics of " + std::to_string(source.size()) + " bytes (at most " +
                           std::to_string(kMaxStatsFile) + ")");
  }
  if (ZipArchive::is_zip(source)) return parse_espnet_npz(source);
  if (is_npy(source)) return parse_kaldi_npy(source);
  const auto text = source.read_string(0, source.size(), "the CMVN statistics");
  if (text.size() >= 2 && text[0] == '\0' && text[1] == 'B') {
    stats_fail(source,
               "Kaldi's binary CMVN statistics are not read; write them as text "
               "(copy-matrix --binary=false)");
  }
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return parse_wenet_json(source, text);
  return parse_kaldi_text(source, text);
}

CmvnStats load_cmvn_stats(const std::string& path) {
  const FileSource file(path);
  return parse_cmvn_stats(file);
}

}  // namespace attnzoo::io
