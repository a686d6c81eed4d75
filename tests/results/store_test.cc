#include "results/store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "results/schema.h"
#include "results/sqlite.h"
#include "results/stored_run.h"
#include "tests/results/scratch_db.h"

namespace kvgate::results {
namespace {

class StoreTest : public testing::ScratchDbTest {
 protected:
  StoreTest() : ScratchDbTest("kvgate_results_") {}
  int64_t count(const std::string& sql) {
    Connection c(path_, false);
    Statement s(c, sql);
    s.step();
    return s.column_int(0);
  }
};

RunInfo sample_run(const std::string& suite = "nightly") {
  RunInfo r;
  r.command = "kvgate eval --suite " + suite;
  r.git_sha = "0123456789ab";
  r.build_flags = "Release";
  r.host = "ci-01";
  r.cpu = "x86_64 16 cores";
  r.gpu = "none";
  r.backend = "cpu";
  r.model_path = "/models/smollm2.gguf";
  r.model_sha256 = std::string(64, 'a');
  r.suite_name = suite;
  r.suite_hash = "00000000deadbeef";
  r.seed = 7;
  r.threads = 4;
  r.kvgate_version = "0.1.0";
  return r;
}

ItemInfo sample_item(const std::string& key) { return {key, "tables", "evalset-hash", "hash-of-" + key}; }

ItemMetrics sample_metrics(int64_t config_id, double kld) {
  ItemMetrics m;
  m.config_id = config_id;
  m.scored_tokens = 100;
  m.kld_mean = kld;
  m.kld_max = 10 * kld;
  m.kld_p99 = 5 * kld;
  m.delta_p_mean = -0.01;
  m.delta_p_rms = 0.02;
  m.same_top1 = 0.97;
  m.nll_mean = 1.5;
  m.nll_ref_mean = 1.45;
  return m;
}

TEST_F(StoreTest, MigrationFromEmptyCreatesEveryTable) {
  Store store = Store::open(path_);
  EXPECT_EQ(store.schema_version(), latest_schema_version());
  for (const char* table : {"runs", "configs", "run_configs", "items", "item_metrics", "turn_metrics",
                            "token_class_metrics", "latency_samples", "kernel_benchmarks", "gate_decisions",
                            "position_metrics"})
    EXPECT_EQ(count(std::string("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '") + table + "'"), 1)
        << table;
  Connection c(path_, false);
  Statement mode(c, "PRAGMA journal_mode");
  mode.step();
  EXPECT_EQ(mode.column_text(0), "wal");
}

TEST_F(StoreTest, ReopenKeepsDataAndVersion) {
  int64_t run_id;
  {
    Store store = Store::open(path_);
    run_id = store.begin_run(sample_run());
    store.finish_run(run_id, RunStatus::complete);
  }
  Store again = Store::open(path_, Store::Mode::existing);
  EXPECT_EQ(again.schema_version(), latest_schema_version());
  const auto runs = again.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].id, run_id);
  EXPECT_EQ(runs[0].status, kvgate::results::RunStatus::complete);
  EXPECT_FALSE(runs[0].finished_at.empty());
  EXPECT_EQ(runs[0].info.suite_name, "nightly");
  EXPECT_EQ(runs[0].info.model_sha256, std::string(64, 'a'));
  EXPECT_EQ(runs[0].info.seed, 7);
  EXPECT_EQ(runs[0].info.threads, 4);
}

// Migration 5 (machine load per run): a version-4 file keeps its runs, which read back with no
// load recorded; record_run_load stores one and clears it.
TEST_F(StoreTest, VersionFourDatabaseGainsRunLoad) {
  {
    Connection c(path_, true);
    for (size_t m = 0; m < 4; ++m) c.execute_script(schema_migrations()[m]);
    c.execute_script("PRAGMA user_version = 4");
    c.execute_script(
        "INSERT INTO runs (status, started_at, command, git_sha, build_flags, host, cpu, gpu, backend, model_path, "
        "model_sha256, suite_name, suite_hash, seed, threads, kvgate_version) VALUES ('complete', 't', 'c', 'g', 'b', "
        "'h', 'cpu', '', 'cpu', 'm', 's', 'suite:smoke', 'x', 0, 2, '0.1.0')");
  }
  Store store = Store::open(path_);
  EXPECT_EQ(store.schema_version(), latest_schema_version());
  EXPECT_FALSE(store.find_run(1)->load.has_value());
  store.record_run_load(1, RunLoad{0.5, 2.25, 12.5, 7.0, 4});
  const std::optional<RunLoad> load = store.find_run(1)->load;
  ASSERT_TRUE(load.has_value());
  EXPECT_EQ(load->load_avg_start, 0.5);
  EXPECT_EQ(load->load_avg_max, 2.25);
  EXPECT_EQ(load->cpu_seconds, 12.5);
  EXPECT_EQ(load->wall_seconds, 7.0);
  EXPECT_EQ(load->cores, 4);
  store.record_run_load(1, std::nullopt);
  EXPECT_FALSE(store.list_runs().front().load.has_value());
}

