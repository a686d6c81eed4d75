// Position buckets, the curves built from them, first-token rates, and the gate's checks by
// position and by first token (issue 32).
#include "scoring/position_buckets.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "scoring/aggregate.h"
#include "scoring/gate.h"
#include "scoring/gate_policy.h"

namespace kvgate::scoring {
namespace {

TEST(PositionBuckets, BoundariesFallIntoTheUpperBucket) {
  EXPECT_EQ(position_bucket(0), 0);
  EXPECT_EQ(position_bucket(1023), 0);
  EXPECT_EQ(position_bucket(1024), 1);
  EXPECT_EQ(position_bucket(2047), 1);
  EXPECT_EQ(position_bucket(2048), 2);
  EXPECT_EQ(position_bucket(4095), 2);
  EXPECT_EQ(position_bucket(4096), 3);
  EXPECT_EQ(position_bucket(8191), 3);
  EXPECT_EQ(position_bucket(8192), 4);
  EXPECT_EQ(position_bucket(16383), 4);
  EXPECT_EQ(position_bucket(16384), 5);
  EXPECT_EQ(position_bucket(32767), 5);
  EXPECT_EQ(position_bucket(32768), 6);
  EXPECT_EQ(position_bucket(65535), 6);
  EXPECT_EQ(position_bucket(65536), 7);
  EXPECT_EQ(position_bucket(131071), 7);
  EXPECT_EQ(position_bucket(131072), 8);
  EXPECT_EQ(position_bucket(10'000'000), 8);
  EXPECT_EQ(position_bucket(-1), 0);
}

TEST(PositionBuckets, NamesAndEnds) {
  const char* names[] = {"0-1k", "1-2k", "2-4k", "4-8k", "8-16k", "16-32k", "32-64k", "64-128k", "128k+"};
  for (int b = 0; b < kPositionBuckets; ++b) EXPECT_EQ(position_bucket_name(b), names[b]);
  EXPECT_EQ(*position_bucket_end(0), 1024);
  EXPECT_EQ(*position_bucket_end(7), 131072);
  EXPECT_FALSE(position_bucket_end(8).has_value());
  EXPECT_EQ(*position_bucket_starting_at(16384), 5);
  EXPECT_FALSE(position_bucket_starting_at(16000).has_value());
}

TEST(PositionBuckets, CurvesAreTokenWeightedPerConfigAndBucket) {
  PositionSums a, b, c;
  a.add(0.1, -0.01, true);
  a.add(0.3, -0.03, false);
  b.add(0.2, 0.0, true);
  c.add(1.0, -0.5, false);
  const std::vector<PositionRow> rows = {
      {"i1", "q4", 0, a}, {"i1", "q4", 5, c}, {"i2", "q4", 0, b}, {"i1", "fp8", 0, b}};
  const std::vector<PositionCurve> curves = position_curves(rows);
  ASSERT_EQ(curves.size(), 2u);
  EXPECT_EQ(curves[0].config, "q4");
  ASSERT_EQ(curves[0].points.size(), 2u);
  EXPECT_EQ(curves[0].points[0].bucket, 0);
  EXPECT_EQ(curves[0].points[0].tokens, 3);
  EXPECT_EQ(curves[0].points[0].items, 2);
  EXPECT_DOUBLE_EQ(curves[0].points[0].kld_mean, (0.1 + 0.3 + 0.2) / 3);
  EXPECT_DOUBLE_EQ(curves[0].points[0].same_top1, 2.0 / 3);
  EXPECT_EQ(curves[0].points[1].bucket, 5);
  EXPECT_DOUBLE_EQ(curves[0].points[1].kld_mean, 1.0);
  EXPECT_DOUBLE_EQ(curves[0].points[1].delta_p_mean, -0.5);
  EXPECT_TRUE(std::isnan(PositionSums{}.kld_mean()));
}

TEST(FirstTokens, RatesAreOverTurnsWithAnAnswer) {
  ItemScores x, y, none;
  x.answered_turns = 3, x.first_token_eos = 1, x.first_token_differs = 2;
  y.answered_turns = 1, y.first_token_eos = 0, y.first_token_differs = 1;
  const ItemAggregate a = aggregate_items(std::vector<ItemScores>{x, y, none});
  EXPECT_EQ(a.answered_turns, 4);
  EXPECT_DOUBLE_EQ(a.first_token_eos_rate, 0.25);
  EXPECT_DOUBLE_EQ(a.first_token_differs_rate, 0.75);
  EXPECT_TRUE(std::isnan(aggregate_items(std::vector<ItemScores>{none}).first_token_eos_rate));
}

// ---- the gate ------------------------------------------------------------------------------

const char* kPositionPolicy = R"({
  "kvgate_gate_policy": 1,
  "bootstrap": {"resamples": 1000, "confidence": 0.95, "seed": 7},
  "rules": [
    {"domain": "*", "kv": "*",
     "positions": [{"metric": "kld_mean", "min_position": 4096, "regression": 0.002, "limit": 0.5},
                   {"metric": "same_top1", "min_position": 16384, "regression": 0.01}],
     "absolute": {"first_token_eos_rate_max": 0.3},
     "regression": {"first_token_differs_rate": 0.1}}
  ]
})";

