// Store::merge_shards on synthetic shard databases: the merged run holds exactly the rows an
// unsharded run of the same plan holds, merging again writes nothing, every way shards can fail
// to make one whole run is refused naming the shard and items, and a merge that fails midway
// leaves the output database as it was.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "core/rng.h"
#include "results/sqlite.h"
#include "results/store.h"
#include "tests/results/sql_rows.h"

namespace kvgate::results {
namespace {

using testing::sql_rows;

constexpr const char* kPlanText = "kvgate_plan 1\nworkload suite:test\nthreads 1\n";

RunInfo shard_info(const std::string& host) {
  RunInfo r;
  r.command = "kvgate eval --suite test";
  r.git_sha = "0123456789ab";
  r.build_flags = "Release";
  r.host = host;
  r.cpu = "x86_64";
  r.backend = "cpu";
  r.model_path = "/models/m.gguf";
  r.model_sha256 = std::string(64, 'a');
  r.suite_name = "suite:test";
  r.suite_hash = "00000000deadbeef";
  r.threads = 1;
  r.kvgate_version = "0.1.0";
  r.calibration = "kvgate calibration 1: test workload; 1 thread";
  return r;
}

std::string item_key(int64_t position) { return "item-" + std::to_string(position); }

// Every row an item produces, with values that differ per item, config and turn (and a NaN, a
// NULL optional and a one-token turn), so a row copied to the wrong place shows.
void write_item(Store& store, int64_t run, int64_t position, const std::vector<int64_t>& config_ids, uint64_t seed) {
  Rng rng(seed * 1000 + static_cast<uint64_t>(position));
  ItemInfo info{item_key(position), position % 2 ? "korean" : "tables", "set-hash", "content-" + std::to_string(position)};
  if (position % 2) info.gold_answer = "010-" + std::to_string(1000 + position);
  // The yardstick's times around the item (schema v9); one item timed against none.
  if (position != 2) info.calibration = ItemCalibration{20 + rng.uniform(), 10 + rng.uniform()};
  ItemWriter w = store.begin_item(run, info);
  for (const int64_t config : config_ids) {
    ItemMetrics m;
    m.config_id = config;
    m.scored_tokens = 10 + position;
    m.kld_mean = rng.uniform();
    m.kld_max = rng.uniform() * 5;
    m.kld_p99 = rng.uniform() * 3;
    m.delta_p_mean = rng.uniform() - 0.5;
    m.delta_p_rms = rng.uniform();
    m.same_top1 = rng.uniform();
    m.nll_mean = rng.uniform() * 2;
    m.nll_ref_mean = position == 3 ? std::nan("") : rng.uniform() * 2;
    m.generated_tokens = 4;
    if (position % 3) m.first_divergence = position;
    m.exact_match_ref = position % 2 == 0;
    if (position % 2) m.exact_match_gold = true;
    w.add_metrics(m);
    for (int64_t turn = 0; turn < 1 + position % 3; ++turn) {
      TurnMetrics t{config, turn, 100 * (turn + 1), 5, rng.uniform(), rng.uniform(), rng.uniform() * 50,
                    turn == 1 ? 0.0 : rng.uniform() * 10};
      // The answers (schema v5): text with Hangul and a newline, one turn without an answer.
      if (turn != 2) {
        const std::string who = config == config_ids.front() ? "the reference" : "the candidate";
        t.answer = "전화 010-" + std::to_string(position * 10 + turn) + "\nunder " + who;
        t.answer_tokens = 3 + turn;
        if (config != config_ids.front() && position % 2) t.answer_divergence = turn;
      }
      // CPU latencies (schema v9); the one-token turn has no TPOT.
      t.ttft_cpu_ms = rng.uniform() * 90;
      if (turn != 1) t.tpot_cpu_ms = rng.uniform() * 20;
      w.add_turn(t);
      LatencySamples l{config, turn, {}};
      for (int t = 0; t < (turn == 1 ? 1 : 4); ++t) l.token_times_ms.push_back(rng.uniform() * 100 + 10 * t);
      w.add_latency(l);
      // Position buckets (schema v7): the turn's tokens in one or two buckets, the last open-ended.
      w.add_position({config, turn, 1024 * turn, 1024 * (turn + 1), 2 + position, rng.uniform(), rng.uniform() - 0.5, 1});
      if (turn == 2) w.add_position({config, turn, 131072, std::nullopt, 1, rng.uniform(), 0.0, 0});
    }
    for (const char* cls : {"digits", "other"})
      w.add_token_class({config, cls, 3 + position, rng.uniform() * 3, rng.uniform() - 0.5, 2});
  }
  w.commit();
}

struct Plan {
  int64_t items = 7;
  int64_t shards = 3;
  int64_t shard_of(int64_t position) const { return (position * 5 + 1) % shards; }
};

// A run of `plan` holding the items of `shard` (all of them for nullopt), as `kvgate eval` records it.
// `configs_of(position)`, if given, says how many of the run's configs the item at that position
// holds (0: the item is missing), as a run that stopped early would have left it.
int64_t write_run(const std::string& path, const Plan& plan, std::optional<int64_t> shard, uint64_t seed = 1,
                  const std::string& status = "complete", const std::string& plan_text = kPlanText,
                  const std::function<size_t(int64_t)>& configs_of = nullptr) {
  Store store = Store::open(path);
  const int64_t run = store.begin_run(shard_info(shard ? "node-" + std::to_string(*shard) : "node-0"));
  std::vector<int64_t> configs;
  configs.push_back(store.add_config({"f16/f16", "h-f16", 16.0}));
  store.attach_config(run, configs.back(), ConfigRole::reference, 23040);
  configs.push_back(store.add_config({"q4_0/q4_0", "h-q4", 4.5}));
  store.attach_config(run, configs.back(), ConfigRole::candidate, 6480);
  // As typed (schema v7); the reference has no label, as a run from before labels were kept.
  store.set_config_label(run, configs.back(), "q4_0");
  // What eval records of the model each config ran on (config_models).
  store.record_config_model(run, configs[0], {"f16/f16", "m", "/models/m.gguf", "ab12", 1000, 900, "Q4_1"});
  store.record_config_model(run, configs[1], {"q4_0/q4_0", "m", "/models/m.gguf", "ab12", 1000, 900, "Q4_1"});
  RunPlan record{hex_u64(xxhash64(plan_text)), plan_text, plan.items, std::nullopt, std::nullopt, {}};
  std::vector<PlanItem> items;
  if (shard) {
    record.shard_index = *shard;
    record.shard_count = plan.shards;
    record.shard_origin = "--shard";
    for (int64_t p = 0; p < plan.items; ++p) items.push_back({p, item_key(p), plan.shard_of(p)});
  }
  store.record_plan(run, record, items);
  for (int64_t p = 0; p < plan.items; ++p)
    if (!shard || plan.shard_of(p) == *shard) {
      const size_t n = configs_of ? configs_of(p) : configs.size();
      if (n > 0) write_item(store, run, p, std::vector<int64_t>(configs.begin(), configs.begin() + static_cast<std::ptrdiff_t>(n)), seed);
    }
  store.finish_run(run, status == "interrupted" ? RunStatus::interrupted : RunStatus::complete);
  if (status == "running") store.resume_run(run);
  return run;
}

// Everything run `run` stored, with configs by spec and items by key: what must be equal between
// a merged run and the unsharded run of its plan.
std::vector<std::string> stored_rows(const std::string& path, int64_t run) {
  const std::string r = std::to_string(run);
  std::vector<std::string> all;
  auto add = [&](const std::string& table, const std::string& sql, const std::string& kinds) {
    for (std::string& row : sql_rows(path, sql, kinds)) all.push_back(table + ": " + row);
  };
  add("run", "SELECT status, git_sha, build_flags, cpu, gpu, backend, model_path, model_sha256, suite_name, "
             "suite_hash, seed, threads, kvgate_version, calibration FROM runs WHERE id = " + r, "tttttttttttttt");
  add("config", "SELECT c.spec, c.hash, c.bits_per_element, rc.role, rc.kv_bytes_per_token, rc.label FROM run_configs rc "
                "JOIN configs c ON c.id = rc.config_id WHERE rc.run_id = " + r + " ORDER BY c.spec", "ttdtdt");
  add("plan", "SELECT plan_hash, plan, plan_items, shard_index, shard_count FROM run_plans WHERE run_id = " + r, "ttttt");
  add("item", "SELECT item_key, domain, evalset_hash, item_hash, gold_answer, calibration_prefill_ms, calibration_decode_ms "
              "FROM items WHERE run_id = " + r + " ORDER BY id",
      "tttttdd");
  const std::string join = " JOIN items i ON i.id = x.item_id JOIN configs c ON c.id = x.config_id WHERE i.run_id = " + r;
  add("metrics", "SELECT i.item_key, c.spec, x.scored_tokens, x.kld_mean, x.kld_max, x.kld_p99, x.delta_p_mean, "
                 "x.delta_p_rms, x.top1_agreement, x.nll_mean, x.nll_ref_mean, x.generated_tokens, x.first_divergence, "
                 "x.exact_match_ref, x.exact_match_gold FROM item_metrics x" + join + " ORDER BY 1, 2",
      "tttddddddddtttt");
  add("turn", "SELECT i.item_key, c.spec, x.turn_index, x.context_tokens, x.scored_tokens, x.kld_mean, x.top1_agreement, "
              "x.ttft_ms, x.tpot_ms, x.answer, x.answer_tokens, x.answer_divergence, x.ttft_cpu_ms, x.tpot_cpu_ms "
              "FROM turn_metrics x" + join + " ORDER BY 1, 2, 3",
      "tttttddddtttdd");
  add("class", "SELECT i.item_key, c.spec, x.token_class, x.scored_tokens, x.kld_sum, x.delta_p_sum, x.same_top1 "
               "FROM token_class_metrics x" + join + " ORDER BY 1, 2, 3", "ttttddt");
  add("latency", "SELECT i.item_key, c.spec, x.turn_index, x.token_index, x.t_ms FROM latency_samples x" + join +
                 " ORDER BY 1, 2, 3, 4", "ttttd");
  add("position", "SELECT i.item_key, c.spec, x.turn_index, x.position_from, x.position_to, x.scored_tokens, x.kld_sum, "
                  "x.delta_p_sum, x.same_top1 FROM position_metrics x" + join + " ORDER BY 1, 2, 3, 4",
      "ttttttddt");
  return all;
}

int64_t count(const std::string& path, const std::string& sql) {
  Connection c(path, false);
  Statement s(c, sql);
  s.step();
  return s.column_int(0);
}

void execute(const std::string& path, const std::string& sql) {
  Connection c(path, false);
  c.execute_script("PRAGMA foreign_keys = ON");
  c.execute_script(sql);
}

class MergeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = ::testing::TempDir() + "kvgate_merge_" + std::to_string(::getpid()) + "_" + info->name() + "/";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string db(const std::string& name) const { return dir_ + name + ".db"; }
  std::vector<std::string> shard_dbs(const Plan& plan, uint64_t seed = 1) {
    std::vector<std::string> out;
    for (int64_t i = 0; i < plan.shards; ++i) {
      out.push_back(db("shard-" + std::to_string(i)));
      for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(out.back() + suffix);
      write_run(out.back(), plan, i, seed);
    }
    return out;
  }
  std::string merge_error(const std::vector<std::string>& shards, const std::string& out = "") {
    const std::string target = out.empty() ? db("merged") : out;
    try {
      Store::merge_shards(target, shards, "kvgate runs merge");
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
      if (out.empty()) {
        EXPECT_FALSE(std::filesystem::exists(target)) << "a refused merge leaves no database behind";
      }
      return e.what();
    }
    ADD_FAILURE() << "the merge was not refused";
    return "";
  }
  std::string dir_;
};


TEST_F(MergeTest, MergedRunHoldsExactlyTheRowsOfTheUnshardedRun) {
  const Plan plan;
  const std::string whole = db("whole");
  const int64_t whole_run = write_run(whole, plan, std::nullopt);
  const MergeResult m = Store::merge_shards(db("merged"), shard_dbs(plan), "kvgate runs merge");
  EXPECT_FALSE(m.already_merged);
  EXPECT_EQ(m.status, RunStatus::complete);
  EXPECT_EQ(m.items, plan.items);
  EXPECT_EQ(m.shards, plan.shards);
  EXPECT_EQ(m.plan_hash, hex_u64(xxhash64(std::string(kPlanText))));
  const std::vector<std::string> merged = stored_rows(db("merged"), m.run_id), expected = stored_rows(whole, whole_run);
  EXPECT_GT(merged.size(), 150u);
  EXPECT_EQ(merged, expected);
  // The answers came along: text, lengths, divergences and gold answers (not all NULL).
  EXPECT_GT(count(db("merged"), "SELECT COUNT(*) FROM turn_metrics WHERE answer LIKE '전화 010-%'"), 10);
  EXPECT_GT(count(db("merged"), "SELECT COUNT(*) FROM turn_metrics WHERE answer_divergence IS NOT NULL"), 2);
  EXPECT_EQ(count(db("merged"), "SELECT COUNT(*) FROM items WHERE gold_answer IS NOT NULL"), 3);
  // The calibration came along, per item and the run's workload, and the CPU latencies per turn.
  EXPECT_GT(count(db("merged"), "SELECT COUNT(*) FROM turn_metrics WHERE tpot_cpu_ms > 0 AND ttft_cpu_ms > 0"), 10);
  EXPECT_EQ(count(db("merged"), "SELECT COUNT(*) FROM items WHERE calibration_prefill_ms > 20 AND calibration_decode_ms > 10"),
            plan.items - 1);
  EXPECT_EQ(count(db("merged"), "SELECT COUNT(*) FROM runs WHERE calibration LIKE 'kvgate calibration 1: %'"), 1);
  // The position buckets came along, the open-ended one included.
  EXPECT_GT(count(db("merged"), "SELECT COUNT(*) FROM position_metrics"), 20);
  EXPECT_GT(count(db("merged"), "SELECT COUNT(*) FROM position_metrics WHERE position_to IS NULL"), 0);
  // Items in the plan's order, as the unsharded run wrote them.
  EXPECT_EQ(sql_rows(db("merged"), "SELECT item_key FROM items ORDER BY id", "t"),
            sql_rows(whole, "SELECT item_key FROM items ORDER BY id", "t"));

  Store out = Store::open(db("merged"), Store::Mode::existing);
  const RunRecord run = *out.find_run(m.run_id);
  EXPECT_EQ(run.info.host, "node-0, node-1, node-2");
  EXPECT_EQ(run.info.command, "kvgate runs merge");
  EXPECT_EQ(run.items, plan.items);
  const std::vector<MergeSource> sources = out.merge_sources(m.run_id);
  ASSERT_EQ(sources.size(), 3u);
  std::string earliest = sources[0].started_at, latest = sources[0].finished_at;
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(sources[static_cast<size_t>(i)].shard_index, i);
    EXPECT_EQ(sources[static_cast<size_t>(i)].source_db, db("shard-" + std::to_string(i)));
    earliest = std::min(earliest, sources[static_cast<size_t>(i)].started_at);
    latest = std::max(latest, sources[static_cast<size_t>(i)].finished_at);
  }
  EXPECT_EQ(run.started_at, earliest);
  EXPECT_EQ(run.finished_at, latest);
  EXPECT_FALSE(out.run_plan(m.run_id)->shard_index);
}

