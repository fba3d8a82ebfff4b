#include <attnzoo/decoding/error_rate.h>

#include <attnzoo/decoding/text_scan.h>

#include <algorithm>
#include <limits>

namespace attnzoo::decoding {
double EditCounts::rate() const {
  const int64_t n = reference_length();
  if (n == 0) return errors() == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return static_cast<double>(errors()) / static_cast<double>(n);
}

EditCounts& EditCounts::operator+=(const EditCounts& other) {
  hits += other.hits;
  substitutions += other.substitutions;
  deletions += other.deletions;
  insertions += other.insertions;
  return *this;
}

EditCounts align_tokens(const std::vector<std::string>& reference,
                        const std::vector<std::string>& hypothesis) {
  const size_t n = reference.size(), m = hypothesis.size();
  // cost[i][j]: the distance between reference[0, i) and hypothesis[0, j), row-major.
  std::vector<int64_t> cost((n + 1) * (m + 1));
  const auto at = [m](size_t i, size_t j) { return i * (m + 1) + j; };
  for (size_t i = 0; i <= n; ++i) cost[at(i, 0)] = static_cast<int64_t>(i);
  for (size_t j = 0; j <= m; ++j) cost[at(0, j)] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int64_t diagonal = cost[at(i - 1, j - 1)] + (reference[i - 1] != hypothesis[j - 1]);
      cost[at(i, j)] = std::min({diagonal, cost[at(i - 1, j)] + 1, cost[at(i, j - 1)] + 1});
    }
  }
  EditCounts counts;
  size_t i = n, j = m;
  while (i > 0 || j > 0) {
    if (i > 0 && j > 0 &&
        cost[at(i, j)] == cost[at(i - 1, j - 1)] + (reference[i - 1] != hypothesis[j - 1])) {
      ++(reference[i - 1] == hypothesis[j - 1] ? counts.hits : counts.substitutions);
      --i;
      --j;
    } else if (i > 0 && cost[at(i, j)] == cost[at(i - 1, j)] + 1) {
      ++counts.deletions;
      --i;
    } else {
      ++counts.insertions;
      --j;
    }
  }
  return counts;
}

std::vector<std::string> words_of(std::string_view text) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && detail::is_white(text[i])) ++i;
    const size_t begin = i;
    while (i < text.size() && !detail::is_white(text[i])) ++i;
    if (i > begin) words.emplace_back(text.substr(begin, i - begin));
  }
  return words;
}

std::vector<std::string> characters_of(std::string_view text) {
  text = detail::trimmed(text);
  std::vector<std::string> characters;
  for (size_t i = 0; i < text.size();) {
    const size_t length = detail::character_length(text, i);
    characters.emplace_back(text.substr(i, length));
    i += length;
  }
  return characters;
}

}  // namespace attnzoo::decoding
