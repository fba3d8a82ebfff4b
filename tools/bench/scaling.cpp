#include "tools/bench/scaling.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace attnzoo::bench {

std::optional<double> loglog_slope(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<std::pair<double, double>> points;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] > 0 && y[i] > 0 && std::isfinite(y[i])) {
      points.emplace_back(std::log(x[i]), std::log(y[i]));
    }
  }
  if (points.size() < 2) return std::nullopt;
  double mx = 0, my = 0;
  for (const auto& [a, b] : points) mx += a, my += b;
  mx /= static_cast<double>(points.size());
  my /= static_cast<double>(points.size());
  double sxx = 0, sxy = 0;
  for (const auto& [a, b] : points) sxx += (a - mx) * (a - mx), sxy += (a - mx) * (b - my);
  if (sxx <= 0) return std::nullopt;
  return sxy / sxx;
}

ScalingExponent scaling_exponent(const std::vector<double>& x, const std::vector<double>& y) {
  ScalingExponent k;
  k.all = loglog_slope(x, y);
  if (x.size() >= 2) {
    k.last2 = loglog_slope({x[x.size() - 2], x.back()}, {y[y.size() - 2], y.back()});
  }
  return k;
}

std::optional<double> extrapolate_cost(const std::vector<double>& x, const std::vector<double>& y,
                                       double n) {
  std::vector<std::pair<double, double>> points;
  for (size_t i = 0; i < x.size(); ++i) {
    if (y[i] > 0 && std::isfinite(y[i])) points.emplace_back(x[i], y[i]);
  }
  if (points.empty()) return std::nullopt;
  double k = 2.0;
  const auto [x1, y1] = points.back();
  if (points.size() >= 2) {
    const auto [x0, y0] = points[points.size() - 2];
    if (x1 > x0) k = std::clamp(std::log(y1 / y0) / std::log(x1 / x0), 1.0, 2.0);
  }
  return y1 * std::pow(n / x1, k);
}

}  // namespace attnzoo::bench
