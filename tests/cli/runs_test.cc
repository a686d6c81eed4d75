// `kvgate runs list|show` on databases prepared through the results API.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "results/store.h"
#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

class RunsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    db_ = ::testing::TempDir() + "kvgate_runs_cli_" + std::to_string(::getpid()) + "_" + info->name() + ".db";
    remove_db();
  }
  void TearDown() override { remove_db(); }
  void remove_db() {
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((db_ + suffix).c_str());
  }

  // Run 1 completes with two items under q4_0; run 2 is left 'running', as a killed run is.
  void prepare_two_runs() {
    results::Store store = results::Store::open(db_);
    results::RunInfo info;
    info.command = "kvgate eval --suite nightly --kv q4_0";
    info.git_sha = "abcdef123456";
    info.build_flags = "Release";
    info.host = "ci-01";
    info.cpu = "x86_64";
    info.gpu = "none";
    info.backend = "cpu";
    info.model_path = "/models/m.gguf";
    info.model_sha256 = std::string(64, 'f');
    info.suite_name = "nightly";
    info.suite_hash = "1234";
    info.seed = 1;
    info.threads = 2;
    info.kvgate_version = "0.1.0";
    const int64_t run1 = store.begin_run(info);
    const int64_t ref = store.add_config({"f16/f16", "aaaa", 16.0});
    const int64_t q4 = store.add_config({"q4_0/q4_0", "bbbb", 4.5});
    store.attach_config(run1, ref, results::ConfigRole::reference, 18432);
    store.attach_config(run1, q4, results::ConfigRole::candidate, 5184);
    for (int i = 0; i < 2; ++i) {
      results::ItemWriter w = store.begin_item(run1, {"item-" + std::to_string(i), "tables", "es", "h" + std::to_string(i)});
      results::ItemMetrics m;
      m.config_id = q4;
      m.scored_tokens = 100;
      m.kld_mean = i == 0 ? 0.01 : 0.03;
      m.same_top1 = 0.9;
      w.add_metrics(m);
      w.commit();
    }
    store.finish_run(run1, results::RunStatus::complete);
    info.command = "kvgate eval --suite nightly --kv fp8";
    store.begin_run(info);
  }

  std::string db_;
};

TEST_F(RunsCli, ListShowsEveryRunAndMarksUnfinishedOnes) {
  prepare_two_runs();
  const CliResult r = run_kvgate("runs list --db " + db_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("complete"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("running (incomplete)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--kv fp8"), std::string::npos) << r.out;
}

TEST_F(RunsCli, ListJson) {
  prepare_two_runs();
  const CliResult r = run_kvgate("runs list --json --db " + db_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["id"], 1);
  EXPECT_EQ(j["runs"][0]["status"], "complete");
  EXPECT_EQ(j["runs"][0]["complete"], true);
  EXPECT_EQ(j["runs"][0]["items"], 2);
  EXPECT_EQ(j["runs"][1]["status"], "running");
  EXPECT_EQ(j["runs"][1]["complete"], false);
  EXPECT_TRUE(j["runs"][1]["finished_at"].is_null());
}

TEST_F(RunsCli, DatabaseFromEnvironment) {
  prepare_two_runs();
  const CliResult r = run_kvgate("runs list --json", "KVGATE_DB=" + db_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["runs"].size(), 2u);
}

TEST_F(RunsCli, ShowByIdJsonHasConfigsAndTokenWeightedSummary) {
  prepare_two_runs();
  const CliResult r = run_kvgate("runs show 1 --json --db " + db_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["id"], 1);
  EXPECT_EQ(j["model_sha256"], std::string(64, 'f'));
  ASSERT_EQ(j["configs"].size(), 2u);
  EXPECT_EQ(j["configs"][0]["role"], "reference");
  EXPECT_EQ(j["configs"][0]["kv_bytes_per_token"], 18432.0);
  ASSERT_EQ(j["summary"].size(), 1u);
  EXPECT_EQ(j["summary"][0]["spec"], "q4_0/q4_0");
  EXPECT_EQ(j["summary"][0]["items"], 2);
  EXPECT_NEAR(j["summary"][0]["kld_mean"].get<double>(), 0.02, 1e-15);
}

TEST_F(RunsCli, ShowLatestText) {
  prepare_two_runs();
  const CliResult r = run_kvgate("runs show latest --db " + db_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("run 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("running (incomplete)"), std::string::npos) << r.out;
}

TEST_F(RunsCli, MissingRunIsExit2) {
  prepare_two_runs();
  const CliResult r = run_kvgate("runs show 99 --db " + db_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no run 99"), std::string::npos) << r.err;
  EXPECT_EQ(run_kvgate("runs show nonsense --db " + db_).exit_code, 2);
}

TEST_F(RunsCli, MissingOrCorruptDatabaseIsExit2) {
  CliResult r = run_kvgate("runs list --db " + db_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(db_), std::string::npos) << r.err;
  {
    std::ofstream out(db_, std::ios::binary);
    out << "this is not an SQLite database, just some text that is long enough to have a header";
  }
  r = run_kvgate("runs list --db " + db_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(db_), std::string::npos) << r.err;
  EXPECT_EQ(run_kvgate("runs show latest --json --db " + db_).exit_code, 2);
}

TEST_F(RunsCli, EmptyDatabaseListsNothing) {
  results::Store::open(db_);
  const CliResult r = run_kvgate("runs list --json --db " + db_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out)["runs"].empty());
  EXPECT_EQ(run_kvgate("runs show latest --db " + db_).exit_code, 2);
}

}  // namespace
}  // namespace kvgate::testing
