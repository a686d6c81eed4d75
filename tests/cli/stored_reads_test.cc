// The commands that read a stored run back (`kvgate runs show`, `report`, `gate`) load it once as
// a results::StoredRun and hand that to every part of their output (answers, verdicts, the engine
// view, the weights table): each stored table of a run is read once per command. Runs the
// commands in this process, so the store's read counter (Store::run_table_reads) sees their reads.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "harness/commands.h"
#include "results/store.h"
#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

std::string tiny(const std::string& name) { return std::string(KVGATE_SOURCE_DIR) + "/tests/golden/tiny_models/" + name; }

const char* kItems =
    "{\"id\":\"t1\",\"domain\":\"tables\",\"text\":\"Hello world, this is a test of the tiny model.\","
    "\"score\":{\"kind\":\"spans\",\"spans\":[[6,11]]}}\n"
    "{\"id\":\"t2\",\"domain\":\"lookup\",\"text\":\"Another line of text for scoring here.\","
    "\"score\":{\"kind\":\"spans\",\"spans\":[[8,12]]}}\n";

// Two complete runs of the tiny model with two candidates, made once.
const std::string& two_runs() {
  static const std::string db = [] {
    const std::string items = scratch_path("stored_reads", "items.jsonl");
    std::ofstream(items) << kItems;
    const std::string path = scratch_path("stored_reads", "runs.db");
    for (int i = 0; i < 2; ++i) {
      const CliResult r = run_kvgate("eval --evalset " + items + " --model " + tiny("tiny-qwen2.gguf") +
                                     " --kv fp8,bf16 --threads 1 --max-new-tokens 4 --db " + path);
      EXPECT_EQ(r.exit_code, 0) << r.err;
    }
    return path;
  }();
  return db;
}

using Reads = std::map<std::pair<std::string, int64_t>, int64_t>;

// The reads one command line makes, run in this process as main.cc runs it (want_exit < 0: any
// exit code, as a gate that may fail).
Reads reads_of(const std::string& args, int want_exit = 0) {
  const Reads before = results::Store::run_table_reads();
  CLI::App app;
  harness::CommandContext ctx;
  harness::add_runs_commands(app, ctx);
  harness::add_report_commands(app, ctx);
  harness::add_gate_commands(app, ctx);
  harness::add_eval_commands(app, ctx);
  app.parse(args, false);
  if (want_exit >= 0) EXPECT_EQ(ctx.exit_code, want_exit) << args;
  Reads out;
  for (const auto& [key, n] : results::Store::run_table_reads()) {
    const auto b = before.find(key);
    if (const int64_t d = n - (b == before.end() ? 0 : b->second); d > 0) out[key] = d;
  }
  return out;
}

// Every table read is read once, and the run's own tables are all among them.
void expect_each_table_once(const Reads& reads, const std::string& what, std::initializer_list<int64_t> runs) {
  for (const auto& [key, n] : reads) EXPECT_EQ(n, 1) << what << ": table " << key.first << " of run " << key.second;
  for (const int64_t run : runs)
    for (const char* table : {"run_configs", "items", "item_metrics", "turn_metrics", "position_metrics", "config_endpoints"})
      EXPECT_EQ(reads.count({table, run}), 1u) << what << ": table " << table << " of run " << run << " never read";
  std::set<int64_t> seen;
  for (const auto& [key, n] : reads) seen.insert(key.second);
  EXPECT_EQ(seen.size(), runs.size()) << what << ": reads runs it was not asked about";
}

TEST(StoredReads, ReportReadsEachTableOnce) {
  const std::string db = two_runs();
  const std::string md = scratch_path("stored_reads", "r.md"), html = scratch_path("stored_reads", "r.html");
  expect_each_table_once(reads_of("report --run 2 --md " + md + " --html " + html + " --db " + db), "report", {2});
  expect_each_table_once(reads_of("report --run 2 --baseline 1 --md " + md + " --db " + db), "report --baseline", {1, 2});
  // A run against itself is read once.
  expect_each_table_once(reads_of("report --run 2 --baseline 2 --md " + md + " --db " + db), "report --baseline itself", {2});
}

TEST(StoredReads, RunsShowReadsEachTableOnce) {
  const std::string db = two_runs();
  expect_each_table_once(reads_of("runs show 2 --db " + db), "runs show", {2});
  expect_each_table_once(reads_of("runs show 2 --json --db " + db), "runs show --json", {2});
  expect_each_table_once(reads_of("runs show 2 --answers --config bf16 --db " + db), "runs show --answers", {2});
}

TEST(StoredReads, GateReadsEachTableOnce) {
  const std::string db = two_runs();
  const std::string policy = std::string(KVGATE_SOURCE_DIR) + "/ci/gates/default.json";
  const std::string report = scratch_path("stored_reads", "gate.md"), junit = scratch_path("stored_reads", "gate.xml");
  const std::string gate = "gate --no-store --policy " + policy + " --db " + db + " --report " + report + " --junit " + junit;
  const Reads two = reads_of(gate + " --baseline 1 --candidate 2", -1);
  expect_each_table_once(two, "gate", {1, 2});
  expect_each_table_once(reads_of(gate + " --baseline 1 --candidate 1 --json", -1), "gate against itself", {1});
}

// `eval --resume` reads the stored run's tables once to plan the resume (the plan carries each
// config's id on to the recorder, which used to read run_configs again to find them). Both a new
// and a resumed run read the finished run back once more for their summary (the verdicts), so a
// resume reads each table at most once more than a new run does, and run_configs exactly once more.
TEST(StoredReads, ResumeReadsEachTableOnce) {
  const std::string items = scratch_path("stored_reads_resume", "items.jsonl");
  std::ofstream(items) << kItems;
  const std::string eval = "eval --evalset " + items + " --model " + tiny("tiny-qwen2.gguf") +
                           " --kv fp8,bf16 --threads 1 --max-new-tokens 4 --json --db ";
  const std::string fresh_db = scratch_path("stored_reads_resume", "fresh.db");
  const Reads fresh = reads_of(eval + fresh_db + " --limit 1");
  const std::string db = scratch_path("stored_reads_resume", "resumed.db");
  const CliResult first = run_kvgate(eval + db + " --limit 1");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const Reads resumed = reads_of("eval --resume 1 --limit 2 --threads 1 --json --db " + db);
  auto count = [](const Reads& r, const std::string& table) {
    const auto it = r.find({table, 1});
    return it == r.end() ? int64_t{0} : it->second;
  };
  EXPECT_EQ(count(resumed, "run_configs"), count(fresh, "run_configs") + 1) << "resume reads the run's configs once";
  for (const auto& [key, n] : resumed)
    EXPECT_LE(n, count(fresh, key.first) + 1) << "resume: table " << key.first << " of run " << key.second;
}

}  // namespace
}  // namespace kvgate::testing
