// The engine-mode tables (schema migration 3): endpoints, estimators, item failures that a
// stored item clears, per-turn cache hits, load replays and predictions, and version-1,
// version-2 and version-3 files brought forward without losing their rows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "results/schema.h"
#include "results/sqlite.h"
#include "results/store.h"
#include "tests/results/scratch_db.h"

namespace kvgate::results {
namespace {

class StoreEngineTest : public testing::ScratchDbTest {
 protected:
  StoreEngineTest() : ScratchDbTest("kvgate_results_engine_") {}
};

RunInfo run_info() {
  RunInfo r;
  r.command = "kvgate eval --endpoint q4_0=http://x";
  r.suite_name = "evalset:x.jsonl";
  r.suite_hash = "1";
  return r;
}

TEST_F(StoreEngineTest, EndpointsAndEstimatorsReadBack) {
  Store store = Store::open(path_);
  const int64_t run = store.begin_run(run_info());
  const int64_t ref = store.add_config({"f16/f16", "a", 16});
  const int64_t eng = store.add_config({"endpoint:q4_0=q4_0/q4_0", "b", 4.5});
  store.attach_config(run, ref, ConfigRole::reference, 100);
  store.attach_config(run, eng, ConfigRole::candidate, 30);
  store.set_config_estimator(run, eng, "topk", 20);
  store.add_config_endpoint(run, {eng, "q4_0", "http://***@host:8080", "llama-server", "b11434", "m.gguf", "q4_0/q4_0",
                                  "name", "", "{}"});
  // A resumed run records where it finished.
  store.add_config_endpoint(run, {eng, "q4_0", "http://host:9090", "llama-server", "b11434", "m.gguf", "q4_0/q4_0",
                                  "name", "", "{}"});
  const auto configs = store.run_configs(run);
  ASSERT_EQ(configs.size(), 2u);
  EXPECT_EQ(configs[0].kld_estimator, "full");
  EXPECT_FALSE(configs[0].top_k.has_value());
  EXPECT_EQ(configs[1].kld_estimator, "topk");
  EXPECT_EQ(configs[1].top_k, 20);
  const auto endpoints = store.config_endpoints(run);
  ASSERT_EQ(endpoints.size(), 1u);
  EXPECT_EQ(endpoints[0].url, "http://host:9090");
  EXPECT_EQ(endpoints[0].engine_version, "b11434");
  EXPECT_THROW(store.set_config_estimator(run, eng, "guess", 3), kvgate::Error) << "the column's CHECK refuses other estimators";
}

TEST_F(StoreEngineTest, StoringAnItemClearsItsFailure) {
  Store store = Store::open(path_);
  const int64_t run = store.begin_run(run_info());
  const int64_t c = store.add_config({"f16/f16", "a", 16});
  store.attach_config(run, c, ConfigRole::reference, 100);
  store.record_item_failure(run, {"item-1", c, "f16", "stall", "endpoint 'f16' (http://x): the stream stalled", ""});
  store.record_item_failure(run, {"item-2", c, "f16", "connect", "first", ""});
  store.record_item_failure(run, {"item-2", c, "f16", "broken", "second", ""});  // the latest failure stands
  auto failures = store.item_failures(run);
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_EQ(failures[1].failure, "broken");
  EXPECT_EQ(failures[1].message, "second");
  EXPECT_EQ(failures[0].failed_at.size(), 24u) << failures[0].failed_at;  // 2026-12-02T09:55:00.123Z
  EXPECT_TRUE(store.finished_pairs(run).empty()) << "a failure writes no metrics";

  ItemWriter w = store.begin_item(run, {"item-1", "tables", "h", "i1"});
  ItemMetrics m;
  m.config_id = c;
  w.add_metrics(m);
  TurnMetrics t;
  t.config_id = c;
  t.prompt_tokens = 500;
  t.cached_tokens = 448;
  w.add_turn(t);
  w.commit();
  failures = store.item_failures(run);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].item_key, "item-2");
  const auto turns = store.run_turn_metrics(run);
  ASSERT_EQ(turns.size(), 1u);
  EXPECT_EQ(turns[0].turn.prompt_tokens, 500);
  EXPECT_EQ(turns[0].turn.cached_tokens, 448);
}