// Migration 10 (CPU latencies and the latency yardstick): a version-9 file keeps its runs and
// items, which read back as not calibrated and are sealed again (their digests now cover the new
// columns); a new run records its workload and each item its times, and a resumed run timed
// against another workload records both.
TEST_F(StoreTest, VersionNineDatabaseGainsCalibration) {
  {
    Connection c(path_, true);
    for (size_t m = 0; m < 9; ++m) c.execute_script(schema_migrations()[m]);
    c.execute_script("PRAGMA user_version = 9");
    c.execute_script(
        "INSERT INTO runs (status, started_at, command, git_sha, build_flags, host, cpu, gpu, backend, model_path, "
        "model_sha256, suite_name, suite_hash, seed, threads, kvgate_version) VALUES ('complete', 't', 'c', 'g', 'b', "
        "'h', 'cpu', '', 'cpu', 'm', 's', 'suite:smoke', 'x', 0, 2, '0.1.0');"
        "INSERT INTO items (run_id, item_key, domain, evalset_hash, item_hash) VALUES (1, 'old', 'tables', 'e', 'h')");
  }
  Store store = Store::open(path_);
  EXPECT_EQ(store.schema_version(), latest_schema_version());
  EXPECT_NO_THROW(store.check_run(1));
  EXPECT_EQ(store.find_run(1)->info.calibration, "");
  ASSERT_EQ(store.run_items(1).size(), 1u);
  EXPECT_FALSE(store.run_items(1)[0].calibration.has_value());

  RunInfo info = store.find_run(1)->info;
  info.calibration = "kvgate calibration 1: w; 2 threads";
  const int64_t run = store.begin_run(info);
  ItemInfo item{"new", "tables", "e", "h"};
  item.calibration = ItemCalibration{21.5, 9.25};
  store.begin_item(run, item).commit();
  EXPECT_EQ(store.find_run(run)->info.calibration, info.calibration);
  const std::vector<ItemInfo> items = store.run_items(run);
  ASSERT_EQ(items.size(), 1u);
  ASSERT_TRUE(items[0].calibration.has_value());
  EXPECT_EQ(items[0].calibration->prefill_ms, 21.5);
  EXPECT_EQ(items[0].calibration->decode_ms, 9.25);
  store.record_run_calibration(run, "a; then b");
  EXPECT_EQ(store.find_run(run)->info.calibration, "a; then b");
}

TEST_F(StoreTest, NewerSchemaIsAClearInputError) {
  Store::open(path_);
  {
    Connection c(path_, false);
    c.execute_script("PRAGMA user_version = 99");
  }
  try {
    Store::open(path_);
    FAIL() << "opened a database from the future";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path_), std::string::npos) << e.what();
  }
}

TEST_F(StoreTest, NegativeOrMismatchedSchemaVersionIsAnInputError) {
  Store::open(path_);
  for (const char* version : {"-1", "1"}) {
    {
      Connection c(path_, false);
      c.execute_script(std::string("PRAGMA user_version = ") + version);
    }
    for (const Store::Mode mode : {Store::Mode::existing, Store::Mode::create}) {
      try {
        Store::open(path_, mode);
        FAIL() << "opened a database whose user_version is " << version;
      } catch (const Error& e) {
        EXPECT_EQ(e.exit_code(), 2) << e.what();
        EXPECT_EQ(std::string(e.what()).rfind(path_ + ": ", 0), 0u) << e.what();
      }
    }
  }
}

// Migration 11 renames top1_agreement to same_top1: a version-10 file (rows sealed by the kvgate
// before it) is brought forward with every digest still matching, its values read under the new
// name, and a change to one still seen.
TEST_F(StoreTest, VersionTenDatabaseKeepsItsDigestsThroughTheRename) {
  int64_t run = 0;
  {
    Store store = Store::open(path_);
    run = store.begin_run(sample_run());
    const int64_t q4 = store.add_config({"q4_0/q4_0", "2222", 4.5});
    store.attach_config(run, q4, ConfigRole::candidate, 100);
    ItemWriter w = store.begin_item(run, sample_item("a"));
    w.add_metrics(sample_metrics(q4, 0.02));
    TurnMetrics t;
    t.config_id = q4;
    t.scored_tokens = 10;
    t.kld_mean = 0.02;
    t.same_top1 = 0.9;
    w.add_turn(t);
    w.commit();
    store.finish_run(run, RunStatus::complete);
  }
  {
    Connection c(path_, false);
    c.execute_script("ALTER TABLE item_metrics RENAME COLUMN same_top1 TO top1_agreement;"
                     "ALTER TABLE turn_metrics RENAME COLUMN same_top1 TO top1_agreement; PRAGMA user_version = 10");
  }
  {
    Store store = Store::open(path_, Store::Mode::existing);
    EXPECT_EQ(store.schema_version(), latest_schema_version());
    EXPECT_NO_THROW(store.check_run(run));
    ASSERT_EQ(store.run_item_metrics(run).size(), 1u);
    EXPECT_EQ(store.run_item_metrics(run)[0].metrics.same_top1, 0.97);
    ASSERT_EQ(store.run_turn_metrics(run).size(), 1u);
    EXPECT_EQ(store.run_turn_metrics(run)[0].turn.same_top1, 0.9);
  }
  EXPECT_EQ(count("SELECT COUNT(*) FROM pragma_table_info('item_metrics') WHERE name = 'top1_agreement'"), 0);
  {
    Connection c(path_, false);
    c.execute_script("UPDATE turn_metrics SET same_top1 = 0.5");
  }
  Store store = Store::open(path_, Store::Mode::existing);
  EXPECT_THROW(store.check_run(run), Error);
}

