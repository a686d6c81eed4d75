// The confidence intervals rollout verdicts rest on (scoring/intervals.h): quantiles against
// published table values, Tango's paired interval against its closed forms, and coverage by
// simulation — 1,000 seeded runs per case, the truth known, the 95 % interval must cover it in
// 93-97 % of them (paired proportions and mean KLD, with and without within-session correlation).
#include "scoring/intervals.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace kvgate::scoring {
namespace {

TEST(Quantiles, MatchPublishedTables) {
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-12);
  EXPECT_NEAR(normal_quantile(0.995), 2.5758293035489004, 1e-12);
  EXPECT_NEAR(normal_quantile(0.025), -1.959963984540054, 1e-12);
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.706204736174698, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 2), 4.302652729749464, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.975, 3), 3.182446305284263, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.975, 10), 2.228138851986274, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.975, 30), 2.0422724563012373, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.975, 120), 1.979930405052777, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.025, 10), -2.228138851986274, 1e-10);
  // Past 1000 df the expansion takes over: continuous with the exact series, above the normal.
  const double exact = student_t_quantile(0.975, 1000), expanded = student_t_quantile(0.975, 1001);
  EXPECT_NEAR(exact, 1.9623390808264078, 1e-9);
  EXPECT_LT(expanded, exact);
  EXPECT_GT(expanded, normal_quantile(0.975));
  // t(df) falls by about (x³ + x) / (4 df²) per degree of freedom at large df.
  const double x = normal_quantile(0.975);
  EXPECT_NEAR(exact - expanded, (x * x * x + x) / (4 * 1000.0 * 1000.0), 2e-8);
  EXPECT_THROW(student_t_quantile(0.975, 0), Error);
  EXPECT_THROW(normal_quantile(1.0), Error);
}

TEST(PairedDifference, NoDiscordantPairStillBoundsTheDrop) {
  // b = c = 0: the score interval is ±z²/(n + z²), not the [0, 0] a bootstrap or Wald gives.
  const double z = normal_quantile(0.975);
  const Interval i = paired_difference_interval(0, 0, 25, 0.95);
  EXPECT_EQ(i.estimate, 0.0);
  EXPECT_NEAR(i.high, z * z / (25 + z * z), 1e-9);
  EXPECT_NEAR(i.low, -z * z / (25 + z * z), 1e-9);
  EXPECT_EQ(i.units, 25u);
  EXPECT_GT(i.spread, 0.0);
}

TEST(PairedDifference, CentredOnTheEstimateAndNarrowingWithPairs) {
  const Interval small = paired_difference_interval(6, 1, 50, 0.95);
  EXPECT_DOUBLE_EQ(small.estimate, 0.1);
  EXPECT_LT(small.low, 0.1);
  EXPECT_GT(small.high, 0.1);
  const Interval large = paired_difference_interval(60, 10, 500, 0.95);
  EXPECT_DOUBLE_EQ(large.estimate, 0.1);
  EXPECT_LT(large.high - large.low, small.high - small.low);
  EXPECT_GT(large.low, 0.0) << "60 against 10 discordant pairs is a real drop";
  // A wider confidence gives a wider interval; swapping the cells mirrors it.
  const Interval wide = paired_difference_interval(60, 10, 500, 0.999);
  EXPECT_LT(wide.low, large.low);
  EXPECT_GT(wide.high, large.high);
  const Interval mirrored = paired_difference_interval(10, 60, 500, 0.95);
  EXPECT_NEAR(mirrored.low, -large.high, 1e-9);
  EXPECT_NEAR(mirrored.high, -large.low, 1e-9);
  // All pairs discordant one way: the bound reaches the end of the range.
  EXPECT_EQ(paired_difference_interval(20, 0, 20, 0.95).high, 1.0);
  EXPECT_THROW(paired_difference_interval(3, 3, 5, 0.95), Error);
  EXPECT_TRUE(std::isnan(paired_difference_interval(0, 0, 0, 0.95).estimate));
}

