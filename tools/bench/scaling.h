// How a cost scales with the sequence length N, read on a log-log scale: the exponent k of
// cost ∝ N^k fitted to measured points, and the cost at a larger N extrapolated from the largest
// ones. Pure functions of the points: `attnzoo bench attention` fits its table's and JSON's
// exponents with them, and its sweep skips the lengths they predict to exceed its limits.
#pragma once

#include <optional>
#include <vector>

namespace attnzoo::bench {

// Least-squares slope of log y against log x over the points with x > 0 and a finite y > 0: the
// k of y ∝ x^k. Empty with fewer than two distinct such x.
std::optional<double> loglog_slope(const std::vector<double>& x, const std::vector<double>& y);

// The exponent k of cost ∝ N^k, fitted over points in increasing x.
struct ScalingExponent {
  std::optional<double> all;  // least squares over every point (loglog_slope)
  // The slope between the two largest x: closer to the asymptote when fixed costs (a chunked
  // backend's per-chunk buffers, thread start-up) dominate the small N.
  std::optional<double> last2;
};
ScalingExponent scaling_exponent(const std::vector<double>& x, const std::vector<double>& y);

// The cost at `n`, extrapolated from the last two points with a finite y > 0 (x increasing) with
// the local exponent clamped to [1, 2]: exact attention is at least linear and at most quadratic
// in both time and memory. With one such point, exponent 2, the cautious choice; with none, empty.
std::optional<double> extrapolate_cost(const std::vector<double>& x, const std::vector<double>& y,
                                       double n);

}  // namespace attnzoo::bench
