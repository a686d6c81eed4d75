// Sharded runs (docs/scale-out.md): the partition of a plan's items and where a shard comes
// from (unit tests of harness/eval_plan), then, end to end on the real default model, shards of
// an eval and of a replay merged with `kvgate runs merge` into a run equal to the unsharded one:
// every stored metric, `runs show`, and the gate's verdicts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/hash.h"
#include "harness/eval/eval_plan.h"
#include "results/sqlite.h"
#include "results/store.h"
#include "tests/results/sql_rows.h"
#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

using harness::EvalPlan;
using harness::ShardSpec;

EvalPlan plan_of(const std::vector<std::string>& ids) {
  EvalPlan plan;
  plan.workload.source = "evalset:test.jsonl";
  plan.workload.hash = "0123456789abcdef";
  for (const std::string& id : ids) {
    evalsets::EvalItem item;
    item.id = id;
    plan.workload.items.push_back(item);
  }
  return plan;
}

std::vector<std::string> ids(int n, const std::string& prefix = "item-") {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

// The ids shard `index` of `count` runs, up to --limit `limit`.
std::vector<std::string> shard_items(const std::vector<std::string>& all, int64_t index, int64_t count, int64_t limit = 0) {
  EvalPlan plan = plan_of(all);
  plan.limit = limit;
  plan.shard = ShardSpec{index, count, "test"};
  harness::select_items(plan);
  std::vector<std::string> out;
  for (const size_t i : plan.selected) out.push_back(plan.workload.items[i].id);
  return out;
}

TEST(ShardPartition, ShardsCoverThePlanOnceInWorkloadOrder) {
  const std::vector<std::string> all = ids(200);
  std::vector<std::string> seen;
  for (int64_t i = 0; i < 7; ++i) {
    const std::vector<std::string> part = shard_items(all, i, 7);
    EXPECT_GT(part.size(), 10u) << "shard " << i << " of 7 over 200 items";
    for (size_t k = 1; k < part.size(); ++k) EXPECT_LT(std::stoi(part[k - 1].substr(5)), std::stoi(part[k].substr(5)));
    seen.insert(seen.end(), part.begin(), part.end());
  }
  std::sort(seen.begin(), seen.end());
  std::vector<std::string> expected = all;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(seen, expected) << "every item in exactly one shard";
}

TEST(ShardPartition, AddingItemsMovesNoOtherItem) {
  const std::vector<std::string> before = ids(50);
  std::vector<std::string> after = ids(50, "new-");
  after.insert(after.begin() + 20, before.begin(), before.end());  // new items before, between and after
  for (int64_t i = 0; i < 4; ++i) {
    std::vector<std::string> kept;
    for (const std::string& id : shard_items(after, i, 4))
      if (id.rfind("item-", 0) == 0) kept.push_back(id);
    EXPECT_EQ(kept, shard_items(before, i, 4)) << "shard " << i;
  }
}

TEST(ShardPartition, LimitSelectsThePlanBeforeThePartition) {
  const std::vector<std::string> all = ids(40);
  const std::vector<std::string> first = {all.begin(), all.begin() + 9};
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(shard_items(all, i, 3, 9), shard_items(first, i, 3));
  EvalPlan plan = plan_of(all);
  plan.limit = 9;
  harness::select_items(plan);
  EXPECT_EQ(plan.plan_items(), 9u);
  EXPECT_TRUE(plan.leaves_items_out());
  plan.limit = 40;
  EXPECT_FALSE(plan.leaves_items_out());
}

// The hash is part of the stored format: shards made by two kvgate builds must agree on it.
TEST(ShardPartition, ItemHashIsPinned) {
  EXPECT_EQ(harness::shard_of_item("tables-s1-0000", 2), 1);
  EXPECT_EQ(harness::shard_of_item("tables-s1-0001", 2), 0);
  EXPECT_EQ(static_cast<uint64_t>(harness::shard_of_item("agentic-s3-0000", 1000003)),
            xxhash64(std::string_view("agentic-s3-0000")) % 1000003);
}

const char* env_from(const std::map<std::string, std::string>& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

std::optional<ShardSpec> resolve(const std::string& flag, const std::map<std::string, std::string>& env = {}) {
  return harness::resolve_shard(flag, [&](const char* name) { return env_from(env, name); });
}

std::string usage_error(const std::string& flag, const std::map<std::string, std::string>& env = {}) {
  try {
    resolve(flag, env);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no usage error for '" << flag << "'";
  return "";
}

TEST(ShardFlag, FlagThenSlurmThenKubernetes) {
  EXPECT_FALSE(resolve(""));
  EXPECT_FALSE(resolve("", {{"KVGATE_SHARD_COUNT", "4"}})) << "a count alone names no shard";
  const std::map<std::string, std::string> slurm = {{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "3"}};
  const std::map<std::string, std::string> k8s = {{"JOB_COMPLETION_INDEX", "2"}, {"KVGATE_SHARD_COUNT", "4"}};
  std::map<std::string, std::string> both = slurm;
  both.insert(k8s.begin(), k8s.end());

  std::optional<ShardSpec> s = resolve("3/8", both);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->index, 3);
  EXPECT_EQ(s->count, 8);
  EXPECT_EQ(s->origin, "--shard 3/8");
  s = resolve("", both);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->index, 1);
  EXPECT_EQ(s->count, 3);
  EXPECT_EQ(s->origin, "SLURM_ARRAY_TASK_ID=1, SLURM_ARRAY_TASK_COUNT=3");
  s = resolve("", k8s);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->index, 2);
  EXPECT_EQ(s->count, 4);
  EXPECT_EQ(s->origin, "JOB_COMPLETION_INDEX=2, KVGATE_SHARD_COUNT=4");
  s = resolve("0/1", slurm);
  ASSERT_TRUE(s) << "--shard 0/1 runs the whole plan inside an array used for something else";
  EXPECT_EQ(s->count, 1);
}