TEST(ClusteredRatio, EdgeCases) {
  EXPECT_TRUE(std::isnan(clustered_ratio_interval({}, RatioKind::rate, 0.95).estimate));
  const std::vector<ItemRatio> one = {{9, 10}};
  const Interval single = clustered_ratio_interval(one, RatioKind::rate, 0.95);
  EXPECT_DOUBLE_EQ(single.estimate, 0.9);
  EXPECT_EQ(single.low, 0.0);
  EXPECT_EQ(single.high, 1.0) << "one item shows no spread between items";
  EXPECT_TRUE(std::isnan(single.spread));
  EXPECT_TRUE(std::isinf(clustered_ratio_interval(one, RatioKind::mean, 0.95).high));
  // No event in 25 items of 40 tokens: each item counts once, like 0 of 25 (Wilson at t_24).
  std::vector<ItemRatio> none(25, ItemRatio{0, 40});
  const Interval zero = clustered_ratio_interval(none, RatioKind::rate, 0.95);
  const double t = student_t_quantile(0.975, 24);
  EXPECT_EQ(zero.estimate, 0.0);
  EXPECT_EQ(zero.low, 0.0);
  EXPECT_NEAR(zero.high, t * t / (25 + t * t), 1e-12);
  // Items without weight do not count.
  none.push_back({0, 0});
  EXPECT_EQ(clustered_ratio_interval(none, RatioKind::rate, 0.95).units, 25u);
}

TEST(ItemsToDecide, ScalesWithTheSquareOfTheGap) {
  EXPECT_DOUBLE_EQ(items_to_decide(0.0, 0.5, 0.1, 2.0), 100.0);
  EXPECT_DOUBLE_EQ(items_to_decide(0.05, 0.5, 0.1, 2.0), 400.0);
  EXPECT_TRUE(std::isinf(items_to_decide(0.1, 0.5, 0.1, 2.0)));
  EXPECT_TRUE(std::isnan(items_to_decide(0.0, std::nan(""), 0.1, 2.0)));
  // With t at n - 1 degrees of freedom: 7 items (t_6 = 2.447, 2.447² <= 7), where the normal
  // quantile alone would promise 4; at large counts the two agree.
  EXPECT_DOUBLE_EQ(items_to_decide_t(0.0, 1.0, 1.0, 0.95), 7.0);
  const double z = normal_quantile(0.975);
  const double large = items_to_decide(0.0, 1.0, 0.01, z);
  EXPECT_GE(items_to_decide_t(0.0, 1.0, 0.01, 0.95), std::ceil(large));
  EXPECT_LE(items_to_decide_t(0.0, 1.0, 0.01, 0.95), std::ceil(large) + 3);
}

// The fraction of `runs` simulated data sets whose 95 % interval covers `truth` (printed, for the record).
double coverage(uint64_t seed, int runs, double truth, const std::function<Interval(Rng&)>& simulate) {
  Rng rng(seed);
  int covered = 0;
  for (int r = 0; r < runs; ++r) {
    const Interval i = simulate(rng);
    covered += i.low <= truth && truth <= i.high ? 1 : 0;
  }
  const double c = static_cast<double>(covered) / runs;
  std::printf("coverage (seed %llu): %.3f\n", static_cast<unsigned long long>(seed), c);
  return c;
}

constexpr int kRuns = 1000;

TEST(Coverage, PairedProportionsGoldDrop) {
  // 200 gold items: the reference right and the candidate wrong on 8 %, the reverse on 5 %.
  const double c95 = coverage(101, kRuns, 0.03, [](Rng& rng) {
    int64_t b = 0, c = 0;
    for (int i = 0; i < 200; ++i) {
      const double u = rng.uniform();
      b += u < 0.08 ? 1 : 0;
      c += u >= 0.08 && u < 0.13 ? 1 : 0;
    }
    return paired_difference_interval(b, c, 200, 0.95);
  });
  EXPECT_GE(c95, 0.93);
  EXPECT_LE(c95, 0.97);
}

