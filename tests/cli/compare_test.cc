// `kvgate compare` end to end: on the real default model (it runs the eval itself, --limit 2, so
// nothing can be decided and it says how many items would), and on a large synthetic run written
// through the results API, where one candidate is safe and a smaller one is not (exit 0, the
// safe one recommended). Usage errors exit 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "results/store.h"
#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

void remove_db(const std::string& db) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((db + suffix).c_str());
}

// 1,500 lookup items under f16 (reference), fp8 (near-lossless) and q4_0 (mean KLD 0.06, past
// the shipped margin of 0.02), half of them answered right by every config.
void write_large_run(const std::string& db) {
  results::Store store = results::Store::open(db);
  results::RunInfo info;
  info.command = "kvgate eval --evalset synthetic.jsonl";
  info.git_sha = "abc";
  info.build_flags = "Release";
  info.host = info.cpu = info.gpu = info.backend = "test";
  info.model_path = "/models/gone.gguf";
  info.model_sha256 = std::string(64, 'a');
  info.suite_name = "synthetic.jsonl";
  info.suite_hash = "h";
  info.seed = 1;
  info.threads = 1;
  info.kvgate_version = "test";
  const int64_t run = store.begin_run(info);
  const int64_t ref = store.add_config({"f16/f16", "r", 16.0});
  const int64_t fp8 = store.add_config({"fp8_e4m3/fp8_e4m3", "f", 8.0});
  const int64_t q4 = store.add_config({"q4_0:rot=wht/q4_0:rot=wht", "q", 4.5});
  store.attach_config(run, ref, results::ConfigRole::reference, 23040);
  store.attach_config(run, fp8, results::ConfigRole::candidate, 11520);
  store.attach_config(run, q4, results::ConfigRole::candidate, 6480);
  store.set_config_label(run, fp8, "fp8");
  store.set_config_label(run, q4, "q4_0");
  for (int i = 0; i < 1500; ++i) {
    const std::string key = "lookup-" + std::to_string(i);
    results::ItemWriter w = store.begin_item(run, {key, "lookup", "es", "h-" + key});
    for (const int64_t config : {ref, fp8, q4}) {
      results::ItemMetrics m;
      m.config_id = config;
      m.scored_tokens = 100;
      const double wobble = 1 + 0.5 * std::sin(i);
      m.kld_mean = config == ref ? 0.0 : config == fp8 ? 0.001 * wobble : 0.06 * wobble;
      m.kld_max = m.kld_p99 = 4 * m.kld_mean;
      m.same_top1 = config == ref ? 1.0 : config == fp8 ? 0.995 : 0.9;
      m.exact_match_gold = i % 2 == 0;
      w.add_metrics(m);
      w.add_turn({config, 0, 300, 100, m.kld_mean, m.same_top1, 100.0, 10.0});
    }
    w.commit();
  }
  store.finish_run(run, results::RunStatus::complete);
}

TEST(CompareCli, RecommendsTheSmallestSafeCandidate) {
  const std::string db = scratch_path("compare", "large.db"), md = scratch_path("compare", "large.md");
  remove_db(db);
  write_large_run(db);
  const CliResult r = run_kvgate("compare --run 1 --json --md " + md + " --db " + db);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["production"]["label"], "f16/f16");
  EXPECT_EQ(j["production"]["kv_bytes_per_token"], 23040.0);
  ASSERT_EQ(j["candidates"].size(), 2u);
  EXPECT_EQ(j["candidates"][0]["label"], "q4_0") << "smallest KV first";
  EXPECT_EQ(j["candidates"][0]["verdict"], "unsafe") << j["candidates"][0]["line"];
  EXPECT_EQ(j["candidates"][1]["label"], "fp8");
  EXPECT_EQ(j["candidates"][1]["verdict"], "safe") << j["candidates"][1]["line"];
  EXPECT_EQ(j["candidates"][1]["kv_bytes_per_token"], 11520.0);
  EXPECT_EQ(j["recommendation"]["label"], "fp8") << "q4_0 is smaller but unsafe";
  EXPECT_NEAR(j["confidence"].get<double>(), 1 - 0.05 / 2, 1e-12) << "two candidates decided together";
  const std::string page = slurp(md);
  EXPECT_NE(page.find("## kvgate compare: run 1"), std::string::npos) << page;
  EXPECT_NE(page.find("**Recommendation: fp8 can replace f16/f16"), std::string::npos) << page;
  EXPECT_NE(page.find("| q4_0 | unsafe | 6480 |"), std::string::npos) << page;

  const CliResult text = run_kvgate("compare --run latest --db " + db);
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("RECOMMENDATION: fp8 can replace f16/f16: the smallest KV cache whose verdict is safe"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("  q4_0: unsafe: mean KLD at least"), std::string::npos) << text.out;

  // A stricter policy leaves nothing safe: exit 1, with the items it would take.
  const std::string policy = scratch_path("compare", "strict.json");
  {
    std::FILE* f = std::fopen(policy.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(R"({"kvgate_rollout_policy": 1, "margins": {"kld_mean_max": 0.001}})", f);
    std::fclose(f);
  }
  const CliResult strict = run_kvgate("compare --run 1 --policy " + policy + " --db " + db);
  EXPECT_EQ(strict.exit_code, 1) << strict.out << strict.err;
  EXPECT_NE(strict.out.find("RECOMMENDATION: none is safe on this evidence; deciding the undecided ones"), std::string::npos)
      << strict.out;
  std::remove(policy.c_str());
}

