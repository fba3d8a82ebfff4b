// The log-log fits of tools/bench/scaling.h on costs whose exponent is known: exact power laws,
// power laws behind a fixed cost, and the points a sweep leaves (skipped, failed, infinite).
#include "tools/bench/scaling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace attnzoo {
namespace test_scaling {

using bench::extrapolate_cost;
using bench::loglog_slope;
using bench::scaling_exponent;

std::vector<double> power_law(const std::vector<double>& n, double c, double k, double fixed = 0) {
  std::vector<double> y;
  for (const double x : n) y.push_back(fixed + c * std::pow(x, k));
  return y;
}

const std::vector<double> kLengths = {512, 1024, 2048, 4096, 8192};

TEST(Scaling, ExactPowerLawsGiveTheirExponent) {
  for (const double k : {1.0, 1.5, 2.0, 0.5}) {
    const auto y = power_law(kLengths, 3e-6, k);
    ASSERT_TRUE(loglog_slope(kLengths, y).has_value());
    EXPECT_NEAR(*loglog_slope(kLengths, y), k, 1e-12);
    const auto fitted = scaling_exponent(kLengths, y);
    EXPECT_NEAR(*fitted.all, k, 1e-12);
    EXPECT_NEAR(*fitted.last2, k, 1e-12);
  }
}

TEST(Scaling, TheLastTwoPointsSeePastAFixedCost) {
  // A linear cost behind a fixed one: the fit over all points is flattened by the small N, the
  // slope of the two largest is near the asymptote.
  // With 512 + N: 0.776 over all points, 0.918 between 4096 and 8192.
  const auto y = power_law(kLengths, 1.0, 1.0, /*fixed=*/512);
  const auto fitted = scaling_exponent(kLengths, y);
  EXPECT_NEAR(*fitted.all, 0.776, 1e-3);
  EXPECT_NEAR(*fitted.last2, std::log2(8704.0 / 4608.0), 1e-12);
  EXPECT_LT(*fitted.all, *fitted.last2);
}

TEST(Scaling, PointsWithoutACostAreLeftOut) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Skipped (0), failed (NaN) and cut short (inf) lengths, around an exact N^2.
  const std::vector<double> x = {256, 512, 1024, 2048, 4096};
  const std::vector<double> y = {0.0, 1.0, nan, 16.0, inf};
  EXPECT_NEAR(*loglog_slope(x, y), 2.0, 1e-12);
  EXPECT_FALSE(loglog_slope({512, 1024}, {1.0, 0.0}).has_value());
  EXPECT_FALSE(loglog_slope({512, 512}, {1.0, 2.0}).has_value());  // one distinct N
  EXPECT_FALSE(loglog_slope({}, {}).has_value());
  EXPECT_FALSE(scaling_exponent({512}, {1.0}).last2.has_value());
}

TEST(Scaling, ExtrapolationClampsTheLocalExponentToOneAndTwo) {
  EXPECT_DOUBLE_EQ(*extrapolate_cost({512, 1024}, {1.0, 4.0}, 2048), 16.0);  // N^2 kept
  EXPECT_DOUBLE_EQ(*extrapolate_cost({512, 1024}, {1.0, 2.0}, 4096), 8.0);   // N kept
  EXPECT_DOUBLE_EQ(*extrapolate_cost({512, 1024}, {1.0, 8.0}, 2048), 32.0);  // N^3 -> N^2
  EXPECT_DOUBLE_EQ(*extrapolate_cost({512, 1024}, {1.0, 1.5}, 2048), 3.0);   // N^0.58 -> N
  // One measured point: quadratic, the cautious guess; none: nothing to say.
  EXPECT_DOUBLE_EQ(*extrapolate_cost({1024}, {2.0}, 4096), 32.0);
  EXPECT_DOUBLE_EQ(*extrapolate_cost({512, 1024}, {1.0, 0.0}, 2048), 16.0);  // from 512 alone
  EXPECT_FALSE(extrapolate_cost({512}, {0.0}, 1024).has_value());
}

}  // namespace test_scaling
}  // namespace attnzoo