GatePolicy position_policy() {
  GatePolicy p = parse_gate_policy(kPositionPolicy, "p.json");
  canonicalize_policy_kv(p, [](const GateRule& r) { return std::vector<std::string>{r.kv + "/" + r.kv}; });
  return p;
}

// `n` long items under f16 (reference) and q4_0; each has 1,000 tokens at 0-1k (KLD 0.01) and
// 1,000 at 4-8k whose mean KLD is `long_kld` (varying a little by item).
GateRun long_run(int64_t id, int n, double long_kld) {
  GateRun r;
  r.id = id;
  r.status = "complete";
  r.suite_name = "suite:long-cpu";
  r.suite_hash = "h";
  r.model_sha256 = "sha";
  const ConfigIndex ref = r.add_config({1, "f16/f16", "f16", true});
  const ConfigIndex q4 = r.add_config({2, "q4_0/q4_0", "q4_0", false});
  for (int i = 0; i < n; ++i) {
    const std::string key = "retrieval-" + std::to_string(i);
    r.items.push_back({key, "retrieval", ref, {2000, 0, 0, 0, 1.0, std::nullopt, false}});
    r.items.push_back({key, "retrieval", q4, {2000, 0.02, 0.5, 0.3, 0.9, std::nullopt, false}});
    PositionSums near{1000, 10.0, 0.0, 950}, far{1000, 1000 * (long_kld + 0.001 * (i % 4)), -5.0, 900};
    r.positions.push_back({key, q4, 0, near});
    r.positions.push_back({key, q4, 3, far});
  }
  return r;
}

const CheckResult* find(const GateOutcome& o, const std::string& name) {
  for (const CheckResult& c : o.checks)
    if (c.name == name) return &c;
  return nullptr;
}

TEST(GatePositions, WorseLongBucketKldFailsWhileTheOverallMeanIsUnchanged) {
  const GatePolicy p = position_policy();
  const GateRun base = long_run(1, 8, 0.05), cand = long_run(2, 8, 0.09);
  const GateOutcome o = evaluate_gate(p, &base, cand);
  const CheckResult* c = find(o, "position.regression.kld_mean@4-8k[retrieval, q4_0/q4_0]");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->passed) << c->detail;
  EXPECT_NEAR(c->delta, 0.04, 1e-9);
  EXPECT_EQ(c->kind, CheckKind::position);
  // The item-level mean KLD did not move: only the position check sees the damage.
  for (const CheckResult& x : o.checks)
    if (x.kind == CheckKind::regression) {
      EXPECT_TRUE(x.passed) << x.name;
    }
  // The same runs, identical: never fires.
  const GateOutcome same = evaluate_gate(p, &base, base);
  EXPECT_TRUE(find(same, "position.regression.kld_mean@4-8k[retrieval, q4_0/q4_0]")->passed);
  EXPECT_FALSE(find(same, "position.regression.kld_mean@4-8k[retrieval, q4_0/q4_0]")->skipped);
}

TEST(GatePositions, AbsoluteLimitPerBucket) {
  const GatePolicy p = position_policy();
  const GateOutcome ok = evaluate_gate(p, nullptr, long_run(1, 4, 0.4));
  const CheckResult* c = find(ok, "position.absolute.kld_mean@4-8k[retrieval, q4_0/q4_0]");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->passed) << c->detail;
  const GateOutcome bad = evaluate_gate(p, nullptr, long_run(1, 4, 0.6));
  EXPECT_FALSE(find(bad, "position.absolute.kld_mean@4-8k[retrieval, q4_0/q4_0]")->passed);
  // Buckets below min_position are not checked.
  EXPECT_EQ(find(bad, "position.absolute.kld_mean@0-1k[retrieval, q4_0/q4_0]"), nullptr);
}

