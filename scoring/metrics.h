#pragma once
// The metric table: one row per metric a config's summary holds, as kernels/kv_format.h is one row
// per KV format. Everything that names a metric reads it from here: the gate policy's keys
// (scoring/gate_policy.cc), the gate's per-item and per-summary lookups and its check names
// (scoring/gate.cc), the rollout verdict's names, labels and margin keys
// (scoring/verdict_metrics.h), the summary columns and both engine-mode cross-check tables
// (harness/engine_cli.cc, harness/report/report_html.cc). Adding a metric is a row here plus its
// own code (docs/adding-a-metric.md).
//
// Lives in scoring, the lowest layer every user of it may include: it reads scoring's aggregates,
// and the harness sees scoring. The results store (a layer-2 peer) names its columns in its own
// column lists (results/row_digest.cc); a stored column of a metric carries the metric's name.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "scoring/aggregate.h"
#include "scoring/position_buckets.h"

namespace kvgate::scoring {

// Which way a metric's value is worse: the sign of a regression, the side of an interval a margin
// is held against, whether a limit is a ceiling or a floor.
enum class Worse { higher, lower };

// What a value is, which decides how it prints and what a limit on it may be: a fraction in
// [0, 1] (limits too; tables show it ×100 as %), milliseconds, or a plain number (KLD, nats).
enum class MetricUnit { number, fraction, ms };

// The limit a gate policy's "absolute" block may set on a candidate config's value: none, a
// ceiling (KEY_max), a floor (KEY_min), or a ceiling on the reference config's value minus this
// config's over the items both answered (gold_accuracy_drop_max, checked as "<name>_drop").
enum class AbsoluteLimit { none, max, min, drop_from_reference };

// What a domain's items must hold for a metric to be measurable at all, whatever the configs did:
// scored tokens, gold answers the reference config answered, the reference config's greedy
// answers, its stored answers per turn (first-token checks), or timed turns. A metric the data
// allows but a config left unmeasured fails a gate check (unless allowed); one the data does not
// allow is "not applicable".
enum class MetricNeeds { scored_tokens, gold_answers, greedy_answers, stored_answers, timed_turns };

// One position bucket's part of a metric for one item: a sum over its tokens and their count.
struct BucketObservation {
  double sum = 0, tokens = 0;
};

struct MetricInfo {
  std::string_view name;   // in check names, JSON and policy keys: "same_top1"
  std::string_view label;  // what a person reads, everywhere: "same top-1"
  Worse worse;
  MetricUnit unit;
  // The value in a config's summary (scoring/aggregate.h), NaN where nothing measured it.
  double (*of_summary)(const ItemAggregate& quality, const LatencyAggregate& latency);
  // One item's value under one config, NaN where the item did not measure it; nullptr: the metric
  // has no per-item value (latency percentiles), so no regression check.
  double (*of_item)(const ItemScores& item);
  // The gate policy's keys: `absolute_key` in a rule's "absolute" block ("" with
  // AbsoluteLimit::none), `regression_key` in its "regression" block ("": none).
  AbsoluteLimit absolute;
  std::string_view absolute_key;
  std::string_view regression_key;
  // Per position bucket (position and depth checks, the verdict by position): nullopt for a
  // bucket without tokens; the sum as stored (NaN where not measured). nullptr: the metric has no
  // position rows.
  std::optional<BucketObservation> (*of_bucket)(const PositionSums& bucket);
  MetricNeeds needs;
  // Measured against the reference config, so zero on the reference itself (KLD, agreement,
  // divergence); false for what a config's own answers show (gold accuracy, answers that end at
  // once), which the reference config can lose too when the runtime changes.
  bool against_reference;
  // Shown in the engine-mode cross-check (an in-process config beside the endpoint serving it).
  bool cross_check;
};

namespace metric_reading {
// A yes/no per item as 1/0; NaN where the item did not measure it.
inline double flag(const std::optional<bool>& b) { return b ? (*b ? 1.0 : 0.0) : std::numeric_limits<double>::quiet_NaN(); }
// Events over the item's answered turns; NaN without one.
inline double per_turn(int64_t events, int64_t turns) {
  return turns > 0 ? static_cast<double>(events) / static_cast<double>(turns) : std::numeric_limits<double>::quiet_NaN();
}
}  // namespace metric_reading

// The rows, in the order the gate checks them and tables show them. Metric is a row's index
// (the static_asserts below hold the two in step).
enum class Metric : size_t {
  kld_mean,
  kld_p99,
  kld_max,
  same_top1,
  gold_accuracy,
  divergence_rate,
  first_token_eos_rate,
  first_token_differs_rate,
  ttft_p50,
  tpot_p50,
};

inline constexpr std::array<MetricInfo, 10> kMetrics = {{
    {"kld_mean", "mean KLD", Worse::higher, MetricUnit::number,
     [](const ItemAggregate& q, const LatencyAggregate&) { return q.kld_mean; },
     [](const ItemScores& s) { return s.kld_mean; }, AbsoluteLimit::max, "kld_mean_max", "kld_mean",
     [](const PositionSums& b) -> std::optional<BucketObservation> {
       if (b.tokens <= 0) return std::nullopt;
       return BucketObservation{b.kld_sum, static_cast<double>(b.tokens)};
     },
     MetricNeeds::scored_tokens, true, true},
    {"kld_p99", "item KLD p99", Worse::higher, MetricUnit::number,
     [](const ItemAggregate& q, const LatencyAggregate&) { return q.kld_p99; },
     [](const ItemScores& s) { return s.kld_p99; }, AbsoluteLimit::max, "kld_p99_max", "kld_p99", nullptr, MetricNeeds::scored_tokens, true, true},
    {"kld_max", "KLD max", Worse::higher, MetricUnit::number,
     [](const ItemAggregate& q, const LatencyAggregate&) { return q.kld_max; }, nullptr, AbsoluteLimit::none, "", "",
     nullptr, MetricNeeds::scored_tokens, true, true},
    {"same_top1", "same top-1", Worse::lower, MetricUnit::fraction,
     [](const ItemAggregate& q, const LatencyAggregate&) { return q.same_top1; },
     [](const ItemScores& s) { return s.same_top1; }, AbsoluteLimit::min, "same_top1_min", "same_top1",
     [](const PositionSums& b) -> std::optional<BucketObservation> {
       if (b.tokens <= 0) return std::nullopt;
       return BucketObservation{static_cast<double>(b.same_top1), static_cast<double>(b.tokens)};
     },
     MetricNeeds::scored_tokens, true, true},
    {"gold_accuracy", "gold accuracy", Worse::lower, MetricUnit::fraction,
     [](const ItemAggregate& q, const LatencyAggregate&) { return q.gold_accuracy; },
     [](const ItemScores& s) { return metric_reading::flag(s.exact_match_gold); }, AbsoluteLimit::drop_from_reference,
     "gold_accuracy_drop_max", "gold_accuracy", nullptr, MetricNeeds::gold_answers, false, true},
    {"divergence_rate", "greedy divergence rate", Worse::higher, MetricUnit::fraction,
     [](const ItemAggregate& q, const LatencyAggregate&) { return q.divergence_rate; },
     [](const ItemScores& s) { return metric_reading::flag(s.diverged); }, AbsoluteLimit::max, "divergence_rate_max",
     "divergence_rate", nullptr, MetricNeeds::greedy_answers, true, true},
    {"first_token_eos_rate", "first-token EOS rate", Worse::higher, MetricUnit::fraction,
     [](const ItemAggregate& q, const LatencyAggregate&) { return q.first_token_eos_rate; },
     [](const ItemScores& s) { return metric_reading::per_turn(s.first_token_eos, s.answered_turns); },
     AbsoluteLimit::max, "first_token_eos_rate_max", "first_token_eos_rate", nullptr, MetricNeeds::stored_answers, false, false},
    {"first_token_differs_rate", "first-token differs rate", Worse::higher, MetricUnit::fraction,
     [](const ItemAggregate& q, const LatencyAggregate&) { return q.first_token_differs_rate; },
     [](const ItemScores& s) { return metric_reading::per_turn(s.first_token_differs, s.answered_turns); },
     AbsoluteLimit::max, "first_token_differs_rate_max", "first_token_differs_rate", nullptr, MetricNeeds::stored_answers, true, false},
    {"ttft_p50", "TTFT p50", Worse::higher, MetricUnit::ms,
     [](const ItemAggregate&, const LatencyAggregate& l) { return l.ttft_p50; }, nullptr, AbsoluteLimit::none, "", "",
     nullptr, MetricNeeds::timed_turns, false, true},
    {"tpot_p50", "TPOT p50", Worse::higher, MetricUnit::ms,
     [](const ItemAggregate&, const LatencyAggregate& l) { return l.tpot_p50; }, nullptr, AbsoluteLimit::none, "", "",
     nullptr, MetricNeeds::timed_turns, false, true},
}};

inline constexpr size_t kMetricCount = kMetrics.size();

static_assert(kMetrics[static_cast<size_t>(Metric::kld_mean)].name == "kld_mean");
static_assert(kMetrics[static_cast<size_t>(Metric::kld_p99)].name == "kld_p99");
static_assert(kMetrics[static_cast<size_t>(Metric::kld_max)].name == "kld_max");
static_assert(kMetrics[static_cast<size_t>(Metric::same_top1)].name == "same_top1");
static_assert(kMetrics[static_cast<size_t>(Metric::gold_accuracy)].name == "gold_accuracy");
static_assert(kMetrics[static_cast<size_t>(Metric::divergence_rate)].name == "divergence_rate");
static_assert(kMetrics[static_cast<size_t>(Metric::first_token_eos_rate)].name == "first_token_eos_rate");
static_assert(kMetrics[static_cast<size_t>(Metric::first_token_differs_rate)].name == "first_token_differs_rate");
static_assert(kMetrics[static_cast<size_t>(Metric::ttft_p50)].name == "ttft_p50");
static_assert(kMetrics[static_cast<size_t>(Metric::tpot_p50)].name == "tpot_p50");

inline const MetricInfo& metric_info(Metric m) { return kMetrics[static_cast<size_t>(m)]; }

// The row named `name`; nullptr when none is.
inline const MetricInfo* find_metric(std::string_view name) {
  for (const MetricInfo& m : kMetrics)
    if (m.name == name) return &m;
  return nullptr;
}

// The row `m` points into kMetrics at, as a Metric.
inline Metric metric_of(const MetricInfo& m) { return static_cast<Metric>(&m - kMetrics.data()); }

// The absolute check's metric name: the metric's own, or "gold_accuracy_drop" for a drop.
inline std::string absolute_check_name(const MetricInfo& m) {
  return m.absolute == AbsoluteLimit::drop_from_reference ? std::string(m.name) + "_drop" : std::string(m.name);
}
// Its label: "gold accuracy drop".
inline std::string absolute_check_label(const MetricInfo& m) {
  return m.absolute == AbsoluteLimit::drop_from_reference ? std::string(m.label) + " drop" : std::string(m.label);
}
// Which side of the absolute check is worse: a drop is worse the larger it is.
inline Worse absolute_check_worse(const MetricInfo& m) {
  return m.absolute == AbsoluteLimit::drop_from_reference ? Worse::higher : m.worse;
}

// The upper end a limit on the metric may take: fractions (and their drops) live in [0, 1].
inline double limit_upper(const MetricInfo& m) {
  return m.unit == MetricUnit::fraction ? 1.0 : std::numeric_limits<double>::infinity();
}

// A column heading: the label, with the unit its values print in ("same top-1 %" where fractions
// print ×100, "TTFT p50 ms").
inline std::string metric_heading(const MetricInfo& m, bool fractions_as_percent) {
  if (m.unit == MetricUnit::fraction && fractions_as_percent) return std::string(m.label) + " %";
  if (m.unit == MetricUnit::ms) return std::string(m.label) + " ms";
  return std::string(m.label);
}

// The engine-mode cross-check's rows, the same in `kvgate eval`'s output and the report: each
// metric marked cross_check, valued in the emulating config's summary and the engine's.
struct MetricComparison {
  const MetricInfo* metric;
  double emulation, engine;
};
inline std::vector<MetricComparison> cross_check_metrics(const ItemAggregate& emulation_quality,
                                                         const LatencyAggregate& emulation_latency,
                                                         const ItemAggregate& engine_quality,
                                                         const LatencyAggregate& engine_latency) {
  std::vector<MetricComparison> out;
  for (const MetricInfo& m : kMetrics)
    if (m.cross_check)
      out.push_back({&m, m.of_summary(emulation_quality, emulation_latency), m.of_summary(engine_quality, engine_latency)});
  return out;
}

// A value per metric, for a policy's limits: indexed by Metric.
template <typename T>
struct PerMetric {
  std::array<T, kMetricCount> values{};
  T& operator[](Metric m) { return values[static_cast<size_t>(m)]; }
  const T& operator[](Metric m) const { return values[static_cast<size_t>(m)]; }
};

}  // namespace kvgate::scoring
