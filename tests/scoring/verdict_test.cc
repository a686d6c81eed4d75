// Rollout verdicts (scoring/verdict.h) on simulated per-item data whose effects are known: no
// harm over 2,000 items is safe, a true 5-point gold-accuracy drop is unsafe, 25 items of either
// are inconclusive, and the verdict moves one way only as items are added. Seeded, so every run
// of this test sees the same data.
#include "scoring/verdict.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "scoring/rollout_policy.h"

namespace kvgate::scoring {
namespace {

const char* kPolicy = R"({
  "kvgate_rollout_policy": 1,
  "confidence": 0.95,
  "margins": {"gold_accuracy_drop_max": 0.02, "same_top1_min": 0.95, "kld_mean_max": 0.02,
              "first_token_differs_rate_max": 0.05}
})";

const RolloutPolicy& policy() {
  static const RolloutPolicy p = parse_rollout_policy(kPolicy, "p.json");
  return p;
}

// `drop`: the true gold-accuracy drop, beyond the answers that flip either way.
struct Effect {
  double drop = 0;
};

// `n` items of one domain, the candidate against the reference "f16", items 3-turn sessions
// with 40 scored tokens; the candidate keeps top-1 on 99 % of tokens (mean KLD ~0.003) and
// changes a first token in 1 % of turns. Items are drawn in order from one seeded stream, so
// the first n items of a larger run are the run of n items.
constexpr ConfigIndex kRef = 0, kCand = 1;  // simulate's configs

GateRun simulate(size_t n, Effect effect, uint64_t seed = 7) {
  GateRun run;
  run.id = 1;
  run.status = "complete";
  run.add_config({1, "f16", "", true});
  run.add_config({2, "cand", "", false});
  Rng rng(seed);
  for (size_t i = 0; i < n; ++i) {
    const std::string key = "item-" + std::to_string(i);
    // Discordant pairs: 1 % each way under any small perturbation, plus the drop one way.
    bool ref_right = rng.uniform() < 0.6;
    bool cand_right = ref_right;
    const double u = rng.uniform();
    if (u < 0.01 + effect.drop) ref_right = true, cand_right = false;
    else if (u < 0.02 + effect.drop) ref_right = false, cand_right = true;
    ItemScores ref;
    ref.scored_tokens = 40;
    ref.same_top1 = 1.0;
    ref.exact_match_gold = ref_right;
    ref.answered_turns = 3;
    ItemScores cand = ref;
    int same = 0;
    double kld = 0;
    for (int t = 0; t < 40; ++t) {
      same += rng.uniform() < 0.99 ? 1 : 0;
      kld += 0.003 * std::exp(rng.normal() - 0.5);
    }
    cand.same_top1 = same / 40.0;
    cand.kld_mean = kld / 40.0;
    cand.exact_match_gold = cand_right;
    for (int t = 0; t < 3; ++t) cand.first_token_differs += rng.uniform() < 0.01 ? 1 : 0;
    run.items.push_back({key, "lookup", kRef, ref});
    run.items.push_back({key, "lookup", kCand, cand});
  }
  return run;
}

ConfigVerdict verdict_of(const GateRun& run, const RolloutPolicy& p = policy(), size_t family = 1) {
  const std::vector<ConfigVerdict> v = config_verdicts(p, run, family);
  EXPECT_EQ(v.size(), 1u) << "one verdict per candidate; the reference has none";
  return v.empty() ? ConfigVerdict{} : v.front();
}

const VerdictCheck* check_named(const ConfigVerdict& v, const std::string& name) {
  for (const VerdictCheck& c : v.checks)
    if (c.name == name) return &c;
  return nullptr;
}

TEST(RolloutVerdict, NoHarmOverTwoThousandItemsIsSafe) {
  const ConfigVerdict v = verdict_of(simulate(2000, {}));
  EXPECT_EQ(v.verdict, Verdict::safe) << v.line();
  EXPECT_EQ(v.within, 4u) << "one check per metric; one domain is the workload itself";
  EXPECT_NE(v.line().find("cand: safe: every bound inside its margin"), std::string::npos) << v.line();
  const VerdictCheck* gold = check_named(v, "gold_accuracy_drop[lookup]");
  ASSERT_NE(gold, nullptr);
  EXPECT_LE(gold->high, 0.02);
  EXPECT_EQ(gold->items, 2000u);
}

