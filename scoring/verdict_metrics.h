#pragma once
// The metrics a rollout verdict rests on (scoring/verdict.h), one row each: the one list that the
// rollout policy's margin keys, the verdict's checks, their names in text and JSON, and the
// way each item is read come from. Adding a metric is adding a row here (and its margin to
// ci/gates/rollout.json).
#include <array>
#include <cmath>
#include <optional>
#include <string_view>

#include "scoring/aggregate.h"
#include "scoring/position_buckets.h"

namespace kvgate::scoring {

// Which way a metric's value is worse, so which bound of its interval a margin is held against.
enum class Worse { higher, lower };

// The shape of one item's data, which picks the interval (scoring/intervals.h).
enum class ItemShape {
  paired_binary,  // one yes/no per item under the candidate and under the reference
  rate,           // a count of events over the item's tokens or turns
  mean,           // a sum of values over the item's tokens
};

// How a value prints: points (a difference of fractions, ×100), percent (a fraction, ×100), or
// the number itself.
enum class VerdictUnit { points, percent, number };

// One item's part of a config's value. paired_binary: `sum` the candidate's yes (0/1),
// `reference` the reference config's, `weight` 1; rate and mean: the sum over the item's tokens
// or turns and their count.
struct ItemObservation {
  double sum = 0, weight = 0, reference = 0;
};

struct VerdictMetric {
  std::string_view name;        // check and JSON name: "gold_accuracy_drop"
  std::string_view margin_key;  // the rollout policy's key: "gold_accuracy_drop_max"
  std::string_view label;       // what a person reads: "gold-accuracy drop"
  Worse worse;
  ItemShape shape;
  VerdictUnit unit;
  // The candidate's item (paired with the reference config's same item): nullopt where the item
  // did not measure it. The value is what scoring/aggregate.h's summary computes over the items.
  std::optional<ItemObservation> (*per_item)(const ItemScores& candidate, const ItemScores& reference);
  // The candidate's item within one position bucket; nullptr: the metric has no position rows.
  std::optional<ItemObservation> (*per_bucket)(const PositionSums& candidate);
};

namespace verdict_metric_reading {
inline bool token_measured(const ItemScores& s) {
  return s.scored_tokens > 0 && std::isfinite(s.kld_mean) && std::isfinite(s.same_top1);
}
}  // namespace verdict_metric_reading

inline constexpr std::array<VerdictMetric, 4> kVerdictMetrics = {{
    {"gold_accuracy_drop", "gold_accuracy_drop_max", "gold-accuracy drop", Worse::higher, ItemShape::paired_binary,
     VerdictUnit::points,
     [](const ItemScores& c, const ItemScores& r) -> std::optional<ItemObservation> {
       if (!c.exact_match_gold || !r.exact_match_gold) return std::nullopt;
       return ItemObservation{*c.exact_match_gold ? 1.0 : 0.0, 1.0, *r.exact_match_gold ? 1.0 : 0.0};
     },
     nullptr},
    {"same_top1", "same_top1_min", "same top-1", Worse::lower, ItemShape::rate, VerdictUnit::percent,
     [](const ItemScores& c, const ItemScores&) -> std::optional<ItemObservation> {
       if (!verdict_metric_reading::token_measured(c)) return std::nullopt;
       const double n = static_cast<double>(c.scored_tokens);
       return ItemObservation{c.same_top1 * n, n, 0};
     },
     [](const PositionSums& s) -> std::optional<ItemObservation> {
       if (s.tokens <= 0) return std::nullopt;
       return ItemObservation{static_cast<double>(s.same_top1), static_cast<double>(s.tokens), 0};
     }},
    {"kld_mean", "kld_mean_max", "mean KLD", Worse::higher, ItemShape::mean, VerdictUnit::number,
     [](const ItemScores& c, const ItemScores&) -> std::optional<ItemObservation> {
       if (!verdict_metric_reading::token_measured(c)) return std::nullopt;
       const double n = static_cast<double>(c.scored_tokens);
       return ItemObservation{c.kld_mean * n, n, 0};
     },
     [](const PositionSums& s) -> std::optional<ItemObservation> {
       if (s.tokens <= 0 || !std::isfinite(s.kld_sum)) return std::nullopt;
       return ItemObservation{s.kld_sum, static_cast<double>(s.tokens), 0};
     }},
    {"first_token_differs_rate", "first_token_differs_rate_max", "first-token-differs rate", Worse::higher,
     ItemShape::rate, VerdictUnit::percent,
     [](const ItemScores& c, const ItemScores&) -> std::optional<ItemObservation> {
       if (c.answered_turns <= 0) return std::nullopt;
       return ItemObservation{static_cast<double>(c.first_token_differs), static_cast<double>(c.answered_turns), 0};
     },
     nullptr},
}};

// The row named `name`; nullptr when none is.
inline const VerdictMetric* find_verdict_metric(std::string_view name) {
  for (const VerdictMetric& m : kVerdictMetrics)
    if (m.name == name) return &m;
  return nullptr;
}

}  // namespace kvgate::scoring
