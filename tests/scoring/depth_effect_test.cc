// Quality by depth on the same documents (issue 42): intervals over documents, the paired depth
// effect, and the gate's checks by depth.
#include "scoring/depth_effect.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "scoring/gate.h"
#include "scoring/gate_policy.h"

namespace kvgate::scoring {
namespace {

BootstrapSettings settings(uint64_t seed = 11) { return {2000, 0.95, seed}; }

// `n` documents under one config; document i has `tokens` tokens in bucket 0 at mean KLD
// 0.01 * (1 + i % 3) and, when `deep_kld_factor` > 0, as many in bucket 3 at that many times
// its own shallow mean (plus a little per document).
std::vector<PositionRow> sweep_rows(int n, int64_t tokens, double deep_kld_factor, const std::string& config = "q4") {
  std::vector<PositionRow> rows;
  for (int i = 0; i < n; ++i) {
    const std::string key = "doc-" + std::to_string(i);
    const double shallow = 0.01 * (1 + i % 3);
    const auto t = static_cast<double>(tokens);
    rows.push_back({key, config, 0, {tokens, shallow * t, 0.0, tokens * 9 / 10}});
    if (deep_kld_factor > 0)
      rows.push_back({key, config, 3, {tokens, (deep_kld_factor * shallow + 0.001 * (i % 2)) * t, 0.0, tokens * 8 / 10}});
  }
  return rows;
}

TEST(DepthEffect, DocumentsAddTheirTurnsAndOtherConfigsAreIgnored) {
  std::vector<PositionRow> rows = sweep_rows(3, 100, 2.0);
  rows.push_back({"doc-0", "q4", 0, {50, 5.0, 0.0, 50}});  // a second turn of doc-0
  rows.push_back({"doc-0", "fp8", 0, {50, 5.0, 0.0, 50}});
  const ConfigDocuments docs = config_documents(rows, "q4");
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs.at("doc-0").at(0).tokens, 150);
  EXPECT_DOUBLE_EQ(docs.at("doc-0").at(0).kld_sum, 1.0 + 5.0);
}

TEST(DepthEffect, BucketIntervalBracketsTheTokenWeightedMeanAndIsReproducible) {
  const ConfigDocuments docs = config_documents(sweep_rows(12, 500, 2.0), "q4");
  const BucketEstimate e = bucket_estimate(docs, 0, settings(), 5);
  EXPECT_EQ(e.documents, 12);
  EXPECT_EQ(e.tokens, 6000);
  EXPECT_DOUBLE_EQ(e.kld_mean.value, 0.02);  // (0.01 + 0.02 + 0.03) / 3, four of each
  EXPECT_LT(e.kld_mean.low, e.kld_mean.value);
  EXPECT_GT(e.kld_mean.high, e.kld_mean.value);
  EXPECT_GT(e.kld_mean.low, 0.01);
  EXPECT_LT(e.kld_mean.high, 0.03);
  const BucketEstimate again = bucket_estimate(docs, 0, settings(), 5);
  EXPECT_EQ(again.kld_mean.low, e.kld_mean.low);
  EXPECT_EQ(again.kld_mean.high, e.kld_mean.high);
}

TEST(DepthEffect, IntervalsResampleDocumentsNotTokens) {
  // A hundred times the tokens per document, with the same per-document means: a bootstrap over
  // tokens would narrow the interval tenfold; over documents it is the same.
  const BucketEstimate few = bucket_estimate(config_documents(sweep_rows(8, 10, 0), "q4"), 0, settings(), 3);
  const BucketEstimate many = bucket_estimate(config_documents(sweep_rows(8, 1000, 0), "q4"), 0, settings(), 3);
  EXPECT_EQ(many.tokens, 100 * few.tokens);
  EXPECT_NEAR(many.kld_mean.low, few.kld_mean.low, 1e-12);
  EXPECT_NEAR(many.kld_mean.high, few.kld_mean.high, 1e-12);
  EXPECT_GT(many.kld_mean.high - many.kld_mean.low, 0.002);
}

TEST(DepthEffect, TooFewDocumentsGiveNoInterval) {
  const BucketEstimate e = bucket_estimate(config_documents(sweep_rows(2, 1000, 2.0), "q4"), 0, settings(), 1);
  EXPECT_EQ(e.documents, 2);
  EXPECT_TRUE(std::isfinite(e.kld_mean.value));
  EXPECT_TRUE(std::isnan(e.kld_mean.low));
  const DepthEffect d = depth_effect(config_documents(sweep_rows(2, 1000, 2.0), "q4"), 0, 3, settings(), 1);
  EXPECT_FALSE(d.measured());
  EXPECT_TRUE(std::isfinite(d.kld_ratio.value));
  EXPECT_TRUE(std::isnan(d.kld_ratio.low));
}

TEST(DepthEffect, PairedRatioAndDifferenceOnTheDocumentsHoldingBoth) {
  std::vector<PositionRow> rows = sweep_rows(12, 800, 2.0);
  // Two short documents reach only the shallow bucket: they are left out of the pairing.
  for (const PositionRow& r : sweep_rows(2, 800, 0)) rows.push_back({"short-" + r.item_key, r.config, r.bucket, r.sums});
  const ConfigDocuments docs = config_documents(rows, "q4");
  const DepthEffect d = depth_effect(docs, 0, 3, settings(), 9);
  ASSERT_TRUE(d.measured());
  EXPECT_EQ(d.documents, 12);
  EXPECT_EQ(d.shallow_tokens, 12 * 800);
  EXPECT_DOUBLE_EQ(d.shallow_kld, 0.02);
  EXPECT_NEAR(d.deep_kld, 0.04 + 0.0005, 1e-12);
  EXPECT_NEAR(d.kld_ratio.value, 0.0405 / 0.02, 1e-12);
  EXPECT_NEAR(d.kld_difference.value, 0.0205, 1e-12);
  EXPECT_LE(d.kld_ratio.low, d.kld_ratio.value);
  EXPECT_GE(d.kld_ratio.high, d.kld_ratio.value);
  EXPECT_GT(d.kld_ratio.low, 1.5);  // every document doubles: the interval excludes "no change"
  EXPECT_GT(d.kld_difference.low, 0);
  EXPECT_NEAR(d.top1_difference.value, -0.1, 1e-12);
  EXPECT_LT(d.top1_difference.high, 0);
  // No worsening: the ratio's interval holds 1.
  const DepthEffect flat = depth_effect(config_documents(sweep_rows(12, 800, 1.0), "q4"), 0, 3, settings(), 9);
  EXPECT_LT(flat.kld_difference.low, 0.0011);
}

TEST(DepthEffect, ZeroShallowKldHasNoRatio) {
  std::vector<PositionRow> rows;
  for (int i = 0; i < 4; ++i) {
    rows.push_back({"d" + std::to_string(i), "q8", 0, {10, 0.0, 0.0, 10}});
    rows.push_back({"d" + std::to_string(i), "q8", 2, {10, 0.1, 0.0, 10}});
  }
  const DepthEffect d = depth_effect(config_documents(rows, "q8"), 0, 2, settings(), 1);
  EXPECT_TRUE(std::isnan(d.kld_ratio.value));
  EXPECT_TRUE(std::isnan(d.kld_ratio.low));
  EXPECT_NEAR(d.kld_difference.value, 0.01, 1e-12);
}

TEST(DepthEffect, CurvePairsEveryBucketWithTheShallowestAndPicksTheDeepestShared) {
  std::vector<PositionRow> rows = sweep_rows(5, 100, 3.0);
  // Bucket 5 is reached by two documents only: shown, but not the headline.
  rows.push_back({"doc-0", "q4", 5, {100, 5.0, 0.0, 50}});
  rows.push_back({"doc-1", "q4", 5, {100, 5.0, 0.0, 50}});
  const DepthCurve c = depth_curve(config_documents(rows, "q4"), "q4", settings());
  ASSERT_EQ(c.points.size(), 3u);
  EXPECT_EQ(c.points[0].bucket, 0);
  EXPECT_EQ(c.points[0].vs_shallow.documents, 0);
  EXPECT_EQ(c.points[1].vs_shallow.documents, 5);
  EXPECT_EQ(c.points[2].vs_shallow.documents, 2);
  ASSERT_TRUE(c.effect.has_value());
  EXPECT_EQ(c.effect->deep, 3);
  EXPECT_EQ(deepest_paired_bucket(config_documents(rows, "q4"), 0), 3);
  EXPECT_FALSE(depth_curve(config_documents(sweep_rows(2, 100, 3.0), "q4"), "q4", settings()).effect.has_value());
}

// ---- the gate ------------------------------------------------------------------------------

const char* kDepthPolicy = R"({
  "kvgate_gate_policy": 1,
  "bootstrap": {"resamples": 1000, "confidence": 0.95, "seed": 7},
  "rules": [
    {"domain": "*", "kv": "*",
     "depth": [{"metric": "kld_mean", "shallow": 0, "min_position": 2048, "ratio_max": 2.5, "floor": 0.005},
               {"metric": "same_top1", "min_position": 4096, "floor": 0.05}]}
  ]
})";

