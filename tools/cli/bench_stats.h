// What the CLI's benchmarks report of their repeated timings.
#pragma once

#include <algorithm>
#include <vector>

namespace attnzoo::cli {

// The median of `values` (the mean of the two middle ones for an even count); values non-empty.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace attnzoo::cli