TEST_F(MergeTest, EachConfigKeepsItsModel) {
  const Plan plan;
  const MergeResult m = Store::merge_shards(db("merged"), shard_dbs(plan), "kvgate runs merge");
  Store out = Store::open(db("merged"), Store::Mode::existing);
  const std::vector<RunConfigRecord> configs = out.run_configs(m.run_id);
  ASSERT_EQ(configs.size(), 2u);
  for (const RunConfigRecord& c : configs) {
    ASSERT_TRUE(c.model) << c.spec;
    EXPECT_EQ(c.model->kv_spec, c.spec);
    EXPECT_EQ(c.model->sha256, "ab12");
    EXPECT_EQ(c.model->weight_bytes, 900);
    EXPECT_EQ(c.model->weight_type, "Q4_1");
  }
}

TEST_F(MergeTest, LimitedPlanMergesIntoAnInterruptedRunLikeTheUnshardedOne) {
  const Plan plan{4, 2};
  std::vector<std::string> shards;
  for (int64_t i = 0; i < 2; ++i) {
    shards.push_back(db("shard-" + std::to_string(i)));
    write_run(shards.back(), plan, i, 1, "interrupted");
  }
  const MergeResult m = Store::merge_shards(db("merged"), shards, "merge");
  EXPECT_EQ(m.status, RunStatus::interrupted);
  EXPECT_EQ(Store::open(db("merged")).find_run(m.run_id)->status, kvgate::results::RunStatus::interrupted);
}

