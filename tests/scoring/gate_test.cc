// Gate policy parsing and gate decisions on synthetic runs built from plain numbers.
#include "scoring/gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "scoring/gate_policy.h"

namespace kvgate::scoring {
namespace {

const char* kPolicy = R"({
  "kvgate_gate_policy": 1,
  "bootstrap": {"resamples": 1000, "confidence": 0.95, "seed": 7},
  "rules": [
    {"domain": "*", "kv": "*",
     "absolute": {"kld_mean_max": 0.1, "kld_p99_max": 1.0, "same_top1_min": 0.8, "gold_accuracy_drop_max": 0.5,
                  "divergence_rate_max": 1.0},
     "regression": {"kld_mean": 0.002, "kld_p99": 0.05, "same_top1": 0.01, "gold_accuracy": 0.1, "divergence_rate": 0.2}},
    {"domain": "tables", "kv": "*", "absolute": {"kld_mean_max": 0.05}},
    {"domain": "*", "kv": "q4_0", "absolute": {"kld_mean_max": 0.2, "same_top1_min": null}},
    {"domain": "tables", "kv": "q4_0", "absolute": {"kld_mean_max": 0.08}}
  ],
  "latency": {"tpot_p50_ratio_max": 2.0, "ttft_p50_ratio_max": null}
})";

// make_run's configs, by index.
constexpr ConfigIndex kRef = 0, kQ4 = 1;

// A run of `n` items in each of two domains under the reference and one candidate config. The
// candidate's per-item KLD varies by item (items differ far more than configs change them).
GateRun make_run(int64_t id, int n, double kld_scale) {
  GateRun r;
  r.id = id;
  r.status = "complete";
  r.suite_name = "suite:smoke";
  r.suite_hash = "abc";
  r.model_sha256 = "sha";
  r.add_config({1, "f16/f16", "f16", true});
  r.add_config({2, "q4_0/q4_0", "q4_0", false});
  for (const char* domain : {"tables", "policy"})
    for (int i = 0; i < n; ++i) {
      const std::string key = std::string(domain) + "-" + std::to_string(i);
      // scores: tokens, mean KLD, max KLD, p99 KLD, top-1, gold match, diverged
      GateItem ref{key, domain, kRef, {100, 0, 0, 0, 1.0, true, false}};
      const double kld = kld_scale * (0.01 + 0.004 * (i % 5));
      GateItem q{key, domain, kQ4, {100, kld, kld_scale * 0.3, kld_scale * 0.2, 0.95, true, i % 3 == 0}};
      r.items.push_back(ref);
      r.items.push_back(q);
      // Wall time, and CPU time of the work (two threads' worth of the wall time).
      r.turns.push_back({kRef, {45.0 + i, 9.0 + 0.1 * i, 90.0 + 2 * i, 18.0 + 0.2 * i}, key, 0});
      r.turns.push_back({kQ4, {50.0 + i, 10.0 + 0.1 * i, 100.0 + 2 * i, 20.0 + 0.2 * i}, key, 0});
    }
  return r;
}

// Runs hold canonical specs ("q4_0/q4_0"); the harness canonicalizes the policy's short names
// with the kernels' parser, which this layer cannot see, so the tests do it by hand.
GatePolicy test_policy() {
  GatePolicy p = parse_gate_policy(kPolicy, "p.json");
  canonicalize_policy_kv(p, [](const GateRule& r) { return std::vector<std::string>{r.kv + "/" + r.kv}; });
  return p;
}

const CheckResult* find(const GateOutcome& o, const std::string& name) {
  for (const CheckResult& c : o.checks)
    if (c.name == name) return &c;
  return nullptr;
}

TEST(GatePolicy, MostSpecificRuleWinsPerLimit) {
  const GatePolicy p = parse_gate_policy(kPolicy, "p.json");
  const GateLimits tq = p.limits_for("tables", "q4_0");
  EXPECT_DOUBLE_EQ(*tq.absolute[Metric::kld_mean], 0.08);
  EXPECT_DOUBLE_EQ(*tq.absolute[Metric::kld_p99], 1.0);
  EXPECT_FALSE(tq.absolute[Metric::same_top1].has_value()) << "null in a more specific rule must not re-enable";
  EXPECT_DOUBLE_EQ(*p.limits_for("tables", "fp8").absolute[Metric::kld_mean], 0.05);
  EXPECT_DOUBLE_EQ(*p.limits_for("policy", "q4_0").absolute[Metric::kld_mean], 0.2);
  EXPECT_DOUBLE_EQ(*p.limits_for("policy", "fp8").absolute[Metric::kld_mean], 0.1);
  EXPECT_DOUBLE_EQ(*p.latency.tpot_p50_ratio_max, 2.0);
  EXPECT_FALSE(p.latency.ttft_p50_ratio_max.has_value());
  EXPECT_EQ(p.bootstrap.resamples, 1000u);
}

TEST(GatePolicy, NullOverridesAnInheritedLimit) {
  // The q4_0 rule sets same_top1_min to null: the "*" rule's 0.8 must be switched off.
  const GatePolicy p = parse_gate_policy(kPolicy, "p.json");
  EXPECT_TRUE(p.limits_for("policy", "fp8").absolute[Metric::same_top1].has_value());
  EXPECT_FALSE(p.limits_for("policy", "q4_0").absolute[Metric::same_top1].has_value());
}

void expect_input_error(const std::string& text, const std::string& fragment) {
  try {
    parse_gate_policy(text, "bad.json");
    FAIL() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one-line message: " << msg;
  }
}