TEST(ShardFlag, BadShardsAreUsageErrorsNamingTheirSource) {
  EXPECT_NE(usage_error("4/4").find("--shard 4/4: shard index 4 is outside 0..3"), std::string::npos);
  for (const char* bad : {"1", "a/4", "-1/4", "1/0", "1/", "/4", "1/4/2", " 1/4", "1/4 "})
    EXPECT_NE(usage_error(bad).find(std::string("--shard ")), std::string::npos) << bad;
  std::string e = usage_error("", {{"SLURM_ARRAY_TASK_ID", "8"}, {"SLURM_ARRAY_TASK_COUNT", "8"}});
  EXPECT_NE(e.find("SLURM_ARRAY_TASK_ID=8, SLURM_ARRAY_TASK_COUNT=8: shard index 8 is outside 0..7"), std::string::npos)
      << e;
  e = usage_error("", {{"SLURM_ARRAY_TASK_ID", "1"}});
  EXPECT_NE(e.find("SLURM_ARRAY_TASK_ID=1 is set but SLURM_ARRAY_TASK_COUNT is not"), std::string::npos) << e;
  e = usage_error("", {{"JOB_COMPLETION_INDEX", "0"}});
  EXPECT_NE(e.find("JOB_COMPLETION_INDEX=0 is set but KVGATE_SHARD_COUNT is not"), std::string::npos) << e;
}