TEST_F(StoreEngineTest, LoadReplayRowsAndPredictions) {
  Store store = Store::open(path_);
  const int64_t run = store.begin_run(run_info());
  const int64_t c = store.add_config({"endpoint:f16=f16/f16", "a", 16});
  store.attach_config(run, c, ConfigRole::reference, 100);
  EXPECT_FALSE(store.load_replay(run).has_value());
  store.add_load_replay(run, {"trace.jsonl", "mooncake", 2, 0.5, 8, 2000, 100, 512, "H100", "Llama-3.1-8B"});
  LoadRequest ok;
  ok.config_id = c;
  ok.request_index = 0;
  ok.ok = true;
  ok.output_tokens = 4;
  ok.cached_tokens = 16;
  ok.ttft_ms = 12.5, ok.tpot_ms = 3.25, ok.latency_ms = 22.25, ok.max_gap_ms = 4;
  LoadRequest failed;
  failed.config_id = c;
  failed.request_index = 1;
  failed.failure = "timeout";
  failed.ttft_ms = failed.tpot_ms = failed.latency_ms = failed.max_gap_ms = std::nan("");
  store.add_load_requests(run, {ok, failed});
  store.add_capacity_prediction(run, {c, 0.4, 1, 2, 3, 0.5, 0.6, 1000, 123456, "KV-bound"});
  const auto settings = store.load_replay(run);
  ASSERT_TRUE(settings.has_value());
  EXPECT_EQ(settings->format, "mooncake");
  EXPECT_EQ(settings->time_scale, 0.5);
  const auto rows = store.load_requests(run);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].ok);
  EXPECT_EQ(rows[0].cached_tokens, 16);
  EXPECT_EQ(rows[0].tpot_ms, 3.25);
  EXPECT_FALSE(rows[1].ok);
  EXPECT_EQ(rows[1].failure, "timeout");
  EXPECT_TRUE(std::isnan(rows[1].ttft_ms)) << "not measured reads back as NaN";
  EXPECT_FALSE(rows[1].cached_tokens.has_value());
  const auto predictions = store.capacity_predictions(run);
  ASSERT_EQ(predictions.size(), 1u);
  EXPECT_EQ(predictions[0].verdict, "KV-bound");
  EXPECT_EQ(predictions[0].kv_token_capacity, 123456);
}

// A database written by a kvgate before sharded runs and engine mode: migrations 2 and 3 add to
// it in place.
TEST_F(StoreEngineTest, VersionOneDatabaseIsBroughtForward) {
  {
    Connection c(path_, true);
    c.execute_script(schema_migrations()[0]);
    c.execute_script("PRAGMA user_version = 1");
    c.execute_script(
        "INSERT INTO runs (status, started_at, command, git_sha, build_flags, host, cpu, gpu, backend, model_path, "
        "model_sha256, suite_name, suite_hash, seed, threads, kvgate_version) VALUES ('complete', 't', 'c', 'g', 'b', "
        "'h', 'cpu', '', 'cpu', 'm', 's', 'suite:smoke', 'x', 0, 2, '0.1.0')");
    c.execute_script("INSERT INTO configs (spec, hash, bits_per_element) VALUES ('q4_0/q4_0', 'h', 4.5)");
    c.execute_script("INSERT INTO run_configs (run_id, config_id, role, kv_bytes_per_token) VALUES (1, 1, 'candidate', 30)");
  }
  Store store = Store::open(path_);
  EXPECT_EQ(store.schema_version(), latest_schema_version());
  EXPECT_GE(latest_schema_version(), 3);
  const auto configs = store.run_configs(1);
  ASSERT_EQ(configs.size(), 1u);
  EXPECT_EQ(configs[0].kld_estimator, "full") << "runs before engine mode measured every logit";
  EXPECT_TRUE(store.config_endpoints(1).empty());
}

