// Engine mode shards like an in-process run (docs/scale-out.md, docs/engine-mode.md): N workers,
// each with its own copy of the endpoints, run the shards of one plan, and `kvgate runs merge`
// makes one run equal to the unsharded one. The endpoints are fake servers, so every number is a
// deterministic function of the items.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/hash.h"
#include "results/sqlite.h"
#include "results/store.h"
#include "tests/results/sql_rows.h"
#include "tests/cli/run_cli.h"
#include "tests/serving/fake_server.h"

namespace kvgate::testing {
namespace {

std::string temp(const std::string& name) {
  return scratch_path("engine_shard", name);
}

void remove_db(const std::string& db) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db + suffix);
}

nlohmann::json run_json(const std::string& args, const std::string& env = "") {
  const CliResult r = run_kvgate(args + " --json", env);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  return r.out.empty() ? nlohmann::json::object() : nlohmann::json::parse(r.out);
}

// Every value of run `run` that does not depend on timing or on which server answered, doubles
// by their bits.
std::vector<std::string> deterministic_rows(const std::string& db, int64_t run) {
  const std::string r = std::to_string(run);
  const std::string join = " JOIN items i ON i.id = x.item_id JOIN configs c ON c.id = x.config_id WHERE i.run_id = " + r;
  std::vector<std::string> all;
  auto add = [&](const std::string& table, const std::string& sql, const std::string& kinds) {
    for (std::string& row : sql_rows(db, sql, kinds)) all.push_back(table + ": " + row);
  };
  add("config", "SELECT c.spec, c.hash, x.role, x.kld_estimator, x.top_k FROM run_configs x JOIN configs c "
                "ON c.id = x.config_id WHERE x.run_id = " + r + " ORDER BY c.spec", "ttttt");
  add("endpoint", "SELECT c.spec, x.name, x.engine, x.engine_version, x.model, x.kv, x.kv_source, x.kv_reported "
                  "FROM config_endpoints x JOIN configs c ON c.id = x.config_id WHERE x.run_id = " + r + " ORDER BY 1",
      "tttttttt");
  add("item", "SELECT item_key, domain, evalset_hash, item_hash FROM items WHERE run_id = " + r + " ORDER BY id", "tttt");
  add("metrics", "SELECT i.item_key, c.spec, x.scored_tokens, x.kld_mean, x.kld_max, x.kld_p99, x.delta_p_mean, "
                 "x.delta_p_rms, x.top1_agreement, x.nll_mean, x.nll_ref_mean, x.generated_tokens, x.first_divergence, "
                 "x.exact_match_ref, x.exact_match_gold FROM item_metrics x" + join + " ORDER BY 1, 2",
      "tttddddddddtttt");
  add("turn", "SELECT i.item_key, c.spec, x.turn_index, x.context_tokens, x.scored_tokens, x.kld_mean, x.top1_agreement, "
              "x.prompt_tokens FROM turn_metrics x" + join + " ORDER BY 1, 2, 3", "tttttddt");
  add("class", "SELECT i.item_key, c.spec, x.token_class, x.scored_tokens, x.kld_sum, x.delta_p_sum, x.same_top1 "
               "FROM token_class_metrics x" + join + " ORDER BY 1, 2, 3", "ttttddt");
  add("latency", "SELECT i.item_key, c.spec, x.turn_index, COUNT(*) FROM latency_samples x" + join +
                 " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3", "tttt");
  return all;
}

// What the servers measured as it happened (times, prefix-cache hits): a merge copies it.
std::vector<std::string> measured_rows(const std::string& db, int64_t run) {
  const std::string join =
      " JOIN items i ON i.id = x.item_id JOIN configs c ON c.id = x.config_id WHERE i.run_id = " + std::to_string(run);
  std::vector<std::string> all =
      sql_rows(db, "SELECT i.item_key, c.spec, x.turn_index, x.token_index, x.t_ms FROM latency_samples x" + join, "ttttd");
  for (std::string& row : sql_rows(db, "SELECT i.item_key, c.spec, x.turn_index, x.ttft_ms, x.tpot_ms, x.cached_tokens "
                                   "FROM turn_metrics x" + join, "tttddt"))
    all.push_back(std::move(row));
  std::sort(all.begin(), all.end());
  return all;
}