TEST_F(StoreTest, DamagedPagesFailTheIntegrityCheckOnOpen) {
  {
    Store s = Store::open(path_);
    RunInfo info;
    info.suite_name = "s";
    for (int i = 0; i < 50; ++i) s.finish_run(s.begin_run(info), RunStatus::complete);
  }
  int64_t root = 0, page_size = 0;
  {
    Connection c(path_, false);
    Statement q(c, "SELECT rootpage FROM sqlite_master WHERE name = 'runs'");
    ASSERT_TRUE(q.step());
    root = q.column_int(0);
    Statement p(c, "PRAGMA page_size");
    ASSERT_TRUE(p.step());
    page_size = p.column_int(0);
  }
  std::string bytes;
  {
    std::ifstream in(path_, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // The runs table's root page: its cell pointers and cells overwritten, its page header kept.
  const size_t begin = static_cast<size_t>((root - 1) * page_size) + 12;
  ASSERT_LE(begin + static_cast<size_t>(page_size) - 12, bytes.size());
  for (size_t i = begin; i < begin + static_cast<size_t>(page_size) - 12; ++i) bytes[i] = static_cast<char>(0xA5 ^ (i * 7));
  std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
  try {
    Store::open(path_, Store::Mode::existing);
    FAIL() << "opened a damaged database";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find(path_ + ": damaged results database"), std::string::npos) << e.what();
  }
}

TEST_F(StoreTest, CorruptOrMissingFileIsAnInputError) {
  EXPECT_THROW(
      {
        try {
          Store::open(path_, Store::Mode::existing);
        } catch (const Error& e) {
          EXPECT_EQ(e.exit_code(), 2);
          throw;
        }
      },
      Error);
  {
    std::ofstream out(path_, std::ios::binary);
    out << std::string(4096, 'x');
  }
  for (Store::Mode mode : {Store::Mode::existing, Store::Mode::create}) {
    try {
      Store::open(path_, mode);
      FAIL() << "opened a garbage file";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find(path_), std::string::npos) << e.what();
    }
  }
}

TEST_F(StoreTest, UnopenablePathIsAnInputError) {
  for (const std::string& bad : {std::string("/nonexistent-kvgate-dir/results.db"), ::testing::TempDir()}) {
    try {
      Store::open(bad);
      FAIL() << "opened " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
    }
  }
}

TEST_F(StoreTest, ResolveRunByIdAndLatest) {
  Store store = Store::open(path_);
  EXPECT_THROW(store.resolve_run("latest"), Error);
  const int64_t first = store.begin_run(sample_run("a"));
  const int64_t second = store.begin_run(sample_run("b"));
  EXPECT_EQ(store.resolve_run("latest").id, second);
  EXPECT_EQ(store.resolve_run(std::to_string(first)).info.suite_name, "a");
  EXPECT_THROW(store.resolve_run("999"), Error);
  EXPECT_THROW(store.resolve_run("abc"), Error);
  EXPECT_THROW(store.resolve_run("-1"), Error);
}

// Migration 7 (configs as typed): a version-6 file's configs have no label and show by their
// canonical spec; a new run's label reads back beside its spec.
TEST_F(StoreTest, VersionSixDatabaseShowsConfigsByTheirSpecs) {
  {
    Connection c(path_, true);
    for (size_t m = 0; m < 6; ++m) c.execute_script(schema_migrations()[m]);
    c.execute_script("PRAGMA user_version = 6");
    c.execute_script(
        "INSERT INTO runs (status, started_at, command, git_sha, build_flags, host, cpu, gpu, backend, model_path, "
        "model_sha256, suite_name, suite_hash, seed, threads, kvgate_version) VALUES ('complete', 't', 'c', 'g', 'b', "
        "'h', 'cpu', '', 'cpu', 'm', 's', 'suite:smoke', 'x', 0, 2, '0.1.0');"
        "INSERT INTO configs (spec, hash, bits_per_element) VALUES ('q4_0:rot=wht/q4_0:rot=wht', 'h', 4.5);"
        "INSERT INTO run_configs (run_id, config_id, role, kv_bytes_per_token) VALUES (1, 1, 'candidate', 6480);");
  }
  Store store = Store::open(path_);
  EXPECT_EQ(store.schema_version(), latest_schema_version());
  ASSERT_EQ(store.run_configs(1).size(), 1u);
  EXPECT_EQ(store.run_configs(1)[0].label, "q4_0:rot=wht/q4_0:rot=wht");
  const int64_t run = store.begin_run(sample_run());
  store.attach_config(run, 1, ConfigRole::candidate, 6480);
  store.set_config_label(run, 1, "q4_0");
  EXPECT_EQ(store.run_configs(run)[0].label, "q4_0");
  EXPECT_EQ(store.run_configs(run)[0].spec, "q4_0:rot=wht/q4_0:rot=wht");
  EXPECT_EQ(store.run_configs(1)[0].label, "q4_0:rot=wht/q4_0:rot=wht") << "a label belongs to one run";
}