TEST(PlanDescription, EverythingThatDecidesTheNumbersAndNothingElse) {
  EvalPlan plan = plan_of(ids(10));
  for (const auto& [role, spec] : {std::pair{harness::ConfigRole::reference, "f16/f16"},
                                    std::pair{harness::ConfigRole::candidate, "q4_0/q4_0"}}) {
    harness::PlannedConfig config;
    config.role = role;
    config.spec = spec;
    plan.configs.push_back(config);
  }
  const harness::PlanSettings settings{"sha", 2, 32, "cpu", "0.1.0", "abc", {}};
  const std::string base = harness::describe_plan(plan, settings);
  EXPECT_NE(base.find("config reference f16/f16\nconfig candidate q4_0/q4_0\n"), std::string::npos) << base;

  std::set<std::string> texts = {base};
  auto differs = [&](const std::string& text, const char* what) { EXPECT_TRUE(texts.insert(text).second) << what; };
  for (auto change : {&harness::PlanSettings::model_sha256, &harness::PlanSettings::backend,
                      &harness::PlanSettings::kvgate_version, &harness::PlanSettings::git_sha}) {
    harness::PlanSettings s = settings;
    s.*change += "x";
    differs(harness::describe_plan(plan, s), "a setting");
  }
  for (auto change : {&harness::PlanSettings::threads, &harness::PlanSettings::max_new_tokens}) {
    harness::PlanSettings s = settings;
    s.*change += 1;
    differs(harness::describe_plan(plan, s), "threads or max-new-tokens");
  }
  EvalPlan limited = plan;
  limited.limit = 5;
  differs(harness::describe_plan(limited, settings), "--limit");
  EvalPlan roles = plan;
  roles.configs[0].role = harness::ConfigRole::candidate;
  roles.configs[1].role = harness::ConfigRole::reference;
  differs(harness::describe_plan(roles, settings), "roles");
  EvalPlan content = plan;
  content.workload.hash = "fedcba9876543210";
  differs(harness::describe_plan(content, settings), "the items' content");

  EvalPlan shard = plan;
  shard.shard = ShardSpec{1, 4, "--shard 1/4"};
  harness::select_items(shard);
  EXPECT_EQ(harness::describe_plan(shard, settings), base) << "all shards of a plan share it";
}

// ---- end to end on the real default model ----

std::string temp(const std::string& name) {
  return scratch_path("shard", name);
}

nlohmann::json run_json(const std::string& args, const std::string& env = "", int expected_exit = 0) {
  const CliResult r = run_kvgate(args + " --json", env);
  EXPECT_EQ(r.exit_code, expected_exit) << args << "\n" << r.err;
  return r.out.empty() ? nlohmann::json::object() : nlohmann::json::parse(r.out);
}

// The default gate policy without its latency limit: latency is measured, so two runs of one
// plan differ there, and a test must not depend on timing.
const std::string& policy_without_latency() {
  static const std::string path = [] {
    nlohmann::json policy = nlohmann::json::parse(slurp(std::string(KVGATE_SOURCE_DIR) + "/ci/gates/default.json"));
    for (auto& [name, limit] : policy["latency"].items()) limit = nullptr;
    const std::string p = temp("policy.json");
    std::ofstream(p) << policy.dump(2);
    return p;
  }();
  return path;
}

// `runs show --json` without what names the run itself: id, database, times, command, sources.
nlohmann::json shown(const std::string& db, int64_t run) {
  nlohmann::json j = run_json("runs show " + std::to_string(run) + " --db " + db);
  for (const char* key : {"id", "db", "started_at", "finished_at", "command"}) j.erase(key);
  if (j.contains("plan") && j["plan"].is_object()) j["plan"].erase("merged_from");
  // Per-turn latency is wall-clock: the shards' runs timed it, not the unsharded run's.
  if (j.contains("per_turn"))
    for (auto& t : j["per_turn"]["turns"]) t.erase("ttft_ms"), t.erase("tpot_ms");
  return j;
}

