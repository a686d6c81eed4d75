// The metric table (scoring/metrics.h): its rows agree with themselves, and every policy key,
// gate check and cross-check row it promises comes out of the code that reads it. These iterate
// the table, so a new row is covered without a line of test code.
#include "scoring/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "core/error.h"
#include "scoring/gate.h"
#include "scoring/gate_policy.h"
#include "scoring/verdict_metrics.h"

namespace kvgate::scoring {
namespace {

TEST(MetricTable, RowsAreConsistent) {
  std::set<std::string_view> names, labels, absolute_keys;
  for (const MetricInfo& m : kMetrics) {
    SCOPED_TRACE(std::string(m.name));
    EXPECT_TRUE(names.insert(m.name).second) << "two rows named alike";
    EXPECT_TRUE(labels.insert(m.label).second) << "two rows labelled alike";
    EXPECT_EQ(&metric_info(metric_of(m)), &m);
    EXPECT_EQ(find_metric(m.name), &m);
    ASSERT_NE(m.of_summary, nullptr);
    std::string key_shape;
    switch (m.absolute) {
      case AbsoluteLimit::none: break;
      case AbsoluteLimit::max: key_shape = std::string(m.name) + "_max"; break;
      case AbsoluteLimit::min: key_shape = std::string(m.name) + "_min"; break;
      case AbsoluteLimit::drop_from_reference: key_shape = std::string(m.name) + "_drop_max"; break;
    }
    EXPECT_EQ(m.absolute_key, key_shape);
    // A ceiling on a lower-is-worse metric (or a floor on a higher-is-worse one) would pass harm.
    if (m.absolute == AbsoluteLimit::max) {
      EXPECT_EQ(m.worse, Worse::higher);
    }
    if (m.absolute == AbsoluteLimit::min || m.absolute == AbsoluteLimit::drop_from_reference) {
      EXPECT_EQ(m.worse, Worse::lower);
    }
    // A regression is paired item by item: it needs the per-item value, named as the metric.
    if (!m.regression_key.empty()) {
      EXPECT_EQ(m.regression_key, m.name);
      EXPECT_NE(m.of_item, nullptr);
    }
    if (!m.absolute_key.empty()) {
      EXPECT_TRUE(absolute_keys.insert(m.absolute_key).second);
    }
  }
  EXPECT_EQ(find_metric("top1_agreement"), nullptr) << "one name per metric";
}

// Every key a row names is read by the policy parser into that row's limit, and only there.
TEST(MetricTable, EveryPolicyKeyIsReadIntoItsMetric) {
  for (const MetricInfo& m : kMetrics)
    for (const bool regression : {false, true}) {
      const std::string_view key = regression ? m.regression_key : m.absolute_key;
      if (key.empty()) continue;
      SCOPED_TRACE(std::string(key));
      const std::string block = regression ? "regression" : "absolute";
      const GatePolicy p = parse_gate_policy("{\"kvgate_gate_policy\": 1, \"rules\": [{\"" + block + "\": {\"" +
                                                 std::string(key) + "\": 0.5}}]}",
                                             "policy.json");
      const GateLimits lim = p.limits_for("any", "any");
      const PerMetric<std::optional<double>>& set = regression ? lim.regression : lim.absolute;
      const PerMetric<std::optional<double>>& other = regression ? lim.absolute : lim.regression;
      for (const MetricInfo& n : kMetrics) {
        EXPECT_EQ(set[metric_of(n)].has_value(), &n == &m) << n.name;
        EXPECT_FALSE(other[metric_of(n)].has_value()) << n.name;
      }
      EXPECT_EQ(*set[metric_of(m)], 0.5);
      // Fractions (and their drops) take limits in [0, 1] only.
      const std::string above = "{\"kvgate_gate_policy\": 1, \"rules\": [{\"" + block + "\": {\"" + std::string(key) + "\": 1.5}}]}";
      if (m.unit == MetricUnit::fraction) {
        EXPECT_THROW(parse_gate_policy(above, "policy.json"), Error);
      } else {
        EXPECT_NO_THROW(parse_gate_policy(above, "policy.json"));
      }
    }
}

// A run whose candidate measured every metric, so each absolute limit becomes a decided check.
GateRun run_measuring_everything() {
  GateRun r;
  r.id = 1;
  r.status = "complete";
  const ConfigIndex ref = r.add_config({1, "f16", "", true}), q4 = r.add_config({2, "q4_0", "", false});
  for (int i = 0; i < 8; ++i) {
    const std::string key = "item-" + std::to_string(i);
    ItemScores ref_scores{100, 0, 0, 0, 1.0, true, false, 2, 0, 0};
    ItemScores cand{100, 0.01 * (i + 1), 0.2, 0.1, 0.9, i % 2 == 0, i % 3 == 0, 2, i % 2, 1};
    r.items.push_back({key, "tables", ref, ref_scores});
    r.items.push_back({key, "tables", q4, cand});
  }
  return r;
}

// Each absolute key is checked under its metric's check name and label, each regression key as
// its metric: the gate's lookups come from the table.
TEST(MetricTable, EveryLimitIsCheckedUnderItsMetricsName) {
  std::string absolute, regression;
  for (const MetricInfo& m : kMetrics) {
    if (!m.absolute_key.empty()) absolute += std::string(absolute.empty() ? "" : ", ") + "\"" + std::string(m.absolute_key) + "\": 1";
    if (!m.regression_key.empty())
      regression += std::string(regression.empty() ? "" : ", ") + "\"" + std::string(m.regression_key) + "\": 1";
  }
  const GatePolicy p = parse_gate_policy("{\"kvgate_gate_policy\": 1, \"rules\": [{\"absolute\": {" + absolute +
                                             "}, \"regression\": {" + regression + "}}]}",
                                         "policy.json");
  const GateRun base = run_measuring_everything(), cand = run_measuring_everything();
  const GateOutcome o = evaluate_gate(p, &base, cand);
  ItemAggregator summary;
  for (const GateItem& it : cand.items)
    if (!cand.is_reference(it.config)) summary.add(it.scores);
  const ItemAggregate candidate = summary.result();
  auto find = [&](const std::string& name) -> const CheckResult* {
    for (const CheckResult& c : o.checks)
      if (c.name == name) return &c;
    return nullptr;
  };
  for (const MetricInfo& m : kMetrics) {
    SCOPED_TRACE(std::string(m.name));
    if (!m.absolute_key.empty()) {
      const CheckResult* c = find("absolute." + absolute_check_name(m) + "[tables, q4_0]");
      ASSERT_NE(c, nullptr);
      EXPECT_FALSE(c->skipped) << c->detail;
      if (m.absolute != AbsoluteLimit::drop_from_reference) {
        EXPECT_EQ(c->candidate_value, m.of_summary(candidate, {}));
        EXPECT_EQ(c->detail.rfind(std::string(m.label), 0), 0u) << c->detail;
      }
    }
    if (!m.regression_key.empty()) {
      const CheckResult* c = find("regression." + std::string(m.name) + "[tables, q4_0]");
      ASSERT_NE(c, nullptr);
      EXPECT_TRUE(c->passed) << "identical runs: " << c->detail;
    }
  }
}

TEST(MetricTable, CrossCheckRowsAreTheFlaggedMetricsInTableOrder) {
  ItemAggregate a, b;
  a.kld_mean = 0.1;
  b.kld_mean = 0.2;
  LatencyAggregate la, lb;
  la.ttft_p50 = 5;
  lb.ttft_p50 = 7;
  const std::vector<MetricComparison> rows = cross_check_metrics(a, la, b, lb);
  size_t k = 0;
  for (const MetricInfo& m : kMetrics) {
    if (!m.cross_check) continue;
    ASSERT_LT(k, rows.size());
    EXPECT_EQ(rows[k].metric, &m);
    EXPECT_EQ(rows[k].emulation, m.of_summary(a, la));
    EXPECT_EQ(rows[k].engine, m.of_summary(b, lb));
    if (m.name == "kld_mean") {
      EXPECT_EQ(rows[k].engine, 0.2);
    }
    if (m.name == "ttft_p50") {
      EXPECT_EQ(rows[k].engine, 7);
    }
    ++k;
  }
  EXPECT_EQ(k, rows.size());
  EXPECT_EQ(metric_heading(metric_info(Metric::ttft_p50), false), "TTFT p50 ms");
  EXPECT_EQ(metric_heading(metric_info(Metric::same_top1), true), "same top-1 %");
}

// The verdict's rows take their names, margins and direction from their metrics' absolute checks.
TEST(MetricTable, VerdictMetricsAreAbsoluteChecksOfTheTable) {
  for (const VerdictMetric& v : kVerdictMetrics) {
    SCOPED_TRACE(v.name());
    EXPECT_NE(v.info().absolute, AbsoluteLimit::none);
    EXPECT_EQ(v.margin_key(), v.info().absolute_key);
    EXPECT_EQ(find_verdict_metric(v.name()), &v);
  }
  EXPECT_EQ(find_verdict_metric("gold_accuracy_drop")->label(), "gold accuracy drop");
  EXPECT_EQ(find_verdict_metric("gold_accuracy_drop")->worse(), Worse::higher);
}

}  // namespace
}  // namespace kvgate::scoring