TEST_F(StoreTest, ItemsMetricsAndResumePairs) {
  Store store = Store::open(path_);
  const int64_t run = store.begin_run(sample_run());
  const int64_t ref = store.add_config({"f16/f16", "1111", 16.0});
  const int64_t q4 = store.add_config({"q4_0/q4_0", "2222", 4.5});
  EXPECT_EQ(store.add_config({"q4_0/q4_0", "2222", 4.5}), q4);  // known spec: same id
  EXPECT_THROW(store.add_config({"q4_0/q4_0", "3333", 4.5}), Error);
  store.attach_config(run, ref, ConfigRole::reference, 18432);
  store.attach_config(run, q4, ConfigRole::candidate, 5184);

  {
    ItemWriter w = store.begin_item(run, sample_item("t-1"));
    w.add_metrics(sample_metrics(q4, 0.02));
    w.add_turn({q4, 0, 512, 64, 0.02, 0.95, 120.0, 15.0});
    w.add_token_class({q4, "digits", 40, 1.6, -0.4, 37});
    w.add_latency({q4, 0, {120.0, 135.0, 150.5}});
    w.commit();
  }
  {
    ItemWriter w = store.begin_item(run, sample_item("t-2"));
    w.add_metrics(sample_metrics(q4, 0.04));
    w.commit();
  }
  const auto pairs = store.finished_pairs(run);
  EXPECT_EQ(pairs.size(), 2u);
  EXPECT_TRUE(pairs.count({"t-1", q4}));
  EXPECT_TRUE(pairs.count({"t-2", q4}));
  EXPECT_FALSE(pairs.count({"t-1", ref}));

  const auto configs = store.run_configs(run);
  ASSERT_EQ(configs.size(), 2u);
  EXPECT_EQ(configs[0].role, kvgate::results::ConfigRole::reference);
  EXPECT_EQ(configs[0].kv_bytes_per_token, 18432.0);

  // What `runs show`, the report and the gate aggregate: every row, in item-key order.
  const auto rows = store.run_item_metrics(run);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].item_key, "t-1");
  EXPECT_EQ(rows[1].item_key, "t-2");
  EXPECT_EQ(rows[1].metrics.config_id, q4);
  EXPECT_EQ(rows[1].metrics.kld_mean, 0.04);
  const auto turns = store.run_turn_metrics(run);
  ASSERT_EQ(turns.size(), 1u);
  EXPECT_EQ(turns[0].item_key, "t-1");
  EXPECT_EQ(turns[0].turn.tpot_ms, 15.0);

  EXPECT_EQ(count("SELECT COUNT(*) FROM turn_metrics"), 1);
  EXPECT_EQ(count("SELECT COUNT(*) FROM token_class_metrics WHERE token_class = 'digits'"), 1);
  EXPECT_EQ(count("SELECT COUNT(*) FROM latency_samples"), 3);
  EXPECT_EQ(store.find_run(run)->items, 2);

  // The same item key with different content in one run is refused, not silently merged.
  EXPECT_THROW(store.begin_item(run, {"t-1", "tables", "evalset-hash", "other-hash"}), Error);
}

TEST_F(StoreTest, UncommittedItemLeavesNoRows) {
  Store store = Store::open(path_);
  const int64_t run = store.begin_run(sample_run());
  const int64_t q = store.add_config({"fp8/fp8", "abcd", 8.0});
  try {
    ItemWriter w = store.begin_item(run, sample_item("doomed"));
    w.add_metrics(sample_metrics(q, 0.1));
    w.add_latency({q, 0, {1.0, 2.0}});
    throw std::runtime_error("model crashed mid-item");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(count("SELECT COUNT(*) FROM items"), 0);
  EXPECT_EQ(count("SELECT COUNT(*) FROM item_metrics"), 0);
  EXPECT_EQ(count("SELECT COUNT(*) FROM latency_samples"), 0);
  EXPECT_TRUE(store.finished_pairs(run).empty());
  // The connection is usable afterwards.
  ItemWriter w = store.begin_item(run, sample_item("next"));
  w.add_metrics(sample_metrics(q, 0.1));
  w.commit();
  EXPECT_EQ(store.finished_pairs(run).size(), 1u);
}

TEST_F(StoreTest, KilledRunStaysRunningWithWholeItemsOnly) {
  Store::open(path_);  // migrate in the parent, so the child only writes
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Store store = Store::open(path_);
    const int64_t run = store.begin_run(sample_run());
    const int64_t q = store.add_config({"q8_0/q8_0", "8888", 8.5});
    for (int i = 0; i < 3; ++i) {
      ItemWriter w = store.begin_item(run, sample_item("item-" + std::to_string(i)));
      w.add_metrics(sample_metrics(q, 0.01 * i));
      w.add_latency({q, 0, {10.0, 20.0, 30.0}});
      if (i == 2) raise(SIGKILL);  // dies holding an open transaction
      w.commit();
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));

  Store store = Store::open(path_);
  Connection c(path_, false);
  Statement check(c, "PRAGMA integrity_check");
  check.step();
  EXPECT_EQ(check.column_text(0), "ok");
  const RunRecord run = store.resolve_run("latest");
  EXPECT_EQ(run.status, kvgate::results::RunStatus::running);
  EXPECT_TRUE(run.finished_at.empty());
  EXPECT_EQ(run.items, 2);
  EXPECT_EQ(count("SELECT COUNT(*) FROM items"), 2);
  EXPECT_EQ(count("SELECT COUNT(*) FROM latency_samples"), 6);
  const auto done = store.finished_pairs(run.id);
  EXPECT_EQ(done.size(), 2u);

  // Resume: only the missing pair is written, then the run completes.
  store.resume_run(run.id);
  const int64_t q = store.add_config({"q8_0/q8_0", "8888", 8.5});
  for (int i = 0; i < 3; ++i) {
    const std::string key = "item-" + std::to_string(i);
    if (done.count({key, q})) continue;
    ItemWriter w = store.begin_item(run.id, sample_item(key));
    w.add_metrics(sample_metrics(q, 0.01 * i));
    w.commit();
  }
  store.finish_run(run.id, RunStatus::complete);
  EXPECT_EQ(store.find_run(run.id)->status, kvgate::results::RunStatus::complete);
  EXPECT_EQ(store.find_run(run.id)->items, 3);
}