// Every stored value of run `run` that does not depend on timing, doubles by their bits, plus the
// shape of the timed ones (which turns have how many latency samples).
std::vector<std::string> deterministic_rows(const std::string& db, int64_t run) {
  const std::string r = std::to_string(run);
  const std::string join = " JOIN items i ON i.id = x.item_id JOIN configs c ON c.id = x.config_id WHERE i.run_id = " + r;
  std::vector<std::string> all;
  auto add = [&](const std::string& table, const std::string& sql, const std::string& kinds) {
    for (std::string& row : sql_rows(db, sql, kinds)) all.push_back(table + ": " + row);
  };
  add("config", "SELECT c.spec, c.hash, c.bits_per_element, x.role, x.kv_bytes_per_token FROM run_configs x JOIN configs c "
                "ON c.id = x.config_id WHERE x.run_id = " + r + " ORDER BY c.spec", "ttdtd");
  add("item", "SELECT item_key, domain, evalset_hash, item_hash FROM items WHERE run_id = " + r + " ORDER BY id", "tttt");
  add("metrics", "SELECT i.item_key, c.spec, x.scored_tokens, x.kld_mean, x.kld_max, x.kld_p99, x.delta_p_mean, "
                 "x.delta_p_rms, x.same_top1, x.nll_mean, x.nll_ref_mean, x.generated_tokens, x.first_divergence, "
                 "x.exact_match_ref, x.exact_match_gold FROM item_metrics x" + join + " ORDER BY 1, 2",
      "tttddddddddtttt");
  add("turn", "SELECT i.item_key, c.spec, x.turn_index, x.context_tokens, x.scored_tokens, x.kld_mean, x.same_top1 "
              "FROM turn_metrics x" + join + " ORDER BY 1, 2, 3", "tttttdd");
  add("class", "SELECT i.item_key, c.spec, x.token_class, x.scored_tokens, x.kld_sum, x.delta_p_sum, x.same_top1 "
               "FROM token_class_metrics x" + join + " ORDER BY 1, 2, 3", "ttttddt");
  add("latency", "SELECT i.item_key, c.spec, x.turn_index, COUNT(*) FROM latency_samples x" + join +
                 " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3", "tttt");
  return all;
}

// The timed values too, bit for bit: what a merge must copy unchanged from its shards.
std::vector<std::string> timed_rows(const std::string& db, const std::string& run_filter) {
  const std::string join = " JOIN items i ON i.id = x.item_id JOIN configs c ON c.id = x.config_id WHERE " + run_filter;
  std::vector<std::string> all = sql_rows(
      db, "SELECT i.item_key, c.spec, x.turn_index, x.token_index, x.t_ms FROM latency_samples x" + join, "ttttd");
  for (std::string& row : sql_rows(db, "SELECT i.item_key, c.spec, x.turn_index, x.ttft_ms, x.tpot_ms FROM turn_metrics x" + join,
                                      "tttdd"))
    all.push_back(std::move(row));
  std::sort(all.begin(), all.end());
  return all;
}