TEST(CompareCli, UsageAndInputErrorsExit2) {
  const std::string db = scratch_path("compare", "errors.db");
  remove_db(db);
  write_large_run(db);
  for (const std::string& args : {std::string("compare --db ") + db,
                                  "compare --run 1 --production f16 --candidate fp8 --db " + db,
                                  "compare --production f16 --suite smoke --db " + db,
                                  "compare --run 1 --limit 3 --db " + db,
                                  "compare --run 1 --policy " + std::string(KVGATE_SOURCE_DIR) + "/ci/gates/default.json --db " + db,
                                  "compare --run 7 --db " + db}) {
    const CliResult r = run_kvgate(args + " --json");
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out << r.err;
    EXPECT_TRUE(r.out.empty()) << args;
  }
  const CliResult gate_policy =
      run_kvgate("compare --run 1 --policy " + std::string(KVGATE_SOURCE_DIR) + "/ci/gates/default.json --db " + db);
  EXPECT_NE(gate_policy.err.find("this is a gate policy"), std::string::npos) << gate_policy.err;
}

// The real default model, the eval run by compare itself: two items decide nothing, and every
// place that prints verdicts says so.
TEST(CompareCli, RunsTheEvalOnTheDefaultModel) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string db = scratch_path("compare", "real.db"), md = scratch_path("compare", "real.md");
  remove_db(db);
  const CliResult r = run_kvgate("compare --production q8_0 --candidate fp8,tq3/4 --suite smoke --limit 2 --threads 2 "
                                 "--max-new-tokens 4 --json --md " + md + " --db " + db);
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["production"]["label"], "q8_0");
  EXPECT_GT(j["production"]["sessions"].get<int64_t>(), 0) << "the model file is there: sessions are known";
  ASSERT_EQ(j["candidates"].size(), 2u);
  EXPECT_EQ(j["candidates"][0]["label"], "tq3/4") << "smallest KV first";
  EXPECT_LT(j["candidates"][0]["kv_bytes_per_token"].get<double>(), j["candidates"][1]["kv_bytes_per_token"].get<double>());
  for (const auto& c : j["candidates"]) {
    EXPECT_NE(c["verdict"], "safe") << "two items cannot clear a config: " << c["line"];
    EXPECT_GE(c["sessions"].get<int64_t>(), j["production"]["sessions"].get<int64_t>()) << "less KV per token: " << c.dump();
    EXPECT_FALSE(c["checks"].empty()) << c.dump();
  }
  EXPECT_TRUE(j["recommendation"].is_null());
  EXPECT_EQ(j["recommendation_text"].get<std::string>().rfind("none is safe on this evidence", 0), 0u) << j.dump(2);
  EXPECT_NE(slurp(md).find("**Recommendation: none is safe on this evidence"), std::string::npos) << slurp(md);

  // The run it made is an ordinary run: runs show opens with the same verdicts (each decided
  // alone there, not corrected for the other candidate) and what the run cannot conclude.
  const CliResult show = run_kvgate("runs show " + j["run"].dump() + " --db " + db);
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("verdict per config (rollout policy ci/gates/rollout.json, against q8_0):"), std::string::npos)
      << show.out;
  EXPECT_NE(show.out.find("This run (2 items)"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("It speaks only for traffic like these items"), std::string::npos) << show.out;
  const CliResult again = run_kvgate("compare --run " + j["run"].dump() + " --db " + db);
  EXPECT_EQ(again.exit_code, 1) << again.err;
  EXPECT_NE(again.out.find("RECOMMENDATION: none is safe on this evidence"), std::string::npos) << again.out;
}

}  // namespace
}  // namespace kvgate::testing