TEST(GatePolicy, BadFilesNameTheFileAndTheProblem) {
  expect_input_error("{\"kvgate_gate_policy\": 1, \"rules\": [", "byte");
  expect_input_error("{\"rules\": [{}]}", "kvgate_gate_policy");
  expect_input_error("{\"kvgate_gate_policy\": 1, \"rules\": []}", "rules");
  expect_input_error("{\"kvgate_gate_policy\": 1, \"rules\": [{\"absolute\": {\"kld_mean\": 1}}]}",
                     "unknown key 'kld_mean'");
  expect_input_error("{\"kvgate_gate_policy\": 1, \"rules\": [{\"absolute\": {\"kld_mean_max\": -1}}]}",
                     "rules[0].absolute.kld_mean_max");
  expect_input_error("{\"kvgate_gate_policy\": 1, \"rules\": [{\"absolute\": {\"same_top1_min\": 1.5}}]}", "[0, 1]");
  expect_input_error("{\"kvgate_gate_policy\": 1, \"rules\": [{\"regression\": {\"kld_mean\": \"x\"}}]}",
                     "expected a number or null");
  expect_input_error("{\"kvgate_gate_policy\": 1, \"rules\": [{\"kv\": \"fp8\"}, {\"kv\": \"fp8\"}]}", "second rule");
  expect_input_error("{\"kvgate_gate_policy\": 1, \"rules\": [{}], \"bootstrap\": {\"confidence\": 2}}",
                     "bootstrap.confidence");
  expect_input_error("[1, 2]", "JSON object");
}

TEST(GatePolicy, OldKeysNameTheirNewNames) {
  expect_input_error("{\"kvgate_gate_policy\": 1, \"rules\": [{\"regression\": {\"accuracy\": 0.1}}]}",
                     "rules[0].regression: key 'accuracy' is now 'gold_accuracy'");
  expect_input_error("{\"kvgate_gate_policy\": 1, \"rules\": [{}, {\"kv\": \"q4_0\", \"absolute\": {\"accuracy_drop_max\": 0.5}}]}",
                     "rules[1].absolute: key 'accuracy_drop_max' is now 'gold_accuracy_drop_max'");
  // Only where the new name is a key: "accuracy" among absolute limits was never one.
  expect_input_error("{\"kvgate_gate_policy\": 1, \"rules\": [{\"absolute\": {\"accuracy\": 0.1}}]}",
                     "unknown key 'accuracy'");
}

TEST(GatePolicy, CanonicalizedNamesThatCollideAreRejected) {
  GatePolicy p = parse_gate_policy(
      "{\"kvgate_gate_policy\": 1, \"rules\": [{\"kv\": \"fp8\"}, {\"kv\": \"fp8_e4m3\"}]}", "c.json");
  EXPECT_THROW(canonicalize_policy_kv(p, [](const GateRule&) { return std::vector<std::string>{"fp8_e4m3/fp8_e4m3"}; }), Error);
}

TEST(Gate, IdenticalRunsNeverFire) {
  const GatePolicy p = test_policy();
  const GateRun a = make_run(1, 20, 1.0), b = make_run(2, 20, 1.0);
  const GateOutcome o = evaluate_gate(p, &a, b);
  for (const CheckResult& c : o.checks) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
  EXPECT_EQ(o.failed(), 0u);
  const CheckResult* reg = find(o, "regression.kld_mean[tables, q4_0/q4_0]");
  ASSERT_NE(reg, nullptr);
  EXPECT_EQ(reg->delta, 0.0);
  EXPECT_EQ(reg->ci_low, 0.0);
  EXPECT_EQ(reg->ci_high, 0.0);
  EXPECT_EQ(reg->items, 20u);
  ASSERT_NE(find(o, "latency.tpot_p50_ratio[*, q4_0/q4_0]"), nullptr);
  EXPECT_EQ(find(o, "latency.ttft_p50_ratio[*, q4_0/q4_0]"), nullptr) << "null is off";
  EXPECT_EQ(find(o, "latency.tpot_p95_ratio[*, q4_0/q4_0]"), nullptr) << "absent is off";
}

TEST(Gate, WorseDomainFailsAndNamesItsItems) {
  const GatePolicy p = test_policy();
  const GateRun base = make_run(1, 20, 1.0);
  GateRun cand = make_run(2, 20, 1.0);
  // Only the policy domain gets worse, and item policy-3 the most.
  for (GateItem& it : cand.items)
    if (it.domain == "policy" && it.config == kQ4) it.scores.kld_mean += it.item_key == "policy-3" ? 0.05 : 0.01;
  const GateOutcome o = evaluate_gate(p, &base, cand);
  const CheckResult* worse = find(o, "regression.kld_mean[policy, q4_0/q4_0]");
  ASSERT_NE(worse, nullptr);
  EXPECT_FALSE(worse->passed);
  EXPECT_NEAR(worse->delta, 0.012, 1e-12);
  EXPECT_GT(worse->ci_low, 0.0);
  EXPECT_LE(worse->ci_low, worse->delta);
  EXPECT_GE(worse->ci_high, worse->delta);
  ASSERT_FALSE(worse->most_affected.empty());
  EXPECT_EQ(worse->most_affected.front().item_key, "policy-3");
  EXPECT_NE(worse->detail.find("policy-3"), std::string::npos) << worse->detail;
  const CheckResult* same = find(o, "regression.kld_mean[tables, q4_0/q4_0]");
  ASSERT_NE(same, nullptr);
  EXPECT_TRUE(same->passed);
  EXPECT_EQ(o.failed(), 1u);
}

TEST(Gate, RealButTinyChangeStaysUnderTheFloor) {
  const GatePolicy p = test_policy();
  const GateRun base = make_run(1, 20, 1.0);
  GateRun cand = make_run(2, 20, 1.0);
  for (GateItem& it : cand.items)
    if (it.config == kQ4) it.scores.kld_mean += 0.001;  // consistent, so the interval excludes 0; below the 0.002 floor
  const GateOutcome o = evaluate_gate(p, &base, cand);
  const CheckResult* c = find(o, "regression.kld_mean[tables, q4_0/q4_0]");
  ASSERT_NE(c, nullptr);
  EXPECT_GT(c->ci_low, 0.0);
  EXPECT_TRUE(c->passed) << c->detail;
}