// The merged run carries its shards' machine load as its worst shard's: quiet only if every
// shard was (docs/schema.md); unknown if any shard's is.
TEST_F(MergeTest, MergedRunCarriesTheWorstShardsLoad) {
  const Plan plan;
  const std::vector<std::string> shards = shard_dbs(plan);
  const RunLoad loads[] = {{0.1, 1.5, 10, 20, 8}, {2.5, 6.0, 12, 30, 4}, {0.2, 3.0, 14, 25, 16}};
  for (size_t i = 0; i < shards.size(); ++i) {
    Store s = Store::open(shards[i], Store::Mode::existing);
    s.record_run_load(s.list_runs().back().id, loads[i]);
  }
  const MergeResult m = Store::merge_shards(db("merged"), shards, "kvgate runs merge");
  const std::optional<RunLoad> load = Store::open(db("merged"), Store::Mode::existing).find_run(m.run_id)->load;
  ASSERT_TRUE(load.has_value());
  EXPECT_EQ(load->load_avg_start, 2.5);
  EXPECT_EQ(load->load_avg_max, 6.0);
  EXPECT_EQ(load->cpu_seconds, 36.0);
  EXPECT_EQ(load->wall_seconds, 75.0);
  EXPECT_EQ(load->cores, 4);

  {
    Store s = Store::open(shards[1], Store::Mode::existing);
    s.record_run_load(s.list_runs().back().id, std::nullopt);
  }
  const MergeResult unknown = Store::merge_shards(db("merged-2"), shards, "kvgate runs merge");
  EXPECT_FALSE(Store::open(db("merged-2"), Store::Mode::existing).find_run(unknown.run_id)->load.has_value());
}

