// The one per-config summary (scoring/aggregate.h) on hand-computed numbers.
#include "scoring/aggregate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace kvgate::scoring {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(Aggregate, TokenWeightedMeansAndItemTails) {
  // scores: tokens, mean KLD, max KLD, p99 KLD, top-1, gold match, diverged
  const std::vector<ItemScores> items = {
      {100, 0.01, 0.5, 0.2, 0.9, true, false},
      {300, 0.03, 0.9, 0.4, 0.7, false, true},
      {0, 0, 0, 0, 0, std::nullopt, std::nullopt},  // nothing scored: counted, never averaged
  };
  const ItemAggregate a = aggregate_items(items);
  EXPECT_EQ(a.items, 3);
  EXPECT_EQ(a.scored_tokens, 400);
  EXPECT_DOUBLE_EQ(a.kld_mean, (0.01 * 100 + 0.03 * 300) / 400);
  EXPECT_DOUBLE_EQ(a.same_top1, (0.9 * 100 + 0.7 * 300) / 400);
  EXPECT_DOUBLE_EQ(a.kld_p99, 0.2 + 0.99 * (0.4 - 0.2)) << "p99 over the two items that scored tokens";
  EXPECT_DOUBLE_EQ(a.kld_max, 0.9);
  EXPECT_EQ(a.gold_items, 2);
  EXPECT_DOUBLE_EQ(a.gold_accuracy, 0.5);
  EXPECT_DOUBLE_EQ(a.divergence_rate, 0.5);
}

TEST(Aggregate, UnmeasuredIsNaNAndAnItemWithoutAMeanIsLeftOut) {
  const ItemAggregate none = aggregate_items({});
  EXPECT_EQ(none.items, 0);
  for (double v : {none.kld_mean, none.same_top1, none.kld_p99, none.kld_max, none.gold_accuracy, none.divergence_rate})
    EXPECT_TRUE(std::isnan(v));
  const std::vector<ItemScores> items = {{50, 0.02, 0.1, 0.05, 0.8, std::nullopt, std::nullopt},
                                         {50, kNaN, kNaN, kNaN, kNaN, std::nullopt, std::nullopt}};
  const ItemAggregate a = aggregate_items(items);
  EXPECT_EQ(a.scored_tokens, 100);
  EXPECT_DOUBLE_EQ(a.kld_mean, 0.02);
  EXPECT_DOUBLE_EQ(a.kld_p99, 0.05);
  EXPECT_TRUE(std::isnan(a.gold_accuracy));
}

TEST(Aggregate, AccumulatorEqualsTheSpanFormBitForBit) {
  std::vector<ItemScores> items;
  for (int i = 0; i < 37; ++i)
    items.push_back({10 + i, 0.001 * i + 1e-7 / (i + 1), 0.01 * i, 0.005 * i, 1.0 - 0.01 * i, i % 2 == 0, i % 3 == 0});
  ItemAggregator acc;
  for (const ItemScores& it : items) acc.add(it);
  const ItemAggregate x = acc.result(), y = aggregate_items(items);
  EXPECT_EQ(x.kld_mean, y.kld_mean);
  EXPECT_EQ(x.same_top1, y.same_top1);
  EXPECT_EQ(x.kld_p99, y.kld_p99);
}

TEST(Aggregate, LatencyPercentilesSkipTurnsWithoutATpot) {
  const std::vector<TurnLatency> turns = {{10, 2}, {20, 4}, {30, 0}, {40, kNaN}, {kNaN, 6}};
  const LatencyAggregate l = aggregate_latency(turns);
  EXPECT_EQ(l.ttft_turns, 4u);
  EXPECT_EQ(l.tpot_turns, 3u) << "a one-token turn (stored TPOT 0) has no TPOT";
  EXPECT_DOUBLE_EQ(l.ttft_p50, 25);
  EXPECT_DOUBLE_EQ(l.tpot_p50, 4);
  EXPECT_DOUBLE_EQ(l.tpot_p99, 4 + 0.98 * 2);
  const LatencyAggregate none = aggregate_latency({});
  EXPECT_TRUE(std::isnan(none.ttft_p50));
  EXPECT_TRUE(std::isnan(none.tpot_p95));
}