TEST(Gate, LargeButNoisyChangeDoesNotFire) {
  const GatePolicy p = test_policy();
  const GateRun base = make_run(1, 20, 1.0);
  GateRun cand = make_run(2, 20, 1.0);
  // Half the items much worse, half much better: mean delta near 0, interval spans 0.
  int k = 0;
  for (GateItem& it : cand.items)
    if (it.domain == "tables" && it.config == kQ4) it.scores.kld_mean += (k++ % 2 ? 0.03 : -0.025);
  const GateOutcome o = evaluate_gate(p, &base, cand);
  const CheckResult* c = find(o, "regression.kld_mean[tables, q4_0/q4_0]");
  ASSERT_NE(c, nullptr);
  EXPECT_GT(c->delta, 0.002);
  EXPECT_LT(c->ci_low, 0.0);
  EXPECT_TRUE(c->passed) << c->detail;
}

TEST(Gate, ImprovementIsNotARegression) {
  const GatePolicy p = test_policy();
  const GateRun base = make_run(1, 20, 1.0), cand = make_run(2, 20, 0.5);
  const GateOutcome o = evaluate_gate(p, &base, cand);
  EXPECT_EQ(o.failed(), 0u);
  EXPECT_LT(find(o, "regression.kld_mean[tables, q4_0/q4_0]")->delta, 0.0);
}

TEST(Gate, AbsoluteLimitsUseTheMostSpecificRule) {
  const GatePolicy p = test_policy();
  // Mean KLD of the candidate config = 0.018 * 5 = 0.09: over the tables/q4_0 limit 0.08,
  // under the policy/q4_0 limit 0.2.
  const GateRun cand = make_run(2, 20, 5.0);
  const GateOutcome o = evaluate_gate(p, nullptr, cand);
  const CheckResult* t = find(o, "absolute.kld_mean[tables, q4_0/q4_0]");
  const CheckResult* q = find(o, "absolute.kld_mean[policy, q4_0/q4_0]");
  ASSERT_NE(t, nullptr);
  ASSERT_NE(q, nullptr);
  EXPECT_NEAR(t->candidate_value, 0.09, 1e-12);
  EXPECT_DOUBLE_EQ(t->threshold, 0.08);
  EXPECT_FALSE(t->passed);
  EXPECT_TRUE(q->passed);
  EXPECT_EQ(find(o, "absolute.same_top1[policy, q4_0/q4_0]"), nullptr) << "switched off by null";
  ASSERT_EQ(o.notes.size(), 1u);
  EXPECT_NE(o.notes[0].find("no baseline"), std::string::npos);
  EXPECT_EQ(find(o, "absolute.kld_mean[tables, f16/f16]"), nullptr) << "the reference is not checked against itself";
}

TEST(Gate, AccuracyDropIsAgainstTheReferenceConfig) {
  const GatePolicy p = test_policy();
  GateRun cand = make_run(2, 10, 1.0);
  int wrong = 0;
  for (GateItem& it : cand.items)
    if (it.domain == "tables" && it.config == kQ4 && wrong < 6) it.scores.exact_match_gold = false, ++wrong;
  const GateOutcome o = evaluate_gate(p, nullptr, cand);
  const CheckResult* c = find(o, "absolute.gold_accuracy_drop[tables, q4_0/q4_0]");
  ASSERT_NE(c, nullptr);
  EXPECT_DOUBLE_EQ(c->baseline_value, 1.0);
  EXPECT_DOUBLE_EQ(c->candidate_value, 0.4);
  EXPECT_NEAR(c->delta, 0.6, 1e-12);
  EXPECT_FALSE(c->passed);
}

TEST(Gate, GoldAccuracyChecksAreSkippedWithAReasonWhenTheReferenceCannotAnswer) {
  const GatePolicy p = test_policy();
  // The reference answers none of the gold questions; the candidate none either.
  auto unanswerable = [](GateRun r) {
    for (GateItem& it : r.items) it.scores.exact_match_gold = false;
    return r;
  };
  const GateRun base = unanswerable(make_run(1, 10, 1.0));
  const GateRun cand = unanswerable(make_run(2, 10, 1.0));
  const GateOutcome o = evaluate_gate(p, &base, cand);
  const CheckResult* drop = find(o, "absolute.gold_accuracy_drop[tables, q4_0/q4_0]");
  ASSERT_NE(drop, nullptr);
  EXPECT_TRUE(drop->skipped);
  EXPECT_TRUE(drop->passed) << "skipped is not a failure";
  EXPECT_NE(drop->detail.find("n/a (reference 0/10)"), std::string::npos) << drop->detail;
  const CheckResult* reg = find(o, "regression.gold_accuracy[tables, q4_0/q4_0]");
  ASSERT_NE(reg, nullptr);
  EXPECT_TRUE(reg->skipped);
  EXPECT_NE(reg->detail.find("0 of 10"), std::string::npos) << reg->detail;
  EXPECT_GE(o.skipped(), 4u) << "both domains, drop and regression";
  EXPECT_FALSE(find(o, "absolute.kld_mean[tables, q4_0/q4_0]")->skipped) << "other checks still decide";

  // The same runs where the reference answers: the checks decide.
  const GateOutcome ok = evaluate_gate(p, &base, make_run(3, 10, 1.0));
  EXPECT_FALSE(find(ok, "regression.gold_accuracy[tables, q4_0/q4_0]")->skipped)
      << "a reference that answers in one of the two runs is enough to measure a regression";
  EXPECT_FALSE(find(evaluate_gate(p, nullptr, make_run(3, 10, 1.0)), "absolute.gold_accuracy_drop[tables, q4_0/q4_0]")->skipped);
}

