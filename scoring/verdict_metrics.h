#pragma once
// The metrics a rollout verdict rests on (scoring/verdict.h), one row each: which metrics of the
// metric table (scoring/metrics.h) the verdict judges and how its interval reads each item. The
// name, label, direction and margin key are the metric's absolute check's (the rollout policy's
// margins are the gate policy's absolute keys). Judging another metric is a row here (and its
// margin in ci/gates/rollout.json).
#include <array>
#include <cmath>
#include <optional>
#include <string_view>

#include "scoring/aggregate.h"
#include "scoring/metrics.h"
#include "scoring/position_buckets.h"

namespace kvgate::scoring {

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
  Metric metric;
  ItemShape shape;
  // The candidate's item (paired with the reference config's same item): nullopt where the item
  // did not measure it. The value is what scoring/aggregate.h's summary computes over the items.
  std::optional<ItemObservation> (*per_item)(const ItemScores& candidate, const ItemScores& reference);

  const MetricInfo& info() const { return metric_info(metric); }
  std::string name() const { return absolute_check_name(info()); }  // check and JSON name: "gold_accuracy_drop"
  std::string label() const { return absolute_check_label(info()); }  // "gold accuracy drop"
  std::string_view margin_key() const { return info().absolute_key; }  // "gold_accuracy_drop_max"
  Worse worse() const { return absolute_check_worse(info()); }
  VerdictUnit unit() const {
    if (info().absolute == AbsoluteLimit::drop_from_reference) return VerdictUnit::points;
    return info().unit == MetricUnit::fraction ? VerdictUnit::percent : VerdictUnit::number;
  }
  // Whether the metric has position rows, and the candidate's item within one bucket.
  bool by_position() const { return info().of_bucket != nullptr; }
  std::optional<ItemObservation> per_bucket(const PositionSums& candidate) const {
    const std::optional<BucketObservation> o = info().of_bucket(candidate);
    if (!o || !std::isfinite(o->sum)) return std::nullopt;  // an interval takes measured sums only
    return ItemObservation{o->sum, o->tokens, 0};
  }
};

namespace verdict_metric_reading {
inline bool token_measured(const ItemScores& s) {
  return s.scored_tokens > 0 && std::isfinite(s.kld_mean) && std::isfinite(s.same_top1);
}
}  // namespace verdict_metric_reading

inline constexpr std::array<VerdictMetric, 4> kVerdictMetrics = {{
    {Metric::gold_accuracy, ItemShape::paired_binary,
     [](const ItemScores& c, const ItemScores& r) -> std::optional<ItemObservation> {
       if (!c.exact_match_gold || !r.exact_match_gold) return std::nullopt;
       return ItemObservation{*c.exact_match_gold ? 1.0 : 0.0, 1.0, *r.exact_match_gold ? 1.0 : 0.0};
     }},
    {Metric::same_top1, ItemShape::rate,
     [](const ItemScores& c, const ItemScores&) -> std::optional<ItemObservation> {
       if (!verdict_metric_reading::token_measured(c)) return std::nullopt;
       const double n = static_cast<double>(c.scored_tokens);
       return ItemObservation{c.same_top1 * n, n, 0};
     }},
    {Metric::kld_mean, ItemShape::mean,
     [](const ItemScores& c, const ItemScores&) -> std::optional<ItemObservation> {
       if (!verdict_metric_reading::token_measured(c)) return std::nullopt;
       const double n = static_cast<double>(c.scored_tokens);
       return ItemObservation{c.kld_mean * n, n, 0};
     }},
    {Metric::first_token_differs_rate, ItemShape::rate,
     [](const ItemScores& c, const ItemScores&) -> std::optional<ItemObservation> {
       if (c.answered_turns <= 0) return std::nullopt;
       return ItemObservation{static_cast<double>(c.first_token_differs), static_cast<double>(c.answered_turns), 0};
     }},
}};

// The row named `name`; nullptr when none is.
inline const VerdictMetric* find_verdict_metric(std::string_view name) {
  for (const VerdictMetric& m : kVerdictMetrics)
    if (m.name() == name) return &m;
  return nullptr;
}

}  // namespace kvgate::scoring