TEST(RolloutVerdict, ATrueFivePointDropIsUnsafe) {
  const ConfigVerdict v = verdict_of(simulate(2000, {0.05}));
  EXPECT_EQ(v.verdict, Verdict::unsafe) << v.line();
  const VerdictCheck* gold = check_named(v, "gold_accuracy_drop[lookup]");
  ASSERT_NE(gold, nullptr);
  EXPECT_EQ(gold->outcome, CheckOutcome::beyond);
  EXPECT_NEAR(gold->estimate, 0.05, 0.015);
  EXPECT_GT(gold->strict_low, 0.02);
  EXPECT_LE(gold->strict_low, gold->low) << "the unsafe side's bound is corrected for the checks, so wider";
  EXPECT_NE(v.line().find("gold accuracy drop at least"), std::string::npos) << v.line();
  EXPECT_NE(v.line().find("corrected for 4 checks"), std::string::npos) << v.line();
}

TEST(RolloutVerdict, TwentyFiveItemsOfEitherAreInconclusive) {
  for (const double drop : {0.0, 0.05}) {
    const ConfigVerdict v = verdict_of(simulate(25, {drop}));
    EXPECT_EQ(v.verdict, Verdict::inconclusive) << drop << ": " << v.line();
    EXPECT_TRUE(std::isfinite(v.items_to_decide)) << v.line();
    EXPECT_GT(v.items_to_decide, 25.0);
    EXPECT_NE(v.line().find("items would"), std::string::npos) << v.line();
  }
  // No harm: the line says what the data do rule out, and it is far from the margin.
  const ConfigVerdict v = verdict_of(simulate(25, {}));
  EXPECT_NE(v.line().find("rules out a gold accuracy drop above"), std::string::npos) << v.line();
  const VerdictCheck* gold = check_named(v, "gold_accuracy_drop[lookup]");
  ASSERT_NE(gold, nullptr);
  EXPECT_GT(gold->high, 0.10) << "25 items cannot rule out a 10-point drop";
}

int rank(Verdict v, Verdict decided) { return v == Verdict::inconclusive ? 0 : v == decided ? 1 : -1; }

TEST(RolloutVerdict, MovesOneWayAsItemsAreAdded) {
  // The first n items of one stream: once decided, more of the same items never undecide it,
  // and it is never decided the wrong way.
  for (const auto& [drop, decided] : {std::pair{0.0, Verdict::safe}, std::pair{0.05, Verdict::unsafe}}) {
    int last = 0;
    double predicted = 0;
    size_t decided_at = 0;
    for (size_t n = 25; n <= 6400; n *= 2) {
      const ConfigVerdict v = verdict_of(simulate(n, {drop}));
      const int r = rank(v.verdict, decided);
      EXPECT_GE(r, last) << "drop " << drop << " at " << n << " items: " << v.line();
      last = r;
      if (n == 200) predicted = v.items_to_decide;
      if (r == 1 && decided_at == 0) decided_at = n;
    }
    EXPECT_EQ(last, 1) << "drop " << drop << " is decided by 6,400 items";
    // The estimate made at 200 items names the right order of magnitude.
    ASSERT_GT(decided_at, 200u) << drop;
    EXPECT_GT(predicted, decided_at / 4.0) << drop;
    EXPECT_LT(predicted, decided_at * 4.0) << drop;
  }
}

TEST(RolloutVerdict, GoldChecksNeedAReferenceThatAnswers) {
  GateRun run = simulate(200, {});
  for (GateItem& it : run.items) it.scores.exact_match_gold = false;  // nobody answers
  const ConfigVerdict v = verdict_of(run);
  const VerdictCheck* gold = check_named(v, "gold_accuracy_drop[lookup]");
  ASSERT_NE(gold, nullptr);
  EXPECT_EQ(gold->outcome, CheckOutcome::skipped);
  EXPECT_EQ(v.skipped, 1u);
  EXPECT_NE(v.line().find("not checked: gold accuracy drop in lookup (reference 0/200)"), std::string::npos) << v.line();
}