TEST_F(MergeTest, MergingTheSameShardsAgainWritesNothing) {
  const Plan plan;
  std::vector<std::string> shards = shard_dbs(plan);
  const MergeResult first = Store::merge_shards(db("merged"), shards, "merge");
  const std::vector<std::string> before = stored_rows(db("merged"), first.run_id);
  std::reverse(shards.begin(), shards.end());  // the order given does not matter
  const MergeResult again = Store::merge_shards(db("merged"), shards, "merge");
  EXPECT_TRUE(again.already_merged);
  EXPECT_EQ(again.run_id, first.run_id);
  EXPECT_EQ(again.status, RunStatus::complete);
  EXPECT_EQ(count(db("merged"), "SELECT COUNT(*) FROM runs"), 1);
  EXPECT_EQ(stored_rows(db("merged"), first.run_id), before);

  // A shard run again (other timings, so other rows) makes another run of the same plan: a
  // database that keeps every night's merged run holds many runs of one plan.
  write_run(db("shard-1"), plan, 1, 99);
  const MergeResult rerun = Store::merge_shards(db("merged"), {db("shard-0"), db("shard-1"), db("shard-2")}, "merge");
  EXPECT_FALSE(rerun.already_merged);
  EXPECT_NE(rerun.run_id, first.run_id);
  EXPECT_EQ(count(db("merged"), "SELECT COUNT(*) FROM runs"), 2);
}