TEST(Gate, MissingItemsConfigsAndMismatchedRunsFail) {
  const GatePolicy p = test_policy();
  const GateRun base = make_run(1, 5, 1.0);
  GateRun cand = make_run(2, 5, 1.0);
  cand.items.erase(cand.items.begin() + 1);  // tables-0 under q4_0
  cand.model_sha256 = "other";
  cand.status = "failed";
  const GateOutcome o = evaluate_gate(p, &base, cand);
  const CheckResult* cov = find(o, "coverage.items[*, q4_0/q4_0]");
  ASSERT_NE(cov, nullptr);
  EXPECT_FALSE(cov->passed);
  EXPECT_NE(cov->detail.find("tables-0"), std::string::npos) << cov->detail;
  EXPECT_FALSE(find(o, "comparability.model[*]")->passed);
  EXPECT_TRUE(find(o, "comparability.suite[*]")->passed);
  EXPECT_FALSE(find(o, "comparability.candidate_status[*]")->passed);

  GateRun fewer_configs = make_run(3, 5, 1.0);
  fewer_configs.configs.resize(1);  // the reference only
  std::erase_if(fewer_configs.items, [](const GateItem& it) { return it.config == kQ4; });
  const GateOutcome o2 = evaluate_gate(p, &base, fewer_configs);
  EXPECT_FALSE(find(o2, "coverage.items[*, q4_0/q4_0]")->passed);
}

// A machine with nothing else running: 2 threads of its own on 2 cores.
RunLoad quiet() { return {0.05, 2.1, 100, 60, 2, 2}; }
// The issue-34 night: other jobs kept 6 more tasks runnable on the 2 cores.
RunLoad busy() { return {5.5, 8.0, 90, 400, 2, 2}; }

// Run-to-run ratios are what load moves: checked only when both runs recorded a quiet machine.
TEST(Gate, RunToRunLatencyOnlyBetweenQuietMachines) {
  const GatePolicy p = test_policy();
  GateRun base = make_run(1, 10, 1.0);
  GateRun cand = make_run(2, 10, 1.0);
  for (GateTurn& t : cand.turns) t.latency.tpot_ms *= 2.5;
  base.load = quiet();
  cand.load = quiet();
  const GateOutcome o = evaluate_gate(p, &base, cand);
  const CheckResult* c = find(o, "latency.tpot_p50_ratio[*, q4_0/q4_0]");
  ASSERT_NE(c, nullptr);
  EXPECT_NEAR(c->delta, 2.5, 1e-12);
  EXPECT_FALSE(c->passed);

  for (const std::optional<RunLoad>& load : {std::optional<RunLoad>(busy()), std::optional<RunLoad>()}) {
    cand.load = load;
    const GateOutcome noisy = evaluate_gate(p, &base, cand);
    const CheckResult* n = find(noisy, "latency.tpot_p50_ratio[*, q4_0/q4_0]");
    ASSERT_NE(n, nullptr);
    EXPECT_TRUE(n->passed) << n->detail;
    EXPECT_NE(n->detail.find("not checked"), std::string::npos) << n->detail;
    bool noted = false;
    for (const std::string& note : noisy.notes) noted |= note.find("run-to-run latency ratios were not checked") != std::string::npos;
    EXPECT_TRUE(noted);
  }
  EXPECT_NEAR(other_load_per_core(busy()), 3.0, 1e-12);
  EXPECT_NEAR(other_load_per_core(quiet()), 0.05, 1e-12) << "2.1 minus its own 2 threads, on 2 cores";
}

GatePolicy slowdown_policy() {
  GatePolicy p = test_policy();
  p.latency.tpot_slowdown_max = 1.5;
  p.latency.ttft_slowdown_max = 1.5;
  p.latency.tpot_p50_ratio_max = 3.0;
  return p;
}

// Issue 34: the same metrics, every latency of the candidate run 7x (a busy machine slows every
// config alike), passes: each config is timed against its own run's reference config.
TEST(Gate, LoadThatSlowsEveryConfigAlikeCannotFail) {
  const GatePolicy p = slowdown_policy();
  GateRun base = make_run(1, 10, 1.0);
  GateRun cand = make_run(2, 10, 1.0);
  base.load = quiet();
  cand.load = busy();
  for (GateTurn& t : cand.turns) t.latency.ttft_ms *= 7, t.latency.tpot_ms *= 7;
  const GateOutcome o = evaluate_gate(p, &base, cand);
  EXPECT_TRUE(o.passed());
  for (const CheckResult& c : o.checks) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
  const CheckResult* s = find(o, "latency.tpot_slowdown[*, q4_0/q4_0]");
  ASSERT_NE(s, nullptr);
  EXPECT_NEAR(s->delta, 1.0, 1e-12) << s->detail;
  EXPECT_EQ(s->items, 20u);
  ASSERT_NE(find(o, "latency.ttft_slowdown[*, q4_0/q4_0]"), nullptr);
  EXPECT_EQ(find(o, "latency.tpot_slowdown[*, f16/f16]"), nullptr) << "the reference is not timed against itself";
}

// Too few turns to tell a slowdown from noise: skipped with the reason, never judged (two real
// runs of two items each once differed x1.7 in q4_0's TPOT relative to f16).
TEST(Gate, SlowdownOnTooFewTurnsIsSkippedNotJudged) {
  const GatePolicy p = slowdown_policy();
  const GateRun base = make_run(1, 2, 1.0);  // 4 turns per config
  GateRun cand = make_run(2, 2, 1.0);
  for (GateTurn& t : cand.turns)
    if (t.config == kQ4) t.latency.tpot_ms *= 3;
  const GateOutcome o = evaluate_gate(p, &base, cand);
  const CheckResult* s = find(o, "latency.tpot_slowdown[*, q4_0/q4_0]");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->passed);
  EXPECT_TRUE(s->skipped);
  EXPECT_NE(s->detail.find("at least 8"), std::string::npos) << s->detail;
}