TEST(EngineShardCli, ShardsOnTheirOwnEndpointsMergeIntoTheUnshardedRun) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string items = temp("items.jsonl");
  std::filesystem::remove(items);
  for (const char* domain : {"tables", "korean"}) {
    const std::string part = temp(std::string(domain) + ".jsonl");
    const CliResult g = run_kvgate(std::string("evalset generate --domain ") + domain +
                                   " --seed 7 --n 3 --tokens-min 120 --tokens-max 200 --out " + part);
    ASSERT_EQ(g.exit_code, 0) << g.err;
    std::ofstream(items, std::ios::app) << slurp(part);
  }
  // The unsharded run and shard 0 use one pair of servers; shard 1, another worker, its own.
  // vLLM servers (the fake's default) that report prefix-cache hits, the candidates with an fp8
  // cache as /metrics says.
  FakeServerOptions ref_options, cand_options;
  ref_options.vllm_prompt_tokens_details = cand_options.vllm_prompt_tokens_details = true;
  cand_options.kv_cache_dtype = "fp8";
  FakeServer ref_a(ref_options), cand_a(cand_options), ref_b(ref_options), cand_b(cand_options);
  auto endpoints = [](const FakeServer& ref, const FakeServer& cand) {
    return " --endpoint f16=" + ref.url() + ",fp8=" + cand.url() + " --ref-endpoint f16";
  };
  const std::string plan = "eval --evalset " + items + " --max-new-tokens 4";
  const std::string db = temp("whole.db"), s0 = temp("shard0.db"), s1 = temp("shard1.db");
  for (const std::string& file : {db, s0, s1}) remove_db(file);

  const nlohmann::json whole = run_json(plan + endpoints(ref_a, cand_a) + " --db " + db);
  const nlohmann::json shard0 = run_json(plan + endpoints(ref_a, cand_a) + " --shard 0/2 --db " + s0);
  const nlohmann::json shard1 =
      run_json(plan + endpoints(ref_b, cand_b) + " --db " + s1, "SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=2");
  ASSERT_EQ(whole["items"], 6);
  EXPECT_GE(shard0["items"].get<int>(), 1);
  EXPECT_GE(shard1["items"].get<int>(), 1);
  EXPECT_EQ(shard0["items"].get<int>() + shard1["items"].get<int>(), 6);
  EXPECT_EQ(shard0["plan_hash"], whole["plan_hash"]) << "the plan does not name the servers' addresses";
  EXPECT_EQ(shard1["plan_hash"], whole["plan_hash"]);
  for (const auto& c : whole["configs"]) EXPECT_EQ(c["kld_estimator"], "topk") << c.dump();

  const nlohmann::json merged = run_json("runs merge " + db + " " + s0 + " " + s1);
  ASSERT_EQ(merged["run"], 2);
  EXPECT_EQ(merged["plan_hash"], whole["plan_hash"]);
  const std::vector<std::string> expected = deterministic_rows(db, 1);
  EXPECT_GT(expected.size(), 30u);
  EXPECT_EQ(deterministic_rows(db, 2), expected);
  std::vector<std::string> from_shards = measured_rows(s0, 1);
  for (std::string& row : measured_rows(s1, 1)) from_shards.push_back(std::move(row));
  std::sort(from_shards.begin(), from_shards.end());
  EXPECT_EQ(measured_rows(db, 2), from_shards) << "times and cache hits are copied from the shards unchanged";
  // Each endpoint config names every server its shards ran on.
  EXPECT_EQ(sql_rows(db, "SELECT e.url FROM config_endpoints e JOIN configs c ON c.id = e.config_id "
                     "WHERE e.run_id = 2 AND e.name = 'fp8'", "t"),
            std::vector<std::string>{cand_a.url() + ", " + cand_b.url() + "|"});
  const nlohmann::json show = run_json("runs show 2 --db " + db);
  EXPECT_EQ(show["status"], "complete");
  EXPECT_EQ(show["threads"], 0) << "an engine-only run computes nothing in-process";

  // A load replay is one timed experiment: it is not sharded.
  const std::string trace = temp("trace.jsonl");
  std::ofstream(trace) << R"({"timestamp_ms": 0, "input_tokens": 20, "output_tokens": 2})" << "\n";
  const CliResult load = run_kvgate("replay --trace " + trace + " --endpoint f16=" + ref_a.url() + " --shard 0/2 --db " +
                                    temp("load.db"));
  EXPECT_EQ(load.exit_code, 2) << load.err;
  EXPECT_NE(load.err.find("--shard 0/2: a load replay is one timed experiment and is not sharded"), std::string::npos)
      << load.err;
}

}  // namespace
}  // namespace kvgate::testing
