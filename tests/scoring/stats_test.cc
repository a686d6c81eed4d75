#include "scoring/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace kvgate::scoring {
namespace {

TEST(MeanStderr, HandComputed) {
  // mean 2.5; s^2 = (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3; stderr = sqrt(5/3 / 4) = sqrt(5/12).
  const std::vector<double> v = {1, 2, 3, 4};
  const MeanStderr m = mean_stderr(v);
  EXPECT_EQ(m.count, 4u);
  EXPECT_DOUBLE_EQ(m.mean, 2.5);
  EXPECT_NEAR(m.standard_error, 0.6454972243679028, 1e-15);
}

TEST(MeanStderr, EmptyAndSingle) {
  EXPECT_EQ(mean_stderr(std::vector<double>{}).count, 0u);
  const MeanStderr one = mean_stderr(std::vector<double>{7.0});
  EXPECT_EQ(one.mean, 7.0);
  EXPECT_EQ(one.standard_error, 0.0);
}

TEST(MeanStderr, LargeOffsetDoesNotCancel) {
  // Naive sum-of-squares would lose every digit of the 1e-3 spread at an offset of 1e9.
  // For two values the standard error is half their distance (exact in double here).
  const std::vector<double> v = {1e9 + 0.001, 1e9 - 0.001};
  EXPECT_NEAR(mean_stderr(v).standard_error, (v[0] - v[1]) / 2, 1e-15);
}

TEST(PairedBootstrap, IdenticalRunsGiveZeroInterval) {
  const std::vector<double> a = {0.3, 0.01, 0.7, 0.2, 0.05};
  const BootstrapCi ci = paired_bootstrap_ci(a, a, 1000, 0.95, 1);
  EXPECT_EQ(ci.mean_delta, 0.0);
  EXPECT_EQ(ci.low, 0.0);
  EXPECT_EQ(ci.high, 0.0);
  EXPECT_EQ(ci.pairs, 5u);
}

TEST(PairedBootstrap, ConstantShiftGivesPointInterval) {
  const std::vector<double> base = {1, 2, 3, 4};
  const std::vector<double> cand = {1.5, 2.5, 3.5, 4.5};
  const BootstrapCi ci = paired_bootstrap_ci(base, cand, 500, 0.9, 3);
  EXPECT_EQ(ci.mean_delta, 0.5);
  EXPECT_EQ(ci.low, 0.5);
  EXPECT_EQ(ci.high, 0.5);
}

TEST(PairedBootstrap, SeededAndDeterministic) {
  Rng rng(11);
  std::vector<double> base(200), cand(200);
  for (size_t i = 0; i < base.size(); ++i) {
    base[i] = rng.uniform();
    cand[i] = base[i] + 0.01 + 0.05 * rng.normal();
  }
  const BootstrapCi a = paired_bootstrap_ci(base, cand, 2000, 0.95, 42);
  const BootstrapCi b = paired_bootstrap_ci(base, cand, 2000, 0.95, 42);
  const BootstrapCi c = paired_bootstrap_ci(base, cand, 2000, 0.95, 43);
  EXPECT_EQ(a.low, b.low);
  EXPECT_EQ(a.high, b.high);
  EXPECT_NE(a.low, c.low);
  EXPECT_LT(a.low, a.mean_delta);
  EXPECT_GT(a.high, a.mean_delta);
}

TEST(PairedBootstrap, WidthMatchesNormalTheory) {
  // For a mean of 400 paired deltas the 95% percentile interval should be close to
  // ±1.96 standard errors; 15% slack covers bootstrap noise at B = 4000.
  Rng rng(5);
  std::vector<double> base(400), cand(400), delta(400);
  for (size_t i = 0; i < base.size(); ++i) {
    base[i] = rng.normal();
    cand[i] = base[i] + 0.2 + rng.normal();
    delta[i] = cand[i] - base[i];
  }
  const BootstrapCi ci = paired_bootstrap_ci(base, cand, 4000, 0.95, 9);
  const double se = mean_stderr(delta).standard_error;
  const double half_width = (ci.high - ci.low) / 2;
  EXPECT_NEAR(half_width, 1.96 * se, 0.15 * 1.96 * se);
  EXPECT_NEAR((ci.high + ci.low) / 2, ci.mean_delta, 0.2 * se);
}

TEST(PairedBootstrap, RejectsBadArguments) {
  const std::vector<double> a = {1, 2}, b = {1};
  EXPECT_THROW(paired_bootstrap_ci(a, b, 100, 0.95, 1), Error);
  EXPECT_THROW(paired_bootstrap_ci(std::vector<double>{}, std::vector<double>{}, 100, 0.95, 1), Error);
  EXPECT_THROW(paired_bootstrap_ci(a, a, 0, 0.95, 1), Error);
  EXPECT_THROW(paired_bootstrap_ci(a, a, 100, 1.0, 1), Error);
  EXPECT_THROW(paired_bootstrap_ci(a, a, 100, 0.0, 1), Error);
}

}  // namespace
}  // namespace kvgate::scoring