TEST_F(MergeTest, MergeIntoADatabaseWithOtherRunsMapsConfigsBySpec) {
  const Plan plan;
  const std::string whole = db("whole");
  // The output already has runs and configs, in another order: config ids differ from the shards'.
  {
    Store out = Store::open(whole);
    out.add_config({"q4_0/q4_0", "h-q4", 4.5});
    out.add_config({"fp8", "h-fp8", 8.0});
  }
  const int64_t whole_run = write_run(whole, plan, std::nullopt);
  const MergeResult m = Store::merge_shards(whole, shard_dbs(plan), "merge");
  EXPECT_EQ(stored_rows(whole, m.run_id), stored_rows(whole, whole_run));
}

TEST_F(MergeTest, MissingShardIsNamedWithItsItems) {
  const Plan plan;
  std::vector<std::string> shards = shard_dbs(plan);
  shards.erase(shards.begin() + 1);
  const std::string e = merge_error(shards);
  EXPECT_NE(e.find("1 of 3 shards missing: shard 1 (items item-"), std::string::npos) << e;
  EXPECT_NE(e.find("given: " + db("shard-0") + " (shard 0/3, run 1)"), std::string::npos) << e;
}

TEST_F(MergeTest, ShardGivenTwiceIsRefused) {
  const Plan plan;
  std::vector<std::string> shards = shard_dbs(plan);
  std::filesystem::copy_file(shards[0], db("copy"));
  shards.push_back(db("copy"));
  const std::string e = merge_error(shards);
  EXPECT_NE(e.find("shard 0/3 is given twice"), std::string::npos) << e;
  EXPECT_NE(merge_error({shards[0], shards[0]}).find("given twice"), std::string::npos);
  EXPECT_NE(merge_error({shards[0]}, shards[0]).find("both the merged database and a shard"), std::string::npos);
}