// A config made 2x slower relative to its reference fails, whatever the load did to both.
TEST(Gate, ConfigSlowerThanItsReferenceFails) {
  const GatePolicy p = slowdown_policy();
  const GateRun base = make_run(1, 10, 1.0);
  for (const double load_factor : {1.0, 7.0}) {
    GateRun cand = make_run(2, 10, 1.0);
    for (GateTurn& t : cand.turns) {
      t.latency.tpot_ms *= load_factor * (t.config == kQ4 ? 2.0 : 1.0);
      t.latency.ttft_ms *= load_factor;
    }
    const GateOutcome o = evaluate_gate(p, &base, cand);
    const CheckResult* s = find(o, "latency.tpot_slowdown[*, q4_0/q4_0]");
    ASSERT_NE(s, nullptr);
    EXPECT_FALSE(s->passed) << s->detail;
    EXPECT_NEAR(s->delta, 2.0, 1e-12) << s->detail;
    EXPECT_GT(s->ci_low, 1.0) << s->detail;
    EXPECT_NE(s->detail.find("slowdown x2"), std::string::npos) << s->detail;
    EXPECT_TRUE(find(o, "latency.ttft_slowdown[*, q4_0/q4_0]")->passed);
  }
  // Noise: half the turns 2x slower, half 2x faster, is no slowdown.
  GateRun noisy = make_run(2, 10, 1.0);
  int k = 0;
  for (GateTurn& t : noisy.turns)
    if (t.config == kQ4) t.latency.tpot_ms *= (k++ % 2) ? 2.0 : 0.5;
  const CheckResult* s = find(evaluate_gate(p, &base, noisy), "latency.tpot_slowdown[*, q4_0/q4_0]");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->passed) << s->detail;
}

TEST(Gate, SlowdownWithNoTimedTurnsFailsUnlessAllowed) {
  GatePolicy p = slowdown_policy();
  const GateRun base = make_run(1, 4, 1.0);
  GateRun cand = make_run(2, 4, 1.0);
  for (GateTurn& t : cand.turns) t.latency.tpot_ms = 0;  // one-token turns have no TPOT
  const CheckResult* s = find(evaluate_gate(p, &base, cand), "latency.tpot_slowdown[*, q4_0/q4_0]");
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->passed) << s->detail;
  p.latency.allow_unmeasured = true;
  EXPECT_TRUE(find(evaluate_gate(p, &base, cand), "latency.tpot_slowdown[*, q4_0/q4_0]")->passed);
}

GatePolicy calibrated_policy() {
  GatePolicy p = test_policy();
  p.latency.tpot_p50_ratio_max.reset();
  p.latency.tpot_calibrated_ratio_max = 1.2;
  p.latency.ttft_calibrated_ratio_max = 1.2;
  return p;
}

// `run`, timed against the yardstick: each item's calibration CPU times `contention` (what the
// machine did to the yardstick's CPU time while it ran: shared caches, a slower host), each
// turn's CPU latencies `contention` x `slowdown` times the make_run figure, as a slower kvgate
// there would take, and its wall latencies also x `share` (the wall time the load added).
GateRun calibrated(GateRun run, double contention, double slowdown, const std::string& workload = "w1",
                   double share = 1.0) {
  run.calibration = workload;
  for (const GateItem& it : run.items) run.item_calibration[it.item_key] = {20.0 * contention, 10.0 * contention};
  for (GateTurn& t : run.turns) {
    t.latency.ttft_cpu_ms *= contention * slowdown, t.latency.tpot_cpu_ms *= contention * slowdown;
    t.latency.ttft_ms *= share * contention * slowdown, t.latency.tpot_ms *= share * contention * slowdown;
  }
  return run;
}

// Issue 46: load that slows every config alike, reference included, cannot fail the calibrated
// check, and a slowdown of every config alike, reference included, fails it under any load.
TEST(Gate, CalibratedRatioPassesLoadAndFailsAGlobalSlowdown) {
  const GatePolicy p = calibrated_policy();
  const GateRun base = calibrated(make_run(1, 5, 1.0), 1.0, 1.0);
  for (const auto& [load, share] : {std::pair{1.0, 1.0}, {1.3, 3.0}, {1.8, 12.0}}) {
    SCOPED_TRACE("CPU time x" + std::to_string(load) + ", wall time x" + std::to_string(share * load));
    const GateOutcome same = evaluate_gate(p, &base, calibrated(make_run(2, 5, 1.0), load, 1.0, "w1", share));
    EXPECT_TRUE(same.passed());
    for (const char* name : {"latency.tpot_calibrated_ratio[*, q4_0/q4_0]", "latency.tpot_calibrated_ratio[*, f16/f16]",
                             "latency.ttft_calibrated_ratio[*, f16/f16]"}) {
      const CheckResult* c = find(same, name);
      ASSERT_NE(c, nullptr) << name;
      EXPECT_TRUE(c->passed) << c->detail;
      EXPECT_FALSE(c->skipped) << c->detail;
      EXPECT_NEAR(c->delta, 1.0, 1e-12) << c->detail;
      EXPECT_EQ(c->items, 10u) << "per item, both domains";
    }
    const GateOutcome slow = evaluate_gate(p, &base, calibrated(make_run(2, 5, 1.0), load, 1.3, "w1", share));
    for (const char* name : {"latency.tpot_calibrated_ratio[*, q4_0/q4_0]", "latency.tpot_calibrated_ratio[*, f16/f16]",
                             "latency.ttft_calibrated_ratio[*, q4_0/q4_0]", "latency.ttft_calibrated_ratio[*, f16/f16]"}) {
      const CheckResult* c = find(slow, name);
      ASSERT_NE(c, nullptr) << name;
      EXPECT_FALSE(c->passed) << c->detail;
      EXPECT_NEAR(c->delta, 1.3, 1e-12) << c->detail;
      EXPECT_NE(c->detail.find("> limit x1.2"), std::string::npos) << c->detail;
    }
    // The per-config slowdown cannot see it: the reference slowed as much.
    EXPECT_EQ(find(slow, "latency.tpot_slowdown[*, q4_0/q4_0]"), nullptr) << "not set in this policy";
  }
  // Within the limit, or noise both ways: no failure.
  EXPECT_TRUE(evaluate_gate(p, &base, calibrated(make_run(2, 5, 1.0), 2.0, 1.1)).passed());
  GateRun noisy = calibrated(make_run(2, 5, 1.0), 1.0, 1.0);
  int k = 0;
  for (auto& [key, c] : noisy.item_calibration) c.decode_ms *= (k++ % 2) ? 1.5 : 1 / 1.5;
  const CheckResult* n = find(evaluate_gate(p, &base, noisy), "latency.tpot_calibrated_ratio[*, q4_0/q4_0]");
  ASSERT_NE(n, nullptr);
  EXPECT_TRUE(n->passed) << n->detail;
}