// Items of `m` tokens (or turns), 5 to 60 (or a session's 5 turns), each token an event with the
// item's own probability: `spread` 0 gives every item `p` (no within-session correlation).
Interval simulate_rate(Rng& rng, int items, double p, double spread, bool sessions) {
  std::vector<ItemRatio> r;
  for (int i = 0; i < items; ++i) {
    const int m = sessions ? 5 : 5 + static_cast<int>(rng.below(56));
    const double pi = p + spread * (2 * rng.uniform() - 1);  // uniform around p: the mean stays p
    double events = 0;
    for (int t = 0; t < m; ++t) events += rng.uniform() < pi ? 1 : 0;
    r.push_back({events, static_cast<double>(m)});
  }
  return clustered_ratio_interval(r, RatioKind::rate, 0.95);
}

TEST(Coverage, ClusteredRatesWithAndWithoutSessionCorrelation) {
  // Same top-1 over tokens of 150 items; first-token differs over 5-turn sessions of 150 items.
  const double top1_iid = coverage(201, kRuns, 0.9, [](Rng& rng) { return simulate_rate(rng, 150, 0.9, 0.0, false); });
  const double top1_corr = coverage(202, kRuns, 0.9, [](Rng& rng) { return simulate_rate(rng, 150, 0.9, 0.1, false); });
  const double first_iid = coverage(203, kRuns, 0.1, [](Rng& rng) { return simulate_rate(rng, 150, 0.1, 0.0, true); });
  const double first_corr = coverage(204, kRuns, 0.1, [](Rng& rng) { return simulate_rate(rng, 150, 0.1, 0.1, true); });
  for (const double c : {top1_iid, top1_corr, first_iid, first_corr}) {
    EXPECT_GE(c, 0.93);
    EXPECT_LE(c, 0.97);
  }
}

TEST(Coverage, IgnoringTheSessionsWouldNot) {
  // The same correlated tokens counted as independent (every token its own item) cover far less
  // often: why the item, not the token, is the unit.
  const double naive = coverage(202, kRuns, 0.9, [](Rng& rng) {
    std::vector<ItemRatio> tokens;
    for (int i = 0; i < 150; ++i) {
      const int m = 5 + static_cast<int>(rng.below(56));
      const double pi = 0.9 + 0.1 * (2 * rng.uniform() - 1);
      for (int t = 0; t < m; ++t) tokens.push_back({rng.uniform() < pi ? 1.0 : 0.0, 1.0});
    }
    return clustered_ratio_interval(tokens, RatioKind::rate, 0.95);
  });
  EXPECT_LT(naive, 0.85);
}

// Mean KLD over 200 items of 10-50 tokens, each token's KLD lognormal (sigma 1); `item_sigma` > 0
// gives every item its own lognormal scale (within-session correlation). The truth is the
// expected token KLD: exp(mu + 1/2) × exp(item_sigma² / 2).
Interval simulate_kld(Rng& rng, double item_sigma) {
  const double mu = std::log(0.01);
  std::vector<ItemRatio> r;
  for (int i = 0; i < 200; ++i) {
    const int m = 10 + static_cast<int>(rng.below(41));
    const double scale = std::exp(item_sigma * rng.normal());
    double sum = 0;
    for (int t = 0; t < m; ++t) sum += scale * std::exp(mu + rng.normal());
    r.push_back({sum, static_cast<double>(m)});
  }
  return clustered_ratio_interval(r, RatioKind::mean, 0.95);
}

TEST(Coverage, MeanKldWithAndWithoutSessionCorrelation) {
  const double base = std::exp(std::log(0.01) + 0.5);
  const double iid = coverage(301, kRuns, base, [](Rng& rng) { return simulate_kld(rng, 0.0); });
  const double corr = coverage(302, kRuns, base * std::exp(0.5 * 0.5 * 0.5), [](Rng& rng) { return simulate_kld(rng, 0.5); });
  EXPECT_GE(iid, 0.93);
  EXPECT_LE(iid, 0.97);
  EXPECT_GE(corr, 0.93);
  EXPECT_LE(corr, 0.97);
}

}  // namespace
}  // namespace kvgate::scoring