TEST(GatePositions, UnreachedPositionsAreSkippedWithTheReasonNeverPassed) {
  const GatePolicy p = position_policy();
  const GateRun base = long_run(1, 4, 0.05), cand = long_run(2, 4, 0.05);
  const GateOutcome o = evaluate_gate(p, &base, cand);
  const CheckResult* c = find(o, "position.same_top1@16k+[retrieval, q4_0/q4_0]");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->skipped);
  EXPECT_NE(c->detail.find("reaches position 16384"), std::string::npos) << c->detail;
  EXPECT_GE(o.skipped(), 1u);
  // A gap between reached buckets is a skipped check of its own (4-8k reached; a 16-32k row in
  // the candidate only makes 8-16k a gap and 16-32k unpaired).
  GateRun far = cand;
  far.positions.push_back({"retrieval-0", 1, 5, PositionSums{10, 0.1, 0, 10}});
  const GateOutcome g = evaluate_gate(p, &base, far);
  const CheckResult* gap = find(g, "position.regression.kld_mean@8-16k[retrieval, q4_0/q4_0]");
  ASSERT_NE(gap, nullptr);
  EXPECT_TRUE(gap->skipped);
  const CheckResult* unpaired = find(g, "position.regression.same_top1@16-32k[retrieval, q4_0/q4_0]");
  ASSERT_NE(unpaired, nullptr);
  EXPECT_TRUE(unpaired->skipped) << unpaired->detail;
  EXPECT_NE(unpaired->detail.find("in both runs"), std::string::npos);
}

TEST(GatePositions, PairedConfigsCarryTheirPositionRows) {
  const GatePolicy p = position_policy();
  GateRun base = long_run(1, 8, 0.05);
  base.configs[1].spec = "q4_1/q4_1";
  const GateOutcome o = evaluate_gate(p, &base, long_run(2, 8, 0.09), {{1, 1}});
  const CheckResult* c = find(o, "position.regression.kld_mean@4-8k[retrieval, q4_0/q4_0]");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->passed) << c->detail;
}

TEST(GatePositions, PolicyErrorsNameTheEntry) {
  auto parse = [](const std::string& positions) {
    return parse_gate_policy(R"({"kvgate_gate_policy": 1, "rules": [{"positions": )" + positions + "}]}", "p.json");
  };
  EXPECT_NO_THROW(parse("null"));
  EXPECT_FALSE(parse("null").limits_for("d", "k").positions->size());
  try {
    parse(R"([{"metric": "kld_mean", "min_position": 16000, "regression": 0.1}])");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rules[0].positions[0].min_position"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16384"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse(R"([{"metric": "kld_p99", "min_position": 0, "regression": 0.1}])"), Error);
  EXPECT_THROW(parse(R"([{"metric": "kld_mean", "min_position": 0}])"), Error);
  EXPECT_THROW(parse(R"([{"metric": "same_top1", "min_position": 0, "limit": 1.5}])"), Error);
  EXPECT_THROW(parse(R"([{"metric": "kld_mean", "min_position": 0, "limit": 1, "bucket": 2}])"), Error);
  EXPECT_THROW(parse(R"({"metric": "kld_mean"})"), Error);
}

TEST(GatePositions, MoreSpecificRuleReplacesTheList) {
  const GatePolicy p = parse_gate_policy(R"({"kvgate_gate_policy": 1, "rules": [
    {"positions": [{"metric": "kld_mean", "min_position": 0, "limit": 1}]},
    {"domain": "tables", "positions": null},
    {"domain": "retrieval", "positions": [{"metric": "same_top1", "min_position": 8192, "limit": 0.5}]}]})",
                                         "p.json");
  ASSERT_EQ(p.limits_for("policy", "q").positions->size(), 1u);
  EXPECT_TRUE(p.limits_for("tables", "q").positions->empty());
  EXPECT_EQ(p.limits_for("retrieval", "q").positions->at(0).metric, "same_top1");
}

TEST(GateFirstToken, AbsoluteAndRegressionChecks) {
  const GatePolicy p = position_policy();
  GateRun base = long_run(1, 8, 0.05), cand = long_run(2, 8, 0.05);
  for (GateRun* r : {&base, &cand})
    for (GateItem& it : r->items) it.scores.answered_turns = 2;
  // The candidate's q4_0 answers end at their first token on 1 turn in 2 and differ from the
  // reference's first token on every turn.
  for (GateItem& it : cand.items)
    if (it.config == 1) it.scores.first_token_eos = 1, it.scores.first_token_differs = 2;
  const GateOutcome o = evaluate_gate(p, &base, cand);
  const CheckResult* eos = find(o, "absolute.first_token_eos_rate[retrieval, q4_0/q4_0]");
  ASSERT_NE(eos, nullptr);
  EXPECT_FALSE(eos->passed) << eos->detail;
  EXPECT_DOUBLE_EQ(eos->candidate_value, 0.5);
  const CheckResult* differs = find(o, "regression.first_token_differs_rate[retrieval, q4_0/q4_0]");
  ASSERT_NE(differs, nullptr);
  EXPECT_FALSE(differs->passed) << differs->detail;
  const GateOutcome same = evaluate_gate(p, &base, base);
  EXPECT_TRUE(find(same, "absolute.first_token_eos_rate[retrieval, q4_0/q4_0]")->passed);
  EXPECT_TRUE(find(same, "regression.first_token_differs_rate[retrieval, q4_0/q4_0]")->passed);
}

}  // namespace
}  // namespace kvgate::scoring