TEST(RolloutVerdict, DomainsAreCheckedEachAndTogether) {
  GateRun run = simulate(400, {});
  for (size_t i = 0; i < run.items.size(); ++i) run.items[i].domain = (i / 2) % 2 ? "tables" : "lookup";
  const RolloutPolicy p = parse_rollout_policy(R"({"kvgate_rollout_policy": 1,
      "margins": {"kld_mean_max": 0.02}, "domains": {"tables": {"kld_mean_max": 0.001}}})", "p.json");
  const ConfigVerdict v = verdict_of(run, p);
  ASSERT_EQ(v.checks.size(), 3u);
  EXPECT_EQ(v.checks[0].name, "kld_mean[*]");
  EXPECT_EQ(v.checks[1].name, "kld_mean[lookup]");
  EXPECT_EQ(v.checks[2].name, "kld_mean[tables]");
  EXPECT_EQ(v.checks[2].margin, 0.001);
  EXPECT_EQ(v.checks[0].items, 400u);
  EXPECT_EQ(v.checks[2].items, 200u);
  EXPECT_EQ(v.verdict, Verdict::unsafe) << "tables' tighter margin: " << v.line();
  EXPECT_NE(v.line().find("in tables"), std::string::npos) << v.line();
}

TEST(RolloutVerdict, PositionBucketsWhereReached) {
  GateRun run = simulate(300, {});
  // Each item reaches 2-4k, every third one 4-8k, where its KLD is ten times the margin.
  for (const GateItem& it : run.items) {
    if (it.config != kCand) continue;
    const int i = std::stoi(it.item_key.substr(5));
    PositionSums near;
    for (int t = 0; t < 20; ++t) near.add(0.001, 0, true);
    run.positions.push_back({it.item_key, kCand, 2, near});
    if (i % 3 == 0) {
      PositionSums far;
      for (int t = 0; t < 20; ++t) far.add(0.2 + 0.01 * (t % 3), 0, t % 2 == 0);
      run.positions.push_back({it.item_key, kCand, 3, far});
    }
  }
  const RolloutPolicy p = parse_rollout_policy(R"({"kvgate_rollout_policy": 1,
      "margins": {"kld_mean_max": 0.02, "same_top1_min": 0.9}, "positions": {"min_position": 2048}})", "p.json");
  const ConfigVerdict v = verdict_of(run, p);
  const VerdictCheck* near = check_named(v, "kld_mean@2-4k[*]");
  const VerdictCheck* far = check_named(v, "kld_mean@4-8k[*]");
  ASSERT_NE(near, nullptr);
  ASSERT_NE(far, nullptr);
  EXPECT_EQ(check_named(v, "kld_mean@8-16k[*]"), nullptr) << "no item reaches 8k: no check";
  EXPECT_EQ(near->outcome, CheckOutcome::within);
  EXPECT_EQ(far->outcome, CheckOutcome::beyond);
  EXPECT_EQ(far->items, 100u);
  EXPECT_EQ(v.verdict, Verdict::unsafe);
  EXPECT_NE(v.line().find("at positions 4-8k"), std::string::npos) << v.line();
}

TEST(RolloutVerdict, DecidingTogetherWidensTheBounds) {
  // Safe alone; one of 1,000 candidates decided together needs far more evidence.
  const GateRun run = simulate(1000, {});
  const ConfigVerdict alone = verdict_of(run);
  const ConfigVerdict many = verdict_of(run, policy(), 1000);
  EXPECT_EQ(alone.verdict, Verdict::safe) << alone.line();
  EXPECT_NEAR(many.confidence, 1 - 0.05 / 1000, 1e-12);
  EXPECT_GT(many.checks[0].high, alone.checks[0].high);
}

