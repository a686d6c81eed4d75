// The records' bindings to their columns (results/store_columns.h, record_columns.h): every
// table's list names each of its columns once, and the rows the bound writers store are the
// values the hand-written, positional INSERTs and UPDATEs stored before (issue 41), so every
// row digest of a file written by an older kvgate still matches.
#include "results/store_columns.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "results/sqlite.h"
#include "tests/results/scratch_db.h"

namespace kvgate::results {
namespace {

// The columns of `table` the fields name, checked to be its own and each named once, with the
// writer's (`writers`, which no field holds) making up the rest.
template <typename Record>
void expect_bound(std::string_view table_name, const std::vector<FieldColumn<Record>>& fields,
                  const std::set<std::string>& writers) {
  const DigestedTable& table = digested_table(table_name);
  std::set<std::string> named;
  for (const FieldColumn<Record>& f : fields) {
    EXPECT_NO_THROW(column_index(table, f.column)) << table_name << " has no column " << f.column;
    EXPECT_TRUE(named.insert(std::string(f.column)).second) << table_name << ": two fields of column " << f.column;
    EXPECT_FALSE(writers.count(std::string(f.column))) << table_name << ": " << f.column << " is the writer's and a field's";
  }
  for (const Column& c : table.columns)
    EXPECT_TRUE(named.count(std::string(c.name)) || writers.count(std::string(c.name)))
        << table_name << ": column " << c.name << " has no field and is not the writer's";
}

TEST(StoreColumnsTest, EveryTableIsBoundColumnByColumnByName) {
  expect_bound("runs", run_fields(), {"item_rows", "item_rows_digest"});
  expect_bound("configs", config_fields(), {});
  expect_bound("run_configs", run_config_fields(), {"run_id"});
  expect_bound("config_models", config_model_fields(), {"run_id", "config_id"});
  expect_bound("items", item_fields(), {"id", "run_id"});
  expect_bound("item_metrics", item_metrics_fields(), {"item_id"});
  expect_bound("turn_metrics", turn_metrics_fields(), {"item_id"});
  expect_bound("token_class_metrics", token_class_fields(), {"item_id"});
  expect_bound("position_metrics", position_fields(), {"item_id"});
  expect_bound("latency_samples", latency_fields(), {"item_id"});
  expect_bound("kernel_benchmarks", kernel_benchmark_fields(), {"id", "run_id"});
  expect_bound("gate_decisions", gate_decision_fields(), {"id", "decided_at"});
  expect_bound("run_plans", run_plan_fields(), {"run_id"});
  expect_bound("run_plan_items", plan_item_fields(), {"run_id"});
  expect_bound("run_merges", merge_source_fields(), {"run_id"});
  expect_bound("item_failures", failure_fields(), {"run_id"});
}

class StoredRowsTest : public testing::ScratchDbTest {
 protected:
  StoredRowsTest() : ScratchDbTest("kvgate_store_columns_") {}
  // The table's rows in its column order (row_digest.cc's), one string each: NULL as "null", a
  // time column holding a value as "<time>".
  std::vector<std::string> rows(std::string_view table_name) {
    const DigestedTable& table = digested_table(table_name);
    std::string columns;
    for (const Column& c : table.columns) columns += (columns.empty() ? "" : ", ") + std::string(c.name);
    Connection c(path_, false);
    Statement s(c, "SELECT " + columns + " FROM " + std::string(table_name) + " ORDER BY rowid");
    std::vector<std::string> out;
    while (s.step()) {
      std::string row;
      for (size_t i = 0; i < table.columns.size(); ++i) {
        const int at = static_cast<int>(i);
        const std::string_view name = table.columns[i].name;
        const bool time = name == "started_at" || name == "finished_at" || name == "decided_at";
        row += s.is_null(at) ? "null" : time ? "<time>" : s.column_text(at);
        row += '|';
      }
      out.push_back(row);
    }
    return out;
  }
};

RunInfo run_info() {
  RunInfo r;
  r.command = "kvgate eval";
  r.git_sha = "sha";
  r.build_flags = "Release";
  r.host = "h";
  r.cpu = "c";
  r.gpu = "";
  r.backend = "cpu";
  r.model_path = "/m.gguf";
  r.model_sha256 = "ab";
  r.suite_name = "smoke";
  r.suite_hash = "sh";
  r.seed = 7;
  r.threads = 2;
  r.kvgate_version = "0.1.0";
  return r;
}

// The expected rows are those the positional statements of main at 467508a stored.
TEST_F(StoredRowsTest, RunsRowThroughItsLife) {
  Store store = Store::open(path_);
  const int64_t run = store.begin_run(run_info());
  const std::string info = "kvgate eval|sha|Release|h|c||cpu|/m.gguf|ab|smoke|sh|7|2|0.1.0|";
  EXPECT_EQ(rows("runs"), std::vector<std::string>{"1|running|<time>|null|" + info + "null|null|null|null|null|0|0|null|"});
  store.finish_run(run, RunStatus::interrupted);
  store.record_run_load(run, RunLoad{1.5, 2.5, 3.25, 4.0, 8});
  store.record_run_calibration(run, "prefill 1 decode 2");
  EXPECT_EQ(rows("runs"), std::vector<std::string>{"1|interrupted|<time>|<time>|" + info +
                                                   "1.5|2.5|3.25|4.0|8|0|0|prefill 1 decode 2|"});
  store.resume_run(run);
  store.record_run_load(run, std::nullopt);
  store.record_run_calibration(run, "");
  EXPECT_EQ(rows("runs"), std::vector<std::string>{"1|running|<time>|null|" + info + "null|null|null|null|null|0|0|null|"});
  const RunRecord back = *store.find_run(run);
  EXPECT_EQ(back.status, RunStatus::running);
  EXPECT_EQ(back.finished_at, "");
  EXPECT_FALSE(back.load.has_value());
  EXPECT_EQ(back.info.gpu, "");
  EXPECT_EQ(back.info.threads, 2);
}

TEST_F(StoredRowsTest, ConfigsItemsAndLatency) {
  Store store = Store::open(path_);
  const int64_t run = store.begin_run(run_info());
  const int64_t ref = store.add_config({"f16/f16", "h1", 16.0});
  const int64_t q4 = store.add_config({"q4_0/q4_0", "h2", 4.5});
  EXPECT_EQ(store.add_config({"q4_0/q4_0", "h2", 4.5}), q4);
  store.attach_config(run, ref, ConfigRole::reference, 18432);
  store.attach_config(run, q4, ConfigRole::candidate, std::nan(""));
  store.set_config_estimator(run, q4, "topk", 20);
  store.set_config_label(run, q4, "q4_0");
  store.record_config_model(run, q4, {"q4_0/q4_0", "m", "/m.gguf", "ab", 1000, 900, "Q4_1"});
  EXPECT_EQ(rows("configs"), (std::vector<std::string>{"1|f16/f16|h1|16.0|", "2|q4_0/q4_0|h2|4.5|"}));
  EXPECT_EQ(rows("run_configs"),
            (std::vector<std::string>{"1|1|reference|18432.0|full|null|null|", "1|2|candidate|null|topk|20|q4_0|"}));
  EXPECT_EQ(rows("config_models"), std::vector<std::string>{"1|2|q4_0/q4_0|m|/m.gguf|ab|1000|900|Q4_1|"});

  ItemInfo plain{"a", "tables", "e", "ha"};
  ItemInfo full{"b", "qa", "e", "hb", "gold", ItemCalibration{1.25, 0.5}};
  for (const ItemInfo& item : {plain, full}) {
    ItemWriter w = store.begin_item(run, item);
    w.add_latency({q4, 1, {2.5, -0.0}});
    w.commit();
  }
  EXPECT_EQ(rows("items"), (std::vector<std::string>{"1|1|a|tables|e|ha|null|null|null|", "2|1|b|qa|e|hb|gold|1.25|0.5|"}));
  EXPECT_EQ(rows("latency_samples"),
            (std::vector<std::string>{"1|2|1|0|2.5|", "1|2|1|1|0.0|", "2|2|1|0|2.5|", "2|2|1|1|0.0|"}));

  // Read back through the same lists.
  const std::vector<RunConfigRecord> configs = store.run_configs(run);
  ASSERT_EQ(configs.size(), 2u);
  EXPECT_EQ(configs[0].label, "f16/f16");  // no label stored: the spec
  EXPECT_EQ(configs[0].role, ConfigRole::reference);
  EXPECT_FALSE(configs[0].model.has_value());
  EXPECT_TRUE(std::isnan(configs[1].kv_bytes_per_token));
  EXPECT_EQ(configs[1].top_k, 20);
  ASSERT_TRUE(configs[1].model.has_value());
  EXPECT_EQ(configs[1].model->weight_type, "Q4_1");
  const std::vector<ItemInfo> items = store.run_items(run);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_FALSE(items[0].gold_answer || items[0].calibration);
  ASSERT_TRUE(items[1].calibration.has_value());
  EXPECT_EQ(items[1].calibration->decode_ms, 0.5);
}

TEST_F(StoredRowsTest, BenchmarksDecisionsAndPlans) {
  Store store = Store::open(path_);
  const int64_t run = store.begin_run(run_info());
  store.add_kernel_benchmark(run, {"dequantize", "q4_0", "cpu", 128, 4096, 100, 1500.0, 2.0e10, 4.0e10});
  EXPECT_EQ(rows("kernel_benchmarks"),
            std::vector<std::string>{"1|1|dequantize|q4_0|cpu|128|4096|100|1500.0|20000000000.0|40000000000.0|"});
  GateDecision d{run, run, std::nullopt, "kld_mean", "kld_mean", true, 0.01, 0.03, 0.02, 0.015, 0.025, 0.05, "ok"};
  store.add_gate_decision(d);
  EXPECT_EQ(rows("gate_decisions"),
            std::vector<std::string>{"1|1|1|null|kld_mean|kld_mean|1|0.01|0.03|0.02|0.015|0.025|0.05|ok|<time>|"});
  const std::vector<GateDecision> back = store.gate_decisions_for_candidate(run);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(back[0].passed);
  EXPECT_FALSE(back[0].config_id.has_value());

  // A plan that is not a shard stores no origin, whatever the record holds; a shard's does.
  store.record_plan(run, {"ph", "plan text", 4, std::nullopt, std::nullopt, "--shard"}, {});
  EXPECT_EQ(rows("run_plans"), std::vector<std::string>{"1|ph|plan text|4|null|null|null|"});
  store.record_plan(run, {"ph", "plan text", 4, 1, 2, "--shard"}, {{0, "a", 0}, {1, "b", 1}});
  EXPECT_EQ(rows("run_plans"), std::vector<std::string>{"1|ph|plan text|4|1|2|--shard|"});
  EXPECT_EQ(rows("run_plan_items"), (std::vector<std::string>{"1|0|a|0|", "1|1|b|1|"}));
  const std::optional<RunPlan> plan = store.run_plan(run);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->shard_origin, "--shard");
  EXPECT_EQ(plan->shard_count, 2);
  EXPECT_EQ(store.run_plan_items(run).at(1).item_key, "b");
}

}  // namespace
}  // namespace kvgate::results