TEST(Aggregate, DriftIsTheMeanOverSessionsPerTurn) {
  const std::vector<SessionTurn> turns = {{0, 0.01}, {1, 0.02}, {0, 0.03}, {1, 0.06}, {2, kNaN}};
  const auto drift = drift_over_turns(turns);
  ASSERT_EQ(drift.size(), 2u);
  EXPECT_DOUBLE_EQ(drift.at(0), 0.02);
  EXPECT_DOUBLE_EQ(drift.at(1), 0.04);
}

TEST(Aggregate, PerTurnMeansSkipWhatATurnDidNotMeasure) {
  // Two sessions: the second has no turn 2, a one-token answer at turn 1 (TPOT 0) and no TTFT at turn 0.
  const std::vector<SessionTurnScores> turns = {{0, 100, 0.01, 1.0, 10, 2},   {1, 200, 0.02, 0.5, 20, 4},
                                                {2, 300, kNaN, 0.25, 30, 6},  {0, 120, 0.03, 0.0, kNaN, 4},
                                                {1, 220, 0.06, 1.0, 40, 0}};
  const auto m = means_over_sessions(turns);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m.at(0).sessions, 2u);
  EXPECT_EQ(m.at(2).sessions, 1u);
  EXPECT_DOUBLE_EQ(m.at(0).context_tokens, 110);
  EXPECT_DOUBLE_EQ(m.at(0).same_top1, 0.5);
  EXPECT_DOUBLE_EQ(m.at(0).ttft_ms, 10) << "the session without a TTFT is left out";
  EXPECT_DOUBLE_EQ(m.at(0).tpot_ms, 3);
  EXPECT_DOUBLE_EQ(m.at(1).tpot_ms, 4) << "a one-token answer has no TPOT";
  EXPECT_TRUE(std::isnan(m.at(2).kld_mean));
  EXPECT_DOUBLE_EQ(m.at(1).kld_mean, 0.04);
  // drift_over_turns is its KLD column, bit for bit.
  std::vector<SessionTurn> kld;
  for (const SessionTurnScores& t : turns) kld.push_back({t.turn_index, t.kld_mean});
  const auto drift = drift_over_turns(kld);
  ASSERT_EQ(drift.size(), 2u);
  EXPECT_EQ(drift.at(1), m.at(1).kld_mean);
}

TEST(GoldSignal, AReferenceThatCannotAnswerMakesAccuracyNotApplicable) {
  // The smoke suite on the 135M model: the reference answers none of 10 gold questions.
  EXPECT_FALSE(gold_signal(0, 10).informative());
  EXPECT_EQ(gold_signal(0, 10).unavailable(), "n/a (reference 0/10)");
  EXPECT_NE(gold_signal(0, 10).note().find("0 of 10"), std::string::npos);
  // Fewer than 5 correct answers is too few whatever the rate.
  EXPECT_FALSE(gold_signal(4, 4).informative());
  EXPECT_EQ(gold_signal(4, 4).unavailable(), "n/a (reference 4/4)");
  // 5 correct but under 20 % of those asked.
  EXPECT_FALSE(gold_signal(5, 26).informative());
  EXPECT_TRUE(gold_signal(5, 25).informative()) << "exactly 20 % is enough";
  EXPECT_TRUE(gold_signal(5, 10).informative());
  EXPECT_EQ(gold_signal(5, 10).unavailable(), "");
  EXPECT_EQ(gold_signal(5, 10).note(), "");
  // Nothing asked: not applicable, but no note (there is nothing to explain).
  EXPECT_FALSE(gold_signal(0, 0).informative());
  EXPECT_EQ(gold_signal(0, 0).unavailable(), "n/a (no gold answers)");
  EXPECT_EQ(gold_signal(0, 0).note(), "");
}

TEST(GoldSignal, ReadsTheReferencesAggregate) {
  std::vector<ItemScores> items;
  for (int i = 0; i < 10; ++i) items.push_back({10, 0, 0, 0, 1, i < 6, std::nullopt});
  const ItemAggregate a = aggregate_items(items);
  EXPECT_EQ(a.gold_correct, 6);
  EXPECT_EQ(a.gold_items, 10);
  EXPECT_TRUE(gold_signal(a).informative());
}

}  // namespace
}  // namespace kvgate::scoring