// TTFT is divided by the yardstick's prefill part, TPOT by its decode part: a machine whose
// memory slowed (another job streaming) but whose compute did not moves TPOT's yardstick only.
// Wall time does not enter: a run whose wall latencies tripled while its CPU times held passes.
TEST(Gate, CalibratedRatioDividesCpuTtftByPrefillAndCpuTpotByDecode) {
  const GatePolicy p = calibrated_policy();
  const GateRun base = calibrated(make_run(1, 5, 1.0), 1.0, 1.0);
  GateRun cand = calibrated(make_run(2, 5, 1.0), 1.0, 1.0, "w1", 3.0);
  for (auto& [key, c] : cand.item_calibration) c.decode_ms *= 2;
  for (GateTurn& t : cand.turns) t.latency.tpot_cpu_ms *= 2;
  const GateOutcome o = evaluate_gate(p, &base, cand);
  EXPECT_NEAR(find(o, "latency.tpot_calibrated_ratio[*, q4_0/q4_0]")->delta, 1.0, 1e-12);
  EXPECT_NEAR(find(o, "latency.ttft_calibrated_ratio[*, q4_0/q4_0]")->delta, 1.0, 1e-12);
  EXPECT_NE(find(o, "latency.tpot_calibrated_ratio[*, q4_0/q4_0]")->detail.find("TPOT in CPU time itself x2"),
            std::string::npos);
  // A config whose turns have no CPU time (an endpoint's) has nothing to compare.
  GateRun wall_only = calibrated(make_run(3, 5, 1.0), 1.0, 1.0);
  for (GateTurn& t : wall_only.turns) t.latency.tpot_cpu_ms = std::nan("");
  EXPECT_FALSE(find(evaluate_gate(p, &base, wall_only), "latency.tpot_calibrated_ratio[*, q4_0/q4_0]")->passed);
}

// A run without a yardstick, or with another one, or too few items: skipped with the reason,
// never judged; no timed turn at all fails unless allowed.
TEST(Gate, CalibratedRatioSkipsWhatItCannotCompare) {
  const GatePolicy p = calibrated_policy();
  const GateRun base = calibrated(make_run(1, 5, 1.0), 1.0, 1.0);
  auto check = [&](const GateRun& cand, const GatePolicy& policy) {
    const GateOutcome o = evaluate_gate(policy, &base, cand);
    const CheckResult* c = find(o, "latency.tpot_calibrated_ratio[*, q4_0/q4_0]");
    EXPECT_NE(c, nullptr);
    return c ? *c : CheckResult{};
  };
  const CheckResult none = check(make_run(2, 5, 1.0), p);
  EXPECT_TRUE(none.skipped && none.passed) << none.detail;
  EXPECT_NE(none.detail.find("the candidate run 2 timed no calibration workload"), std::string::npos) << none.detail;
  const CheckResult other = check(calibrated(make_run(2, 5, 1.0), 1.0, 1.5, "w2"), p);
  EXPECT_TRUE(other.skipped && other.passed) << other.detail;
  EXPECT_NE(other.detail.find("different calibration workloads (baseline run 1: w1; candidate run 2: w2)"),
            std::string::npos)
      << other.detail;
  const GateRun few_base = calibrated(make_run(1, 2, 1.0), 1.0, 1.0);
  const GateOutcome few = evaluate_gate(p, &few_base, calibrated(make_run(2, 2, 1.0), 1.0, 3.0));
  const CheckResult* f = find(few, "latency.tpot_calibrated_ratio[*, q4_0/q4_0]");
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->skipped && f->passed) << f->detail;
  EXPECT_NE(f->detail.find("only 4 items"), std::string::npos) << f->detail;
  GateRun untimed = calibrated(make_run(2, 5, 1.0), 1.0, 1.0);
  for (GateTurn& t : untimed.turns) t.latency.tpot_cpu_ms = 0;
  const CheckResult u = check(untimed, p);
  EXPECT_FALSE(u.passed) << u.detail;
  GatePolicy allow = p;
  allow.latency.allow_unmeasured = true;
  EXPECT_TRUE(check(untimed, allow).passed);
}