// Runs the plan `args` unsharded into `db` (run 1) and as two shards in parallel (shard 0 by
// --shard, shard 1 by a Slurm array task's environment), merges the shards into `db` and checks
// the merged run against the unsharded one. Returns the merged run's id.
int64_t shard_merge_and_compare(const std::string& command, const std::string& args, const std::string& db) {
  for (const std::string& file : {db, db + ".shard-0", db + ".shard-1", db + ".alone"})
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(file + suffix);
  const nlohmann::json whole = run_json(command + " " + args + " --db " + db);
  EXPECT_EQ(whole["run"], 1);
  EXPECT_TRUE(whole["shard"].is_null());
  const std::string s0 = db + ".shard-0", s1 = db + ".shard-1";
  nlohmann::json shard0, shard1;
  std::thread t0([&] { shard0 = run_json(command + " " + args + " --shard 0/2 --db " + s0); });
  std::thread t1(
      [&] { shard1 = run_json(command + " " + args + " --db " + s1, "SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=2"); });
  t0.join();
  t1.join();
  EXPECT_EQ(shard0["shard"], nlohmann::json({{"index", 0}, {"count", 2}, {"from", "--shard 0/2"}}));
  EXPECT_EQ(shard1["shard"], nlohmann::json({{"index", 1}, {"count", 2}, {"from", "SLURM_ARRAY_TASK_ID=1, SLURM_ARRAY_TASK_COUNT=2"}}));
  EXPECT_GE(shard0["items"].get<int>(), 1);
  EXPECT_GE(shard1["items"].get<int>(), 1);
  EXPECT_EQ(shard0["items"].get<int>() + shard1["items"].get<int>(), whole["items"].get<int>());
  EXPECT_EQ(shard0["plan_hash"], whole["plan_hash"]);
  EXPECT_EQ(shard1["plan_hash"], whole["plan_hash"]);

  // One shard alone is not the whole run: refused, naming the missing shard.
  const CliResult alone = run_kvgate("runs merge " + db + ".alone " + s0);
  EXPECT_EQ(alone.exit_code, 2) << alone.err;
  EXPECT_NE(alone.err.find("1 of 2 shards missing: shard 1 (items "), std::string::npos) << alone.err;
  EXPECT_FALSE(std::filesystem::exists(db + ".alone"));

  const nlohmann::json merged = run_json("runs merge " + db + " " + s0 + " " + s1);
  EXPECT_EQ(merged["run"], 2);
  EXPECT_EQ(merged["already_merged"], false);
  EXPECT_EQ(merged["plan_hash"], whole["plan_hash"]);
  const nlohmann::json again = run_json("runs merge " + db + " " + s1 + " " + s0);
  EXPECT_EQ(again["run"], 2);
  EXPECT_EQ(again["already_merged"], true);
  EXPECT_EQ(run_json("runs list --db " + db)["runs"].size(), 2u) << "merging again adds no run";

  const std::vector<std::string> expected = deterministic_rows(db, 1);
  EXPECT_GT(expected.size(), 20u);
  EXPECT_EQ(deterministic_rows(db, 2), expected);
  std::vector<std::string> from_shards = timed_rows(s0, "i.run_id = 1");
  for (std::string& row : timed_rows(s1, "i.run_id = 1")) from_shards.push_back(std::move(row));
  std::sort(from_shards.begin(), from_shards.end());
  EXPECT_EQ(timed_rows(db, "i.run_id = 2"), from_shards) << "latencies are copied from the shards unchanged";
  EXPECT_EQ(shown(db, 2), shown(db, 1));

  for (const auto& [baseline, candidate] : {std::pair{1, 2}, std::pair{2, 1}}) {
    const nlohmann::json gate = run_json("gate --baseline " + std::to_string(baseline) + " --candidate " +
                                         std::to_string(candidate) + " --policy " + policy_without_latency() + " --db " + db);
    EXPECT_EQ(gate["failed"], 0) << gate.dump(1);
    EXPECT_GT(gate["checks_total"].get<int>(), 5);
  }
  return 2;
}

// A gate's verdicts, without the run ids in its header and notes.
nlohmann::json verdicts(const nlohmann::json& gate) { return {gate["passed"], gate["failed"], gate["checks"]}; }