TEST_F(StoreTest, TwoProcessesWriteAtOnce) {
  Store::open(path_);
  constexpr int kItems = 60;
  pid_t children[2];
  for (int p = 0; p < 2; ++p) {
    children[p] = fork();
    ASSERT_GE(children[p], 0);
    if (children[p] == 0) {
      try {
        Store store = Store::open(path_);
        const int64_t run = store.begin_run(sample_run("writer-" + std::to_string(p)));
        // Both writers register the same config: they must agree on its id.
        const int64_t q = store.add_config({"tq4/u4", "4444", 4.25});
        for (int i = 0; i < kItems; ++i) {
          ItemWriter w = store.begin_item(run, sample_item("item-" + std::to_string(i)));
          w.add_metrics(sample_metrics(q, i));
          w.add_latency({q, 0, {1.0, 2.0, 3.0, 4.0}});
          w.commit();
        }
        store.finish_run(run, RunStatus::complete);
        _exit(0);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "writer %d: %s\n", p, e.what());
        _exit(1);
      }
    }
  }
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  Store store = Store::open(path_);
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& r : runs) {
    EXPECT_EQ(r.status, kvgate::results::RunStatus::complete);
    EXPECT_EQ(r.items, kItems);
  }
  EXPECT_EQ(count("SELECT COUNT(*) FROM configs"), 1);
  EXPECT_EQ(count("SELECT COUNT(*) FROM latency_samples"), 2 * kItems * 4);
}

TEST_F(StoreTest, StoredDoublesReadBackBitIdentical) {
  std::vector<double> values = {0.1,
                                1.0 / 3.0,
                                M_PI,
                                1e-300,
                                std::numeric_limits<double>::denorm_min(),
                                std::numeric_limits<double>::min(),
                                std::numeric_limits<double>::max(),
                                -std::numeric_limits<double>::max(),
                                std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity(),
                                0.0,
                                -5.0,
                                9007199254740993.0,  // 2^53 + 1 rounds to 2^53: integral, stored as integer
                                std::nextafter(1.0, 2.0)};
  Rng rng(123);
  while (values.size() < 2000) {
    const double v = std::bit_cast<double>(rng.next_u64());
    if (!std::isnan(v)) values.push_back(v);
  }
  int64_t run;
  {
    Store store = Store::open(path_);
    run = store.begin_run(sample_run());
    const int64_t q = store.add_config({"nvfp4/nvfp4", "aaaa", 4.5});
    ItemWriter w = store.begin_item(run, sample_item("doubles"));
    w.add_latency({q, 0, values});
    w.commit();
  }
  Connection c(path_, false);
  Statement s(c, "SELECT t_ms FROM latency_samples ORDER BY token_index");
  size_t i = 0;
  while (s.step()) {
    ASSERT_LT(i, values.size());
    const double got = s.column_double(0);
    EXPECT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(values[i])) << "index " << i << ": " << values[i];
    ++i;
  }
  EXPECT_EQ(i, values.size());
}

TEST_F(StoreTest, NanIsStoredAsNullAndNegativeZeroAsZero) {
  Store store = Store::open(path_);
  const int64_t run = store.begin_run(sample_run());
  const int64_t q = store.add_config({"int4/int4", "bbbb", 4.5});
  ItemMetrics m = sample_metrics(q, 0.0);
  m.kld_p99 = std::numeric_limits<double>::quiet_NaN();
  m.delta_p_mean = -0.0;  // SQLite stores integral REALs as integers, which drops the sign
  m.first_divergence = 17;
  m.exact_match_ref = false;
  {
    ItemWriter w = store.begin_item(run, sample_item("x"));
    w.add_metrics(m);
    w.commit();
  }
  const auto back = store.item_metrics(run, "x", q);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(std::isnan(back->kld_p99));
  EXPECT_EQ(std::bit_cast<uint64_t>(back->delta_p_mean), 0u);
  EXPECT_EQ(back->first_divergence, 17);
  EXPECT_EQ(back->exact_match_ref, false);
  EXPECT_FALSE(back->exact_match_gold.has_value());
  EXPECT_FALSE(back->generated_tokens.has_value());
  EXPECT_EQ(count("SELECT COUNT(*) FROM item_metrics WHERE kld_p99 IS NULL"), 1);
}