GatePolicy depth_policy() {
  GatePolicy p = parse_gate_policy(kDepthPolicy, "p.json");
  canonicalize_policy_kv(p, [](const GateRule& r) { return std::vector<std::string>{r.kv}; });
  return p;
}

GateRun sweep_run(int n, double deep_factor) {
  GateRun r;
  r.id = 1;
  r.status = "complete";
  const ConfigIndex ref = r.add_config({1, "f16", "", true}), q4 = r.add_config({2, "q4", "", false});
  for (const PositionRow& row : sweep_rows(n, 800, deep_factor)) {
    EXPECT_EQ(row.config, "q4");
    r.positions.push_back({row.item_key, q4, row.bucket, row.sums});
  }
  for (int i = 0; i < n; ++i) {
    const std::string key = "doc-" + std::to_string(i);
    r.items.push_back({key, "text", ref, {1600, 0, 0, 0, 1.0, std::nullopt, false}});
    r.items.push_back({key, "text", q4, {1600, 0.03, 0.5, 0.3, 0.85, std::nullopt, false}});
  }
  return r;
}

const CheckResult* find(const GateOutcome& o, const std::string& name) {
  for (const CheckResult& c : o.checks)
    if (c.name == name) return &c;
  return nullptr;
}

TEST(GateDepth, RealGrowthBeyondTheRatioFailsWithoutABaseline) {
  const GateOutcome o = evaluate_gate(depth_policy(), nullptr, sweep_run(10, 3.0));
  const CheckResult* c = find(o, "position.depth.kld_mean@4-8k/0-1k[*, q4]");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->passed) << c->detail;
  EXPECT_EQ(c->items, 10u);
  EXPECT_DOUBLE_EQ(c->threshold, 2.5);
  EXPECT_NE(c->detail.find("on the same 10 documents"), std::string::npos) << c->detail;
  // 2-4k is reached by no document: skipped, never passed.
  const CheckResult* gap = find(o, "position.depth.kld_mean@2-4k/0-1k[*, q4]");
  ASSERT_NE(gap, nullptr);
  EXPECT_TRUE(gap->skipped);
  // Top-1 falls 10 points, more than its 5-point floor.
  const CheckResult* top1 = find(o, "position.depth.same_top1@4-8k/0-1k[*, q4]");
  ASSERT_NE(top1, nullptr);
  EXPECT_FALSE(top1->passed) << top1->detail;
  // The reference has no depth checks.
  for (const CheckResult& x : o.checks) EXPECT_NE(x.config, "f16") << x.name;
}