TEST(ShardCli, ShardedEvalMergesIntoTheUnshardedRun) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string db = temp("eval.db");
  const std::string args = "--suite smoke --limit 4 --kv q4_0 --threads 1 --max-new-tokens 8";
  const int64_t merged = shard_merge_and_compare("eval", args, db);
  EXPECT_EQ(shown(db, merged)["status"], "interrupted") << "a --limit plan, as the unsharded run";

  // A shard resumes as itself, over its own items (all held: nothing to run), with its plan's
  // settings (here --threads 1 and --max-new-tokens 8, not given again).
  const std::string s1 = db + ".shard-1";
  const nlohmann::json resumed = run_json("eval --resume 1 --db " + s1);
  EXPECT_EQ(resumed["shard"]["index"], 1);
  EXPECT_EQ(resumed["items_run"], 0);
  EXPECT_EQ(resumed["items_skipped"], resumed["items"]);
  EXPECT_EQ(resumed["plan_hash"], shown(db, merged)["plan"]["hash"]);
  EXPECT_TRUE(run_json("runs merge " + db + " " + db + ".shard-0 " + s1)["already_merged"]);
  for (const char* other : {"--shard 0/2", "--limit 3"}) {
    const CliResult r = run_kvgate("eval --resume 1 " + std::string(other) + " --db " + s1);
    EXPECT_EQ(r.exit_code, 2) << other << ": " << r.err;
    EXPECT_NE(r.err.find("resume it without"), std::string::npos) << r.err;
  }
  const CliResult other_threads = run_kvgate("eval --resume 1 --threads 2 --db " + s1);
  EXPECT_EQ(other_threads.exit_code, 2) << other_threads.err;
  EXPECT_NE(other_threads.err.find("is shard 1/2 of a plan made with threads 1 (now 2); resume it with the same settings"),
            std::string::npos)
      << other_threads.err;

  // A third run, q8_0 on the same items, as the baseline of both: paired with q4_0 its
  // regression checks fail, the same ones with the same numbers for either candidate.
  const nlohmann::json third = run_json("eval --suite smoke --limit 4 --kv q8_0 --threads 1 --max-new-tokens 8 --db " + db);
  const std::string gate = "gate --baseline " + std::to_string(third["run"].get<int>()) +
                           " --pair-config q8_0/q8_0=q4_0/q4_0 --policy " + policy_without_latency() + " --db " + db;
  const CliResult a = run_kvgate(gate + " --candidate 1 --json"), b = run_kvgate(gate + " --candidate 2 --json");
  EXPECT_EQ(a.exit_code, b.exit_code) << a.err << b.err;
  ASSERT_FALSE(a.out.empty() || b.out.empty()) << a.err << b.err;
  const nlohmann::json va = verdicts(nlohmann::json::parse(a.out)), vb = verdicts(nlohmann::json::parse(b.out));
  EXPECT_EQ(va, vb);
  EXPECT_GT(va[1].get<int>(), 0) << "q4_0 against q8_0 fails some checks: " << a.out;
}

TEST(ShardCli, ShardedReplayMergesIntoTheUnshardedRun) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string generated = temp("generated.jsonl"), trace = temp("sessions.jsonl"), db = temp("replay.db");
  // Two agent sessions (one per shard), each cut to its first two user requests to keep it short.
  const CliResult g = run_kvgate("evalset generate --domain agentic --seed 1 --n 2 --out " + generated);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  {
    std::ifstream in(generated);
    std::ofstream out(trace);
    for (std::string line; std::getline(in, line);) {
      nlohmann::json session = nlohmann::json::parse(line);
      session["messages"].erase(session["messages"].begin() + 9, session["messages"].end());
      session.erase("answer");
      out << session.dump() << "\n";
    }
  }
  shard_merge_and_compare("replay", "--trace " + trace + " --kv q4_0 --threads 1 --max-new-tokens 8", db);
  const nlohmann::json show = shown(db, 2);
  EXPECT_EQ(show["status"], "complete");
  results::Connection c(db, false);
  results::Statement turns(c, "SELECT COUNT(DISTINCT turn_index) FROM turn_metrics t JOIN items i ON i.id = t.item_id WHERE i.run_id = 2");
  turns.step();
  EXPECT_GT(turns.column_int(0), 1) << "sessions of several turns";
}

TEST(ShardCli, ShardOutsideTheCountIsExit2BeforeAnyWork) {
  const std::string db = temp("bad.db");
  CliResult r = run_kvgate("eval --suite smoke --kv q4_0 --shard 2/2 --db " + db);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--shard 2/2: shard index 2 is outside 0..1"), std::string::npos) << r.err;
  r = run_kvgate("eval --suite smoke --kv q4_0 --db " + db, "SLURM_ARRAY_TASK_ID=3");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("SLURM_ARRAY_TASK_ID=3 is set but SLURM_ARRAY_TASK_COUNT is not"), std::string::npos) << r.err;
  r = run_kvgate("replay --trace x.jsonl --kv q4_0 --db " + db, "JOB_COMPLETION_INDEX=0");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("KVGATE_SHARD_COUNT is not"), std::string::npos) << r.err;
  r = run_kvgate("runs merge " + db + " " + temp("no-such-shard.db"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("no-such-shard.db: no such results database"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvgate::testing