TEST_F(StoreTest, ForeignKeysAreEnforced) {
  Store store = Store::open(path_);
  KernelBenchmark b{"dequantize", "q4_0", "cpu", 128, 4096, 100, 1500.0, 2.0e10, 4.0e10};
  EXPECT_THROW(store.add_kernel_benchmark(999, b), Error);
  const int64_t run = store.begin_run(sample_run());
  store.add_kernel_benchmark(run, b);
  EXPECT_EQ(count("SELECT COUNT(*) FROM kernel_benchmarks"), 1);
}

TEST_F(StoreTest, GateDecisionsReferenceBothRuns) {
  Store store = Store::open(path_);
  const int64_t base = store.begin_run(sample_run("base"));
  const int64_t cand = store.begin_run(sample_run("cand"));
  GateDecision d;
  d.baseline_run_id = base;
  d.candidate_run_id = cand;
  d.check_name = "kld_mean_tables";
  d.metric = "kld_mean";
  d.passed = false;
  d.baseline_value = 0.010;
  d.candidate_value = 0.030;
  d.delta = 0.020;
  d.ci_low = 0.015;
  d.ci_high = 0.025;
  d.threshold = 0.005;
  d.detail = "CI above floor";
  EXPECT_GT(store.add_gate_decision(d), 0);
  EXPECT_EQ(count("SELECT COUNT(*) FROM gate_decisions WHERE passed = 0 AND candidate_run_id = " + std::to_string(cand)), 1);
  d.candidate_run_id = 12345;
  EXPECT_THROW(store.add_gate_decision(d), Error);
}

// Position buckets (schema v7): written with the item, read back in the store's order with the
// open-ended bucket's NULL end; a resumed run adds its new items' rows beside the old ones; a
// version-6 file gains the table and keeps its runs.
TEST_F(StoreTest, PositionRowsRoundTripAndSurviveResume) {
  {
    Connection c(path_, true);
    for (size_t m = 0; m < 6; ++m) c.execute_script(schema_migrations()[m]);
    c.execute_script("PRAGMA user_version = 6");
  }
  Store store = Store::open(path_);
  ASSERT_EQ(store.schema_version(), latest_schema_version());
  const int64_t run = store.begin_run(sample_run());
  const int64_t q4 = store.add_config({"q4_0/q4_0", "h", 4.5});
  store.attach_config(run, q4, ConfigRole::candidate, 1.0);
  {
    ItemWriter w = store.begin_item(run, sample_item("b"));
    w.add_metrics(sample_metrics(q4, 0.1));
    w.add_position({q4, 0, 1024, 2048, 7, 0.7, -0.07, 6});
    w.add_position({q4, 0, 0, 1024, 3, 0.03, 0.0, 3});
    w.add_position({q4, 1, 131072, std::nullopt, 2, 4.0, -1.0, 0});
    w.commit();
  }
  store.finish_run(run, RunStatus::interrupted);
  store.resume_run(run);
  {
    ItemWriter w = store.begin_item(run, sample_item("a"));
    w.add_metrics(sample_metrics(q4, 0.2));
    w.add_position({q4, 0, 4096, 8192, 5, 0.5, 0.0, 5});
    w.commit();
  }
  {
    // An uncommitted item leaves no position rows.
    ItemWriter w = store.begin_item(run, sample_item("c"));
    w.add_position({q4, 0, 0, 1024, 1, 0.1, 0.0, 1});
  }
  store.finish_run(run, RunStatus::complete);
  const std::vector<RunPositionMetrics> rows = store.run_position_metrics(run);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].item_key, "a");
  EXPECT_EQ(rows[0].position.position_from, 4096);
  EXPECT_EQ(rows[1].item_key, "b");
  EXPECT_EQ(rows[1].position.position_from, 0);
  EXPECT_EQ(rows[2].position.position_from, 1024);
  EXPECT_EQ(*rows[2].position.position_to, 2048);
  EXPECT_EQ(rows[2].position.scored_tokens, 7);
  EXPECT_EQ(rows[2].position.kld_sum, 0.7);
  EXPECT_EQ(rows[2].position.delta_p_sum, -0.07);
  EXPECT_EQ(rows[2].position.same_top1, 6);
  EXPECT_EQ(rows[3].position.turn_index, 1);
  EXPECT_FALSE(rows[3].position.position_to.has_value());
  EXPECT_EQ(rows[3].position.config_id, q4);
  // A bucket without tokens, or one that ends before it starts, is not a row the schema takes.
  ItemWriter w = store.begin_item(run, sample_item("d"));
  EXPECT_THROW(w.add_position({q4, 0, 0, 1024, 0, 0.0, 0.0, 0}), Error);
  EXPECT_THROW(w.add_position({q4, 0, 2048, 1024, 1, 0.0, 0.0, 0}), Error);
}