TEST_F(MergeTest, ShardsOfDifferentPlansOrSplitsAreRefused) {
  const Plan plan;
  std::vector<std::string> shards = shard_dbs(plan);
  write_run(shards[2], plan, 2, 1, "complete", "kvgate_plan 1\nworkload suite:test\nthreads 2\n");
  std::string e = merge_error(shards);
  EXPECT_NE(e.find("were made with different plans"), std::string::npos) << e;
  EXPECT_NE(e.find("'threads 2' against 'threads 1'"), std::string::npos) << e;

  shards = shard_dbs(plan);
  write_run(shards[2], Plan{7, 4}, 2);
  e = merge_error(shards);
  EXPECT_NE(e.find("different splits"), std::string::npos) << e;
}

TEST_F(MergeTest, IncompleteShardIsNamedWithItsMissingItems) {
  const Plan plan;
  std::vector<std::string> shards = shard_dbs(plan);
  // A killed shard: its run still says 'running'.
  write_run(shards[1], plan, 1, 1, "running");
  std::string e = merge_error(shards);
  EXPECT_NE(e.find(shards[1] + " (shard 1/3, run 2) is incomplete: its status is 'running'"), std::string::npos) << e;

  // plan.shard_of(2) == 2: item-2 is shard 2's.
  for (const size_t configs : {size_t{0}, size_t{1}}) {
    shards = shard_dbs(plan);
    std::filesystem::remove(shards[2]);
    write_run(shards[2], plan, 2, 1, "complete", kPlanText, [&](int64_t p) { return p == 2 ? configs : size_t{2}; });
    e = merge_error(shards);
    EXPECT_NE(e.find("(shard 2/3, run 1) is incomplete: 1 of its items are missing or lack a config: item-2"),
              std::string::npos)
        << e;
  }

  // Rows deleted by hand break the shard run's seal (issue 40): refused as altered, not merged.
  shards = shard_dbs(plan);
  execute(shards[2], "DELETE FROM item_metrics WHERE config_id = 2 AND item_id = (SELECT id FROM items WHERE item_key = 'item-2')");
  e = merge_error(shards);
  EXPECT_NE(e.find(shards[2] + ": run 1: its items hold "), std::string::npos) << e;
}