// Issue 34: a config whose quality metrics are NULL on every item passed every quality check.
TEST(Gate, NotMeasuredFailsUnlessThePolicyAllowsIt) {
  const GateRun base = make_run(1, 4, 1.0);
  GateRun cand = make_run(2, 4, 1.0);
  for (GateItem& it : cand.items)
    if (it.config == kQ4) {
      it.scores.kld_mean = it.scores.kld_p99 = it.scores.kld_max = it.scores.same_top1 = std::nan("");
      it.scores.exact_match_gold.reset();
      it.scores.diverged.reset();
    }
  const GateOutcome o = evaluate_gate(test_policy(), &base, cand);
  for (const char* name : {"absolute.kld_mean[tables, q4_0/q4_0]", "absolute.kld_p99[policy, q4_0/q4_0]",
                           "absolute.gold_accuracy_drop[tables, q4_0/q4_0]", "absolute.divergence_rate[tables, q4_0/q4_0]",
                           "regression.kld_mean[tables, q4_0/q4_0]"}) {
    const CheckResult* c = find(o, name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_FALSE(c->passed) << name << ": " << c->detail;
    EXPECT_NE(c->detail.find("allow_unmeasured"), std::string::npos) << c->detail;
  }

  GatePolicy allowing = parse_gate_policy(R"({"kvgate_gate_policy": 1, "rules": [
    {"absolute": {"kld_mean_max": 0.1}, "regression": {"kld_mean": 0.01}},
    {"kv": "q4_0", "allow_unmeasured": true}]})",
                                          "allow.json");
  canonicalize_policy_kv(allowing, [](const GateRule& r) { return std::vector<std::string>{r.kv + "/" + r.kv}; });
  const GateOutcome allowed = evaluate_gate(allowing, &base, cand);
  EXPECT_TRUE(allowed.passed());
  EXPECT_NE(find(allowed, "absolute.kld_mean[tables, q4_0/q4_0]")->detail.find("not checked"), std::string::npos);

  // Items without a scored token leave nothing to measure: not applicable, not a failure.
  GateRun empty = cand;
  for (GateItem& it : empty.items) it.scores.scored_tokens = 0;
  const CheckResult* na = find(evaluate_gate(test_policy(), nullptr, empty), "absolute.kld_mean[tables, q4_0/q4_0]");
  ASSERT_NE(na, nullptr);
  EXPECT_TRUE(na->passed) << na->detail;
  EXPECT_NE(na->detail.find("not applicable"), std::string::npos) << na->detail;
}

TEST(Gate, MinimumCoveragePerDomainAndConfig) {
  GatePolicy p = parse_gate_policy(R"({"kvgate_gate_policy": 1, "rules": [
    {"coverage": {"items_min": 4, "scored_tokens_min": 300}},
    {"domain": "tables", "coverage": {"items_min": 5}}]})",
                                   "cov.json");
  canonicalize_policy_kv(p, [](const GateRule& r) { return std::vector<std::string>{r.kv + "/" + r.kv}; });
  GateRun cand = make_run(2, 4, 1.0);  // 4 items of 100 tokens per domain and config
  for (GateItem& it : cand.items)
    if (it.config == kQ4 && it.domain == "policy" && it.item_key != "policy-0") it.scores.kld_mean = std::nan("");
  const GateOutcome o = evaluate_gate(p, nullptr, cand);
  EXPECT_FALSE(find(o, "coverage.items_min[tables, q4_0/q4_0]")->passed) << "4 < 5";
  EXPECT_FALSE(find(o, "coverage.items_min[tables, f16/f16]")->passed) << "the reference counts too";
  EXPECT_TRUE(find(o, "coverage.items_min[policy, q4_0/q4_0]")->passed);
  EXPECT_TRUE(find(o, "coverage.scored_tokens_min[tables, q4_0/q4_0]")->passed);
  const CheckResult* tokens = find(o, "coverage.scored_tokens_min[policy, q4_0/q4_0]");
  ASSERT_NE(tokens, nullptr);
  EXPECT_FALSE(tokens->passed) << "3 of 4 items unmeasured leave 100 tokens: " << tokens->detail;
  EXPECT_EQ(tokens->candidate_value, 100.0);
}

TEST(GatePolicy, LatencyAndCoverageKeys) {
  const GatePolicy p = parse_gate_policy(R"({"kvgate_gate_policy": 1, "rules": [{}],
    "latency": {"tpot_slowdown_max": 1.5, "ttft_slowdown_max": null, "quiet_load_max": 0.5, "allow_unmeasured": true}})",
                                         "l.json");
  EXPECT_EQ(p.latency.tpot_slowdown_max, 1.5);
  EXPECT_FALSE(p.latency.ttft_slowdown_max);
  EXPECT_EQ(p.latency.quiet_load_max, 0.5);
  EXPECT_TRUE(p.latency.allow_unmeasured);
  auto error_of = [](const std::string& text) {
    try {
      parse_gate_policy(text, "bad.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error_of(R"({"kvgate_gate_policy": 1, "rules": [{}], "latency": {"tpot_slowdown_max": 0.5}})")
                .find("latency.tpot_slowdown_max: a ratio limit must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"kvgate_gate_policy": 1, "rules": [{}], "latency": {"tpot_calibrated_ratio_max": 0.9}})")
                .find("latency.tpot_calibrated_ratio_max: a ratio limit must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"kvgate_gate_policy": 1, "rules": [{}], "latency": {"tpot_calibrated_max": 1.2}})")
                .find("unknown key 'tpot_calibrated_max'"),
            std::string::npos);
  const GatePolicy c = parse_gate_policy(R"({"kvgate_gate_policy": 1, "rules": [{}],
    "latency": {"tpot_calibrated_ratio_max": 1.2, "ttft_calibrated_ratio_max": null}})",
                                         "c.json");
  EXPECT_EQ(c.latency.tpot_calibrated_ratio_max, 1.2);
  EXPECT_FALSE(c.latency.ttft_calibrated_ratio_max);
  EXPECT_NE(error_of(R"({"kvgate_gate_policy": 1, "rules": [{"allow_unmeasured": 1}]})").find("rules[0].allow_unmeasured"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"kvgate_gate_policy": 1, "rules": [{"coverage": {"items": 3}}]})").find("unknown key 'items'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"kvgate_gate_policy": 1, "rules": [{}], "latency": {"quiet_load_max": -1}})")
                .find("latency.quiet_load_max"),
            std::string::npos);
  EXPECT_FALSE(parse_gate_policy(R"({"kvgate_gate_policy": 1, "rules": [{}], "latency": {"quiet_load_max": null}})", "n.json")
                   .latency.quiet_load_max);
}