// Issue 40: one byte of a stored kld_mean, changed with the sqlite3 shell or in the file, passed
// quick_check and was reported and gated on. Every reader now checks each row's digest and the
// run's seal over its item rows, and names the run, table and row.
class RowDigestTest : public StoreTest {
 protected:
  // A run with two items under two configs, every kind of item row included.
  int64_t write_run() {
    Store store = Store::open(path_);
    const int64_t run = store.begin_run(sample_run());
    const int64_t ref = store.add_config({"f16/f16", "1111", 16.0});
    const int64_t q4 = store.add_config({"q4_0/q4_0", "2222", 4.5});
    store.attach_config(run, ref, ConfigRole::reference, 18432);
    store.attach_config(run, q4, ConfigRole::candidate, 5184);
    for (const char* key : {"t-1", "t-2"}) {
      ItemWriter w = store.begin_item(run, sample_item(key));
      for (const int64_t c : {ref, q4}) {
        w.add_metrics(sample_metrics(c, c == ref ? 0.0 : 0.02));
        TurnMetrics t;
        t.config_id = c;
        t.scored_tokens = 100;
        t.answer = "an answer";
        t.answer_tokens = 2;
        w.add_turn(t);
        w.add_token_class({c, "digits", 10, 0.1, -0.01, 9});
        w.add_latency({c, 0, {1.5, 2.5, -0.0}});
        w.add_position({c, 0, 0, 1024, 100, 2.0, -0.5, 95});
      }
      w.commit();
    }
    store.finish_run(run, RunStatus::complete);
    return run;
  }
  std::string load_error(int64_t run) {
    try {
      Store store = Store::open(path_, Store::Mode::existing);
      StoredRun::load(store, *store.find_run(run));
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
      return e.what();
    }
    return "";
  }
  void execute(const std::string& sql) {
    Connection c(path_, false);
    c.execute_script(sql);
  }
};

TEST_F(RowDigestTest, ASoundRunReadsBack) {
  const int64_t run = write_run();
  EXPECT_EQ(load_error(run), "");
  Store store = Store::open(path_, Store::Mode::existing);
  EXPECT_EQ(StoredRun::load(store, *store.find_run(run)).items.size(), 4u);
}

TEST_F(RowDigestTest, AChangedValueIsNamedByRunTableAndRow) {
  const int64_t run = write_run();
  execute("UPDATE item_metrics SET kld_mean = 0.0200001 WHERE config_id = 2 AND item_id = 2");
  const std::string e = load_error(run);
  EXPECT_EQ(e.rfind(path_ + ": run 1: table item_metrics, row item_id 2 (item 't-2'), config_id 2: ", 0), 0u) << e;
  EXPECT_NE(e.find("do not match its row digest"), std::string::npos) << e;
}

TEST_F(RowDigestTest, EveryTableOfTheRunIsCovered) {
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"runs", "UPDATE runs SET suite_name = 'other'"},
      {"configs", "UPDATE configs SET spec = 'fp8_e4m3/fp8_e4m3' WHERE id = 2"},
      {"run_configs", "UPDATE run_configs SET role = 'reference' WHERE config_id = 2"},
      {"items", "UPDATE items SET domain = 'policy' WHERE item_key = 't-1'"},
      {"turn_metrics", "UPDATE turn_metrics SET answer = 'another answer' WHERE item_id = 1 AND config_id = 2"},
      {"turn_metrics", "UPDATE turn_metrics SET tpot_cpu_ms = 3.5 WHERE item_id = 1 AND config_id = 2"},
      {"items", "UPDATE items SET calibration_decode_ms = 1.0 WHERE item_key = 't-1'"},
      {"runs", "UPDATE runs SET calibration = 'another workload'"},
      {"token_class_metrics", "UPDATE token_class_metrics SET same_top1 = 10 WHERE item_id = 1 AND config_id = 2"},
      {"latency_samples", "UPDATE latency_samples SET t_ms = 1.25 WHERE token_index = 0 AND item_id = 2 AND config_id = 2"},
      {"position_metrics", "UPDATE position_metrics SET kld_sum = 1.0 WHERE item_id = 1 AND config_id = 2"},
      {"run_plans", "INSERT INTO run_plans (run_id, plan_hash, plan, plan_items) VALUES (1, 'h', 'p', 2)"}};
  for (const auto& [table, sql] : edits) {
    remove_db();
    const int64_t run = write_run();
    execute(sql);
    const std::string e = load_error(run);
    EXPECT_NE(e.find("table " + table + ", row "), std::string::npos) << table << ": " << e;
  }
}

TEST_F(RowDigestTest, ADeletedOrAddedRowBreaksTheRunsSeal) {
  for (const char* sql : {"DELETE FROM latency_samples WHERE rowid = (SELECT MAX(rowid) FROM latency_samples)",
                          "DELETE FROM items WHERE item_key = 't-2'"}) {
    remove_db();
    const int64_t run = write_run();
    execute(std::string("PRAGMA foreign_keys = ON; ") + sql);
    const std::string e = load_error(run);
    EXPECT_EQ(e.rfind(path_ + ": run 1: its items hold ", 0), 0u) << sql << ": " << e;
  }
}

