#include "core/percentile.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"

namespace kvgate {
namespace {

TEST(Percentile, LinearInterpolationBetweenClosestRanks) {
  const std::vector<double> v = {50, 10, 40, 20, 30};  // unsorted on purpose
  EXPECT_EQ(percentile(v, 0.0), 10.0);
  EXPECT_EQ(percentile(v, 1.0), 50.0);
  EXPECT_EQ(percentile(v, 0.5), 30.0);
  EXPECT_DOUBLE_EQ(percentile(v, 0.9), 46.0);     // position 3.6: 40 + 0.6 * 10
  EXPECT_DOUBLE_EQ(percentile(v, 0.999), 49.96);  // position 3.996
  EXPECT_DOUBLE_EQ(percentile(v, 0.25), 20.0);    // position 1 exactly
}

TEST(Percentile, SortedInputGivesTheSameValues) {
  const std::vector<double> sorted = {10, 20, 30, 40, 50};
  for (double f : {0.0, 0.1, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0})
    EXPECT_EQ(percentile_sorted(sorted, f), percentile(std::vector<double>{50, 10, 40, 20, 30}, f)) << f;
}

TEST(Percentile, EvenCountMedianIsMeanOfMiddleValues) {
  EXPECT_DOUBLE_EQ(percentile(std::vector<double>{4, 1, 3, 2}, 0.5), 2.5);
}

TEST(Percentile, EqualNeighboursGiveThatValueExactly) {
  const std::vector<double> v = {0.1, 0.1, 0.1};
  EXPECT_EQ(percentile(v, 0.37), 0.1);
}

TEST(Percentile, FractionsOutsideTheUnitIntervalClampToTheEnds) {
  const std::vector<double> sorted = {1, 2, 3};
  EXPECT_EQ(percentile_sorted(sorted, -0.5), 1.0);
  EXPECT_EQ(percentile_sorted(sorted, 1.5), 3.0);
}

TEST(Percentile, OneValueIsEveryPercentile) {
  const std::vector<double> one = {7.25};
  for (double f : {0.0, 0.01, 0.5, 0.99, 1.0}) EXPECT_EQ(percentile_sorted(one, f), 7.25) << f;
}

// Callers decide what no values mean (a NaN cell, a zero profile row); asking is a bug of ours.
TEST(Percentile, EmptyIsAnInternalError) {
  for (auto call : {+[] { percentile_sorted(std::vector<double>{}, 0.5); }, +[] { percentile(std::vector<double>{}, 0.5); }}) {
    try {
      call();
      ADD_FAILURE() << "no error for an empty set";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::internal);
    }
  }
}

}  // namespace
}  // namespace kvgate