TEST_F(MergeTest, ItemHeldByTwoShardsIsADuplicate) {
  const Plan plan;
  std::vector<std::string> shards = shard_dbs(plan);
  // item-2 belongs to shard 2; shard 0's database gets a copy of it.
  {
    Store s0 = Store::open(shards[0]);
    write_item(s0, 1, 2, {1, 2}, 1);
  }
  const std::string e = merge_error(shards);
  EXPECT_NE(e.find("item item-2 is duplicated: " + shards[0] + " (shard 0/3, run 1) holds it, but it belongs to " +
                   shards[2] + " (shard 2/3, run 1), which holds it too"),
            std::string::npos)
      << e;
}

TEST_F(MergeTest, RunThatIsNotAShardIsRefused) {
  const Plan plan;
  std::vector<std::string> shards = shard_dbs(plan);
  write_run(db("whole"), plan, std::nullopt);
  shards[0] = db("whole");
  const std::string e = merge_error(shards);
  EXPECT_NE(e.find("is not a shard run"), std::string::npos) << e;
  EXPECT_NE(merge_error({db("no-such-file")}).find("no such results database"), std::string::npos);
}

// A merge that fails after it began writing (here: the output knows config q4_0/q4_0 under
// another hash, which only the write notices) leaves the output exactly as it was; once the
// cause is gone, the same merge succeeds.
TEST_F(MergeTest, FailedMergeLeavesTheOutputAsItWasAndCanBeRerun) {
  const Plan plan;
  const std::vector<std::string> shards = shard_dbs(plan);
  const std::string out = db("merged");
  { Store::open(out).add_config({"q4_0/q4_0", "another-hash", 4.5}); }
  try {
    Store::merge_shards(out, shards, "merge");
    ADD_FAILURE() << "the merge did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_0/q4_0"), std::string::npos) << e.what();
  }
  for (const char* table : {"runs", "run_configs", "items", "item_metrics", "latency_samples", "run_plans", "run_merges"})
    EXPECT_EQ(count(out, std::string("SELECT COUNT(*) FROM ") + table), 0) << table;
  EXPECT_EQ(count(out, "SELECT COUNT(*) FROM configs"), 1) << "the f16 config added mid-merge is rolled back";
  execute(out, "DELETE FROM configs");
  const MergeResult m = Store::merge_shards(out, shards, "merge");
  EXPECT_EQ(count(out, "SELECT COUNT(*) FROM items WHERE run_id = " + std::to_string(m.run_id)), plan.items);
}

// Transactions inside a transaction are savepoints: the outer one decides what is kept.
TEST_F(MergeTest, NestedTransactionsComposeIntoTheOuterOne) {
  const std::string path = db("nested");
  Store store = Store::open(path);
  {
    Connection c(path, false);
    {
      Transaction outer(c);
      Statement(c, "INSERT INTO configs (spec, hash, bits_per_element) VALUES ('a', 'h', 1)").run();
      {
        Transaction inner(c);
        Statement(c, "INSERT INTO configs (spec, hash, bits_per_element) VALUES ('b', 'h', 1)").run();
        inner.commit();
      }
      {
        Transaction discarded(c);
        Statement(c, "INSERT INTO configs (spec, hash, bits_per_element) VALUES ('c', 'h', 1)").run();
      }
      outer.commit();
    }
    EXPECT_EQ(sql_rows(path, "SELECT spec FROM configs ORDER BY spec", "t"), (std::vector<std::string>{"a|", "b|"}));
    {
      Transaction outer(c);
      {
        Transaction inner(c);
        Statement(c, "INSERT INTO configs (spec, hash, bits_per_element) VALUES ('d', 'h', 1)").run();
        inner.commit();
      }
    }  // the outer one rolls back, the inner one's commit with it
    EXPECT_EQ(count(path, "SELECT COUNT(*) FROM configs WHERE spec = 'd'"), 0);
  }
}

}  // namespace
}  // namespace kvgate::results