TEST_F(RowDigestTest, AWriterChecksTheRowItChanges) {
  const int64_t run = write_run();
  execute("UPDATE runs SET model_sha256 = 'b'");
  Store store = Store::open(path_);
  EXPECT_THROW(store.resume_run(run), Error);
  EXPECT_THROW(store.finish_run(run, RunStatus::failed), Error);
}

// A file made before digests is sealed when first opened for writing, and protected from then on.
TEST_F(RowDigestTest, AVersionEightFileIsSealedOnItsFirstOpen) {
  {
    Connection c(path_, true);
    for (size_t m = 0; m < 8; ++m) c.execute_script(schema_migrations()[m]);
    c.execute_script(
        "PRAGMA user_version = 8;"
        "INSERT INTO runs (status, started_at, command, git_sha, build_flags, host, cpu, gpu, backend, model_path, "
        "model_sha256, suite_name, suite_hash, seed, threads, kvgate_version) VALUES ('complete', 't', 'c', 'g', 'b', "
        "'h', 'cpu', '', 'cpu', 'm', 's', 'suite:smoke', 'x', 0, 2, '0.1.0');"
        "INSERT INTO configs (spec, hash, bits_per_element) VALUES ('q4_0/q4_0', 'h', 4.5);"
        "INSERT INTO run_configs (run_id, config_id, role, kv_bytes_per_token) VALUES (1, 1, 'candidate', 6480);"
        "INSERT INTO items (run_id, item_key, domain, evalset_hash, item_hash) VALUES (1, 'a', 'tables', 'e', 'i');"
        "INSERT INTO item_metrics (item_id, config_id, scored_tokens, kld_mean) VALUES (1, 1, 10, 0.5);");
  }
  EXPECT_EQ(load_error(1), "");
  EXPECT_EQ(count("SELECT item_rows FROM runs"), 2);
  EXPECT_EQ(count("SELECT COUNT(*) FROM item_metrics WHERE row_digest IS NULL"), 0);
  execute("UPDATE item_metrics SET kld_mean = 0.25");
  EXPECT_NE(load_error(1).find("table item_metrics"), std::string::npos);
}

// Random doubles (integral ones stored as integers, subnormals, infinities), NaN and -0.0 read
// back with the digests they were written with.
TEST_F(RowDigestTest, DigestsHoldForEveryDouble) {
  Rng rng(7);
  std::vector<double> values = {-0.0, 0.0, 1e300, -1e-310,
                                std::numeric_limits<double>::infinity(), 9007199254740993.0, 4.0};
  while (values.size() < 2000)
    if (const double v = std::bit_cast<double>(rng.next_u64()); !std::isnan(v)) values.push_back(v);
  int64_t run = 0;
  {
    Store store = Store::open(path_);
    run = store.begin_run(sample_run());
    const int64_t q = store.add_config({"nvfp4/nvfp4", "aaaa", 4.5});
    ItemWriter w = store.begin_item(run, sample_item("doubles"));
    w.add_latency({q, 0, values});
    w.commit();
  }
  Store store = Store::open(path_, Store::Mode::existing);
  EXPECT_NO_THROW(store.check_run(run));
}

TEST_F(StoreTest, TablesAndColumnsAreCheckedOnOpen) {
  for (const char* sql : {"DROP TABLE token_class_metrics", "ALTER TABLE items RENAME COLUMN domain TO area",
                          "ALTER TABLE runs ADD COLUMN extra TEXT"}) {
    remove_db();
    Store::open(path_);
    {
      Connection c(path_, false);
      c.execute_script(sql);
    }
    for (const Store::Mode mode : {Store::Mode::create, Store::Mode::existing}) {
      try {
        Store::open(path_, mode);
        ADD_FAILURE() << sql << ": opened";
      } catch (const Error& e) {
        EXPECT_EQ(e.exit_code(), 2) << e.what();
        EXPECT_EQ(std::string(e.what()).rfind(path_ + ": not a kvgate results database of schema version", 0), 0u) << e.what();
      }
    }
  }
}

TEST_F(StoreTest, UpdateModeNeverCreatesAFile) {
  EXPECT_THROW(Store::open(path_, Store::Mode::update), Error);
  EXPECT_FALSE(std::ifstream(path_).good());
  EXPECT_THROW(Store::open("/dev/null", Store::Mode::create), Error);
  EXPECT_THROW(Store::open(::testing::TempDir(), Store::Mode::create), Error);
}

TEST(ResolveDbPath, FlagThenEnvironmentThenDefault) {
  ::unsetenv("KVGATE_DB");
  EXPECT_EQ(resolve_db_path(""), "./kvgate.db");
  ::setenv("KVGATE_DB", "/tmp/from_env.db", 1);
  EXPECT_EQ(resolve_db_path(""), "/tmp/from_env.db");
  EXPECT_EQ(resolve_db_path("mine.db"), "mine.db");
  ::setenv("KVGATE_DB", "", 1);
  EXPECT_EQ(resolve_db_path(""), "./kvgate.db");
  ::unsetenv("KVGATE_DB");
}

}  // namespace
}  // namespace kvgate::results
