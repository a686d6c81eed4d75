// Verdict lines per config (scoring/verdict.h) follow the gate policy's absolute checks.
#include "scoring/verdict.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "scoring/gate_policy.h"

namespace kvgate::scoring {
namespace {

const char* kPolicy = R"({
  "kvgate_gate_policy": 1,
  "rules": [
    {"domain": "*", "kv": "*",
     "absolute": {"kld_mean_max": 0.1, "same_top1_min": 0.6, "gold_accuracy_drop_max": 0.5}},
    {"domain": "tables", "kv": "*", "absolute": {"kld_mean_max": 0.05}}
  ]
})";

// Two domains of 10 items; the candidate's mean KLD is `kld` in every item, its top-1 `top1`.
GateRun make_run(double kld, double top1, bool reference_answers = true) {
  GateRun r;
  r.id = 1;
  r.status = "complete";
  r.reference_config = "f16";
  r.configs = {"f16", "q4_0"};
  for (const char* domain : {"tables", "policy"})
    for (int i = 0; i < 10; ++i) {
      const std::string key = std::string(domain) + "-" + std::to_string(i);
      r.items.push_back({key, domain, "f16", {100, 0, 0, 0, 1.0, reference_answers, false}});
      r.items.push_back({key, domain, "q4_0", {100, kld, kld, kld, top1, reference_answers, false}});
    }
  return r;
}

const GatePolicy& policy() {
  static const GatePolicy p = parse_gate_policy(kPolicy, "p.json");
  return p;
}

ConfigVerdict verdict_of(const GateRun& run) {
  const std::vector<ConfigVerdict> v = config_verdicts(policy(), run);
  EXPECT_EQ(v.size(), 1u) << "one line per candidate; the reference has none";
  return v.empty() ? ConfigVerdict{} : v.front();
}

TEST(Verdict, AFailedCheckIsUnsafeAndNamesTheDomainAndNumber) {
  // 0.08 passes policy's 0.1 but fails tables' 0.05.
  const ConfigVerdict v = verdict_of(make_run(0.08, 0.95));
  EXPECT_EQ(v.verdict, Verdict::unsafe);
  EXPECT_EQ(v.domain, "tables");
  EXPECT_EQ(v.failed, 1u);
  EXPECT_NE(v.line().find("unsafe"), std::string::npos) << v.line();
  EXPECT_NE(v.line().find("mean KLD 0.08 in tables > limit 0.05"), std::string::npos) << v.line();
}

TEST(Verdict, CloseToALimitIsWatchFarIsSafe) {
  const ConfigVerdict watch = verdict_of(make_run(0.03, 0.95));  // 60 % of tables' 0.05
  EXPECT_EQ(watch.verdict, Verdict::watch) << watch.line();
  EXPECT_EQ(watch.domain, "tables");
  const ConfigVerdict low_top1 = verdict_of(make_run(0.001, 0.75));  // (1-0.75)/(1-0.6) = 62 % of the margin
  EXPECT_EQ(low_top1.verdict, Verdict::watch) << low_top1.line();
  EXPECT_NE(low_top1.reason.find("same top-1"), std::string::npos) << low_top1.reason;
  const ConfigVerdict safe = verdict_of(make_run(0.001, 0.95));
  EXPECT_EQ(safe.verdict, Verdict::safe) << safe.line();
}

TEST(Verdict, NeverSafeWhileAPolicyCheckFails) {
  // Whatever the numbers, a config with a failed absolute check must not read safe (or watch).
  for (double kld : {0.0, 0.01, 0.04, 0.049, 0.05, 0.051, 0.09, 0.2, 5.0})
    for (double top1 : {1.0, 0.9, 0.61, 0.6, 0.59, 0.1}) {
      const GateRun run = make_run(kld, top1);
      const GateOutcome o = evaluate_gate(policy(), nullptr, run);
      size_t failed = 0;
      for (const CheckResult& c : o.checks) failed += c.config == "q4_0" && !c.passed ? 1 : 0;
      const ConfigVerdict v = verdict_of(run);
      EXPECT_EQ(v.failed, failed);
      EXPECT_EQ(v.verdict == Verdict::unsafe, failed > 0) << "kld " << kld << " top1 " << top1 << ": " << v.line();
    }
}

TEST(Verdict, SkippedGoldChecksAreCountedNotPassed) {
  const ConfigVerdict v = verdict_of(make_run(0.001, 0.95, false));
  EXPECT_EQ(v.skipped, 2u) << "accuracy drop in both domains: the reference answers nothing";
  EXPECT_NE(v.line().find("2 skipped"), std::string::npos) << v.line();
}

}  // namespace
}  // namespace kvgate::scoring