// --pair-config when the baseline also ran the candidate's config: the paired config replaces
// the baseline's own config of the candidate's spec instead of sharing the comparison with it.
TEST(Gate, PairingReplacesTheBaselinesOwnConfigOfTheTarget) {
  const GatePolicy p = test_policy();
  GateRun base = make_run(1, 10, 1.0);  // q4_0 at scale 1 ...
  GateRun fp8 = make_run(1, 10, 0.1);   // ... and fp8 at a tenth of its KLD
  const ConfigIndex base_fp8 = base.add_config({3, "fp8/fp8", "fp8", false});
  for (GateItem& it : fp8.items)
    if (it.config == kQ4) base.items.push_back({it.item_key, it.domain, base_fp8, it.scores});
  for (const GateTurn& t : fp8.turns)
    if (t.config == kQ4) base.turns.push_back({base_fp8, t.latency, t.item_key, t.turn_index});
  const GateRun cand = make_run(2, 10, 1.0);

  const ConfigMatch m = match_configs(base, cand, {{base_fp8, kQ4}});
  ASSERT_EQ(m.notes.size(), 2u);
  EXPECT_EQ(m.notes[0], "baseline config fp8/fp8 is compared with candidate config q4_0/q4_0");
  EXPECT_NE(m.notes[1].find("baseline config q4_0/q4_0 is left out"), std::string::npos) << m.notes[1];
  EXPECT_EQ(m.baseline_of, (std::vector<std::optional<ConfigIndex>>{kRef, base_fp8}));
  EXPECT_EQ(m.left_out, (std::vector<bool>{false, true, false}));
  const GateOutcome o = evaluate_gate(p, &base, cand, {{base_fp8, kQ4}});
  EXPECT_EQ(o.notes.front(), m.notes.front()) << "the pairing notes come first";
  const CheckResult* reg = find(o, "regression.kld_mean[tables, q4_0/q4_0]");
  ASSERT_NE(reg, nullptr);
  EXPECT_FALSE(reg->passed) << reg->detail;
  EXPECT_NEAR(reg->baseline_value * 10, reg->candidate_value, 1e-12) << reg->detail << " must compare with fp8's rows";
  // The left-out config has no coverage check; the paired one is covered under the candidate's name.
  size_t coverage = 0;
  for (const CheckResult& c : o.checks) coverage += c.kind == CheckKind::coverage && c.metric == "items";
  EXPECT_EQ(coverage, 2u);
  EXPECT_EQ(find(o, "coverage.items[*, q4_0/q4_0]")->config_id, 2) << "the candidate config's id";

  const GateRun twice = make_run(1, 2, 1.0);
  EXPECT_THROW(match_configs(twice, twice, {{kRef, kQ4}, {kQ4, kQ4}}), Error);
  EXPECT_THROW(match_configs(twice, twice, {{kRef, kQ4}, {kRef, kRef}}), Error);
  // A swap pairs each with the other: nothing is left out.
  const ConfigMatch swapped = match_configs(twice, twice, {{kRef, kQ4}, {kQ4, kRef}});
  EXPECT_EQ(swapped.notes.size(), 2u);
  EXPECT_EQ(swapped.baseline_of, (std::vector<std::optional<ConfigIndex>>{kQ4, kRef}));
}

// Configs are told apart by their index, never by their spec text. A stored run cannot hold two
// configs of one spec (configs.spec is unique and names the weights and the endpoint), but the
// gate must not rest on that: two configs of one spec keep their own items and checks, and only
// match_configs says which of them another run's config is compared with.
TEST(Gate, ConfigsSharingASpecStayApart) {
  const GatePolicy p = test_policy();
  GateRun run = make_run(1, 4, 1.0);
  // A second config of the candidate's spec, with half its KLD, in one domain.
  const ConfigIndex other = run.add_config({7, "q4_0/q4_0", "Q8+q4_0", false});
  std::vector<GateItem> copies;
  for (const GateItem& it : run.items)
    if (it.config == kQ4 && it.domain == "tables") {
      copies.push_back(it);
      copies.back().config = other;
      copies.back().scores.kld_mean /= 2;
    }
  run.items.insert(run.items.end(), copies.begin(), copies.end());
  const GateOutcome o = evaluate_gate(p, nullptr, run);
  std::vector<const CheckResult*> kld;
  for (const CheckResult& c : o.checks)
    if (c.name == "absolute.kld_mean[tables, q4_0/q4_0]") kld.push_back(&c);
  ASSERT_EQ(kld.size(), 2u) << "one check per config, not one over both configs' items";
  EXPECT_EQ(kld[0]->items, 4u);
  EXPECT_EQ(kld[1]->items, 4u);
  EXPECT_DOUBLE_EQ(kld[0]->candidate_value, 2 * kld[1]->candidate_value);
  EXPECT_EQ(kld[0]->config_id, 2);
  EXPECT_EQ(kld[1]->config_id, 7);
  // The other run matches only the first config of a spec; the second has no baseline.
  const ConfigMatch m = match_configs(make_run(0, 4, 1.0), run, {});
  EXPECT_EQ(m.baseline_of, (std::vector<std::optional<ConfigIndex>>{kRef, kQ4, std::nullopt}));
}

TEST(Gate, DeterministicAcrossCalls) {
  const GatePolicy p = test_policy();
  const GateRun base = make_run(1, 30, 1.0);
  GateRun cand = make_run(2, 30, 1.0);
  for (size_t i = 0; i < cand.items.size(); ++i) cand.items[i].scores.kld_mean += 0.0005 * static_cast<double>(i % 7);
  const GateOutcome a = evaluate_gate(p, &base, cand), b = evaluate_gate(p, &base, cand);
  ASSERT_EQ(a.checks.size(), b.checks.size());
  for (size_t i = 0; i < a.checks.size(); ++i) {
    EXPECT_EQ(a.checks[i].name, b.checks[i].name);
    EXPECT_EQ(std::memcmp(&a.checks[i].ci_low, &b.checks[i].ci_low, sizeof(double)), 0);
    EXPECT_EQ(std::memcmp(&a.checks[i].ci_high, &b.checks[i].ci_high, sizeof(double)), 0);
  }
}

}  // namespace
}  // namespace kvgate::scoring