TEST(RolloutVerdict, ConclusionSaysWhatTheRunCannotDecide) {
  ConfigVerdict v = verdict_of(simulate(25, {}));
  v.label = "q4_0";
  const std::vector<std::string> lines = verdict_conclusion({v}, policy(), 25, "f16", {"lookup"});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("can neither clear nor rule out any config against f16"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("Not decided: q4_0 (about"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("(lookup)"), std::string::npos) << lines[2];
  const ConfigVerdict safe = verdict_of(simulate(2000, {}));
  EXPECT_NE(verdict_conclusion({safe}, policy(), 2000, "f16", {"lookup"})[0].find("clears cand to replace f16"),
            std::string::npos);
}

TEST(ItemCountText, TwoSignificantDigitsRoundedUp) {
  EXPECT_EQ(item_count_text(7.2), "8");
  EXPECT_EQ(item_count_text(99), "99");
  EXPECT_EQ(item_count_text(3041), "3,100");
  EXPECT_EQ(item_count_text(1234567), "1,300,000");
  EXPECT_EQ(item_count_text(5e8), "more than 10,000,000");
  EXPECT_EQ(item_count_text(std::nan("")), "unknown");
}

TEST(RolloutPolicyFile, TheShippedPolicyParses) {
  const RolloutPolicy p = load_rollout_policy(std::string(KVGATE_SOURCE_DIR) + "/ci/gates/rollout.json");
  EXPECT_EQ(p.confidence, 0.95);
  for (size_t m = 0; m < kVerdictMetrics.size(); ++m) EXPECT_TRUE(p.margin(m, "*").has_value()) << kVerdictMetrics[m].name();
  ASSERT_TRUE(p.position_from.has_value());
  EXPECT_EQ(*p.position_from, 2048);
  EXPECT_EQ(p.position_margin(2), p.margin(2, "*")) << "bucket margins inherit the workload's";
  EXPECT_FALSE(p.position_margin(0).has_value()) << "gold accuracy has no position rows";
}

TEST(RolloutPolicyFile, DomainOverridesInheritAndSwitchOff) {
  const RolloutPolicy p = parse_rollout_policy(R"({"kvgate_rollout_policy": 1,
      "margins": {"kld_mean_max": 0.02, "same_top1_min": 0.95},
      "domains": {"korean": {"kld_mean_max": 0.05, "same_top1_min": null, "note": "why"}}})", "p.json");
  EXPECT_EQ(p.margin(2, "korean"), 0.05);
  EXPECT_FALSE(p.margin(1, "korean").has_value());
  EXPECT_EQ(p.margin(1, "tables"), 0.95);
  EXPECT_FALSE(p.margin(0, "tables").has_value()) << "a margin the file does not set is not checked";
}

void expect_bad(const std::string& text, const std::string& words) {
  try {
    parse_rollout_policy(text, "p.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(RolloutPolicyFile, BadInputNamesTheKey) {
  expect_bad(R"({"kvgate_rollout_policy": 1})", "p.json: margins: missing");
  expect_bad(R"({"kvgate_rollout_policy": 2, "margins": {}})", "kvgate_rollout_policy: must be 1");
  expect_bad(R"({"kvgate_gate_policy": 1, "rules": []})", "this is a gate policy");
  expect_bad(R"({"kvgate_rollout_policy": 1, "margins": {"kld_mean": 0.1}})", "margins: unknown key 'kld_mean'");
  expect_bad(R"({"kvgate_rollout_policy": 1, "margins": {"same_top1_min": 95}})", "margins.same_top1_min: must be a fraction");
  expect_bad(R"({"kvgate_rollout_policy": 1, "margins": {"kld_mean_max": -1}})", "margins.kld_mean_max");
  expect_bad(R"({"kvgate_rollout_policy": 1, "confidence": 0.3, "margins": {}})", "confidence: expected a number in (0.5, 1)");
  expect_bad(R"({"kvgate_rollout_policy": 1, "margins": {}, "positions": {"min_position": 3000}})",
             "positions.min_position: expected the start of a position bucket");
  expect_bad(R"({"kvgate_rollout_policy": 1, "margins": {}, "positions": {"min_position": 2048,
                 "margins": {"gold_accuracy_drop_max": 0.1}}})",
             "positions.margins: unknown key 'gold_accuracy_drop_max'");
  expect_bad(R"({"kvgate_rollout_policy": 1, "margins": {}, "domains": {"*": {}}})", "domains: a domain name");
  expect_bad(R"({"kvgate_rollout_policy": 1, "margins": {"kld_mean_max": 0.1, "kld_mean_max": 0.2}})", "duplicate key");
}

}  // namespace
}  // namespace kvgate::scoring