// A database of a kvgate with sharded runs but not engine mode (version 2): its shard plan and
// items stay, and migration 3 adds the engine-mode columns and tables beside them.
TEST_F(StoreEngineTest, VersionTwoDatabaseIsBroughtForward) {
  {
    Connection c(path_, true);
    c.execute_script(schema_migrations()[0]);
    c.execute_script(schema_migrations()[1]);
    c.execute_script("PRAGMA user_version = 2");
    c.execute_script(
        "INSERT INTO runs (status, started_at, command, git_sha, build_flags, host, cpu, gpu, backend, model_path, "
        "model_sha256, suite_name, suite_hash, seed, threads, kvgate_version) VALUES ('complete', 't', 'c', 'g', 'b', "
        "'h', 'cpu', '', 'cpu', 'm', 's', 'suite:smoke', 'x', 0, 2, '0.1.0')");
    c.execute_script("INSERT INTO configs (spec, hash, bits_per_element) VALUES ('q4_0/q4_0', 'h', 4.5)");
    c.execute_script("INSERT INTO run_configs (run_id, config_id, role, kv_bytes_per_token) VALUES (1, 1, 'candidate', 30)");
    c.execute_script("INSERT INTO items (run_id, item_key, domain, evalset_hash, item_hash) VALUES (1, 'a', 'd', 'e', 'i')");
    c.execute_script(
        "INSERT INTO turn_metrics (item_id, config_id, turn_index, context_tokens, scored_tokens, kld_mean, "
        "top1_agreement, ttft_ms, tpot_ms) VALUES (1, 1, 0, 10, 5, 0.01, 1.0, 2.0, 3.0)");
    c.execute_script(
        "INSERT INTO run_plans (run_id, plan_hash, plan, plan_items, shard_index, shard_count, shard_origin) "
        "VALUES (1, 'p', 'kvgate_plan 1', 1, 0, 2, '--shard 0/2')");
    c.execute_script("INSERT INTO run_plan_items (run_id, position, item_key, shard_index) VALUES (1, 0, 'a', 0)");
  }
  Store store = Store::open(path_);
  EXPECT_EQ(store.schema_version(), latest_schema_version());
  const std::optional<RunPlan> plan = store.run_plan(1);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->plan_hash, "p");
  EXPECT_EQ(plan->shard_count, 2);
  EXPECT_EQ(store.run_plan_items(1).size(), 1u);
  const auto configs = store.run_configs(1);
  ASSERT_EQ(configs.size(), 1u);
  EXPECT_EQ(configs[0].kld_estimator, "full");
  const auto turns = store.run_turn_metrics(1);
  ASSERT_EQ(turns.size(), 1u);
  EXPECT_EQ(turns[0].turn.ttft_ms, 2.0);
  EXPECT_FALSE(turns[0].turn.cached_tokens.has_value()) << "measured before engine mode: no cache hits known";
  ConfigEndpoint e;
  e.config_id = 1;
  e.name = "q4_0";
  e.url = "http://x";
  e.engine = "vllm";
  e.kv = "q4_0/q4_0";
  e.kv_source = "name";
  store.add_config_endpoint(1, e);
  EXPECT_EQ(store.config_endpoints(1).size(), 1u);
}

// A database of a kvgate with engine mode but not the weights axis (version 3): its engine rows
// stay, and migration 4 adds config_models beside them; its configs read back without a model.
TEST_F(StoreEngineTest, VersionThreeDatabaseIsBroughtForward) {
  {
    Connection c(path_, true);
    for (size_t m = 0; m < 3; ++m) c.execute_script(schema_migrations()[m]);
    c.execute_script("PRAGMA user_version = 3");
    c.execute_script(
        "INSERT INTO runs (status, started_at, command, git_sha, build_flags, host, cpu, gpu, backend, model_path, "
        "model_sha256, suite_name, suite_hash, seed, threads, kvgate_version) VALUES ('complete', 't', 'c', 'g', 'b', "
        "'h', 'cpu', '', 'engine', 'm', 's', 'suite:smoke', 'x', 0, 0, '0.1.0')");
    c.execute_script("INSERT INTO configs (spec, hash, bits_per_element) VALUES ('endpoint:q4_0=q4_0/q4_0', 'h', 4.5)");
    c.execute_script(
        "INSERT INTO run_configs (run_id, config_id, role, kv_bytes_per_token, kld_estimator, top_k) "
        "VALUES (1, 1, 'candidate', 30, 'topk', 20)");
    c.execute_script(
        "INSERT INTO config_endpoints (run_id, config_id, name, url, engine, engine_version, model, kv, kv_source, "
        "kv_reported, discovery) VALUES (1, 1, 'q4_0', 'http://x', 'vllm', '0.9', 'm', 'q4_0/q4_0', 'name', '', '{}')");
  }
  Store store = Store::open(path_);
  EXPECT_EQ(store.schema_version(), latest_schema_version());
  EXPECT_GE(latest_schema_version(), 4);
  const auto configs = store.run_configs(1);
  ASSERT_EQ(configs.size(), 1u);
  EXPECT_EQ(configs[0].kld_estimator, "topk");
  EXPECT_EQ(configs[0].top_k, 20);
  EXPECT_FALSE(configs[0].model.has_value()) << "a run before the weights axis recorded no model per config";
  const auto endpoints = store.config_endpoints(1);
  ASSERT_EQ(endpoints.size(), 1u);
  EXPECT_EQ(endpoints[0].engine, "vllm");
  store.record_config_model(1, 1, {"q4_0/q4_0", "m", "/models/m.gguf", "ab12", 1000, 900, "Q4_1"});
  const auto after = store.run_configs(1);
  ASSERT_TRUE(after[0].model.has_value()) << "migration 4 made config_models writable";
  EXPECT_EQ(after[0].model->weight_type, "Q4_1");
  EXPECT_EQ(after[0].top_k, 20) << "the model's row leaves the engine columns as they were";
}

}  // namespace
}  // namespace kvgate::results