TEST(GateDepth, GrowthWithinTheRatioPassesAndFewDocumentsSkip) {
  const GateOutcome within = evaluate_gate(depth_policy(), nullptr, sweep_run(10, 2.0));
  const CheckResult* c = find(within, "position.depth.kld_mean@4-8k/0-1k[*, q4]");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->passed) << c->detail;
  EXPECT_FALSE(c->skipped);
  const GateOutcome few = evaluate_gate(depth_policy(), nullptr, sweep_run(2, 3.0));
  const CheckResult* s = find(few, "position.depth.kld_mean@4-8k/0-1k[*, q4]");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->skipped) << s->detail;
  EXPECT_TRUE(s->passed);
}

TEST(GateDepth, NoBucketReachedIsOneSkippedCheck) {
  GateRun r = sweep_run(10, 0);  // only 0-1k
  const GateOutcome o = evaluate_gate(depth_policy(), nullptr, r);
  const CheckResult* c = find(o, "position.depth.kld_mean@2k+/0-1k[*, q4]");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->skipped);
  EXPECT_NE(c->detail.find("no scored token of the run reaches position 2048"), std::string::npos) << c->detail;
}

TEST(GateDepth, PolicyErrorsNameTheKey) {
  auto parse = [](const std::string& rule) {
    return parse_gate_policy(R"({"kvgate_gate_policy": 1, "rules": [)" + rule + "]}", "p.json");
  };
  auto message = [&](const std::string& rule) {
    try {
      parse(rule);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(R"({"domain": "tables", "depth": [{"metric": "kld_mean", "min_position": 2048, "floor": 0.1}]})")
                .find("rules[0].depth: a depth effect is measured over all of a run's documents"),
            std::string::npos);
  EXPECT_NE(message(R"({"depth": [{"metric": "same_top1", "min_position": 2048, "ratio_max": 2}]})")
                .find("rules[0].depth[0].ratio_max"),
            std::string::npos);
  EXPECT_NE(message(R"({"depth": [{"metric": "kld_mean", "shallow": 2048, "min_position": 2048, "floor": 0.1}]})")
                .find("rules[0].depth[0].min_position: must be deeper"),
            std::string::npos);
  EXPECT_NE(message(R"({"depth": [{"metric": "kld_mean", "min_position": 2048}]})").find("checks nothing"),
            std::string::npos);
  EXPECT_NE(message(R"({"depth": [{"metric": "kld_mean", "min_position": 2000, "floor": 0.1}]})")
                .find("rules[0].depth[0].min_position: expected the start of a position bucket"),
            std::string::npos);
  EXPECT_NE(message(R"({"depth": [{"metric": "kld_mean", "min_position": 2048, "ratio_max": 0.5}]})")
                .find("at least 1"),
            std::string::npos);
  // A more specific rule's null turns the checks off for its config.
  GatePolicy p = parse(R"({"depth": [{"metric": "kld_mean", "min_position": 2048, "floor": 0.1}]}, {"kv": "q8", "depth": null})");
  EXPECT_EQ(p.limits_for("*", "q4").depth->size(), 1u);
  EXPECT_TRUE(p.limits_for("*", "q8").depth->empty());
}

}  // namespace
}  // namespace kvgate::scoring
