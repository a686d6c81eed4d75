// End-to-end: kvgate eval / replay on the real default model, read back through the store.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "results/row_digest.h"
#include "results/sqlite.h"
#include "results/store.h"
#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

std::string temp(const std::string& name) {
  return scratch_path("eval", name);
}

// Two short generated items per domain, written once per test binary run.
const std::string& small_evalset() {
  static const std::string path = [] {
    const std::string p = temp("small.jsonl");
    std::remove(p.c_str());
    for (const char* domain : {"tables", "korean"}) {
      const std::string part = temp(std::string(domain) + ".jsonl");
      CliResult r = run_kvgate(std::string("evalset generate --domain ") + domain +
                               " --seed 7 --n 1 --tokens-min 120 --tokens-max 200 --out " + part);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      std::system(("cat " + part + " >> " + p).c_str());
    }
    return p;
  }();
  return path;
}

nlohmann::json eval_json(const std::string& args) {
  CliResult r = run_kvgate("eval " + args + " --json --threads 2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

std::map<std::string, double> kld_by_config(const nlohmann::json& j) {
  std::map<std::string, double> out;
  for (const auto& c : j["configs"]) out[c["kv"].get<std::string>()] = c["kld_mean"].get<double>();
  return out;
}

TEST(EvalCli, SameInputsGiveBitIdenticalMetrics) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string db = temp("det.db");
  std::remove(db.c_str());
  const std::string args = "--evalset " + small_evalset() + " --kv fp8,q4_0 --db " + db;
  const nlohmann::json a = eval_json(args), b = eval_json(args);
  ASSERT_TRUE(a.contains("run") && b.contains("run"));
  results::Store store = results::Store::open(db, results::Store::Mode::existing);
  const auto configs = store.run_configs(a["run"].get<int64_t>());
  ASSERT_EQ(configs.size(), 3u);
  int compared = 0;
  for (const std::string item : {"tables-s7-0000", "korean-s7-0000"}) {
    for (const auto& c : configs) {
      auto ma = store.item_metrics(a["run"].get<int64_t>(), item, c.config_id);
      auto mb = store.item_metrics(b["run"].get<int64_t>(), item, c.config_id);
      ASSERT_TRUE(ma && mb) << item << " " << c.spec;
      EXPECT_EQ(ma->kld_mean, mb->kld_mean);  // bit-identical, not approximately equal
      EXPECT_EQ(ma->kld_p99, mb->kld_p99);
      EXPECT_EQ(ma->same_top1, mb->same_top1);
      EXPECT_EQ(ma->nll_mean, mb->nll_mean);
      EXPECT_EQ(ma->first_divergence, mb->first_divergence);
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6);

  // `runs show` aggregates the stored rows the way eval aggregated them as it ran: same bits.
  CliResult show = run_kvgate("runs show " + std::to_string(a["run"].get<int64_t>()) + " --json --db " + db);
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const nlohmann::json shown = nlohmann::json::parse(show.out);
  std::map<std::string, double> shown_kld;
  for (const auto& c : shown["summary"]) shown_kld[c["spec"].get<std::string>()] = c["kld_mean"].get<double>();
  EXPECT_EQ(shown_kld, kld_by_config(a));
}

// Issue 34: `--resume` of a `--limit` run became the whole workload. It resumes the stored plan
// and says so; only a --limit given again changes it.
TEST(EvalCli, LimitedRunIsResumedAsItsPlan) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string db = temp("resume.db");
  std::remove(db.c_str());
  const nlohmann::json first = eval_json("--evalset " + small_evalset() + " --kv q8_0 --limit 1 --db " + db);
  ASSERT_EQ(first["items_run"], 1);
  const std::string run = std::to_string(first["run"].get<int64_t>());
  CliResult runs = run_kvgate("runs list --json --db " + db);
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  EXPECT_NE(runs.out.find("interrupted"), std::string::npos) << runs.out;

  const CliResult said = run_kvgate("eval --resume " + run + " --threads 2 --db " + db);
  ASSERT_EQ(said.exit_code, 0) << said.err;
  EXPECT_NE(said.err.find("resuming run " + run + " (evalset:"), std::string::npos) << said.err;
  EXPECT_NE(said.err.find("the first 1 of its 2 items, as its --limit plan (--limit 2 runs them all); 1 already stored"),
            std::string::npos)
      << said.err;
  const nlohmann::json kept = eval_json("--resume " + run + " --db " + db);
  EXPECT_EQ(kept["run"], first["run"]);
  EXPECT_EQ(kept["items_run"], 0) << "the stored plan holds one item, and it is stored";
  EXPECT_EQ(kept["items_skipped"], 1);
  EXPECT_EQ(kept["plan_items"], 1);
  EXPECT_EQ(kept["workload_items"], 2);
  {
    results::Store store = results::Store::open(db, results::Store::Mode::existing);
    EXPECT_EQ(store.find_run(first["run"].get<int64_t>())->status, kvgate::results::RunStatus::interrupted);
  }

  const nlohmann::json extended = eval_json("--resume " + run + " --limit 2 --db " + db);
  EXPECT_EQ(extended["run"], first["run"]);
  EXPECT_EQ(extended["items_skipped"], 1);
  EXPECT_EQ(extended["items_run"], 1);
  {
    // Each item carries the latency yardstick timed around it, the first by the first invocation
    // and the second by the resumed one, and the run names the workload (docs/gates.md).
    results::Store store = results::Store::open(db, results::Store::Mode::existing);
    const std::string workload = store.find_run(first["run"].get<int64_t>())->info.calibration;
    EXPECT_EQ(workload.rfind("kvgate calibration 2: ", 0), 0u) << workload;
    EXPECT_NE(workload.find("; 2 threads"), std::string::npos) << workload;
    const std::vector<results::ItemInfo> items = store.run_items(first["run"].get<int64_t>());
    ASSERT_EQ(items.size(), 2u);
    for (const results::ItemInfo& item : items) {
      ASSERT_TRUE(item.calibration.has_value()) << item.item_key;
      EXPECT_GT(item.calibration->prefill_ms, 0) << item.item_key;
      EXPECT_GT(item.calibration->decode_ms, 0) << item.item_key;
    }
  }
  CliResult again = run_kvgate("eval --resume " + run + " --db " + db);
  EXPECT_EQ(again.exit_code, 2) << "a complete run cannot be resumed";
}

// Issue 34: Ctrl-C ended the process at once and left the run 'running'. SIGINT now lets the
// item in progress commit, marks the run interrupted, says how to resume, and exits 130; the
// resumed run's metrics are bit-identical to an uninterrupted run's.
TEST(EvalCli, CtrlCMarksTheRunInterruptedAndResumable) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string db = temp("sigint.db"), items = temp("sigint.jsonl"), err = temp("sigint.err");
  std::remove(db.c_str());
  CliResult g = run_kvgate("evalset generate --domain tables --seed 11 --n 6 --tokens-min 120 --tokens-max 200 --out " + items);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string bin = kvgate_binary();
    if (!std::freopen(err.c_str(), "w", stderr)) ::_exit(126);
    ::execl(bin.c_str(), bin.c_str(), "eval", "--evalset", items.c_str(), "--kv", "q4_0,q8_0", "--threads", "1", "--db",
            db.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // The bound is generous on purpose: on a runner shared with builds the first item can take minutes.
  bool first_item = false;
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(15);
       !first_item && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!std::ifstream(db).good()) continue;
    try {
      results::Store store = results::Store::open(db, results::Store::Mode::existing);
      const auto runs = store.list_runs();
      first_item = !runs.empty() && runs.front().items >= 1;
    } catch (const std::exception&) {
    }
  }
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(first_item) << "the run never committed an item";
  const std::string said = slurp(err);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by the signal instead of stopping: " << said;
  EXPECT_EQ(WEXITSTATUS(status), 130) << said;
  int64_t run_id = 0;
  {
    results::Store store = results::Store::open(db, results::Store::Mode::existing);
    const auto runs = store.list_runs();
    ASSERT_EQ(runs.size(), 1u);
    run_id = runs.front().id;
    EXPECT_EQ(runs.front().status, kvgate::results::RunStatus::interrupted);
    EXPECT_GE(runs.front().items, 1);
    EXPECT_LT(runs.front().items, 6) << "the signal came after the last item: nothing left to resume";
    EXPECT_EQ(store.finished_pairs(run_id).size() % 3, 0u) << "whole items only";
    EXPECT_TRUE(runs.front().load.has_value()) << "an interrupted run records its machine load";
  }
  EXPECT_NE(said.find("SIGINT stopped run " + std::to_string(run_id) + " between items"), std::string::npos) << said;
  EXPECT_NE(said.find("resume it with: kvgate eval --resume " + std::to_string(run_id) + " --db " + db),
            std::string::npos)
      << said;

  // At the interrupted run's one thread: metrics are bit-identical for one thread count.
  auto eval_1 = [](const std::string& args) {
    const CliResult r = run_kvgate("eval " + args + " --json --threads 1");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  };
  const nlohmann::json resumed = eval_1("--resume " + std::to_string(run_id) + " --db " + db);
  EXPECT_EQ(resumed["run"], run_id);
  EXPECT_GE(resumed["items_run"].get<int>(), 1);
  EXPECT_EQ(resumed["items_skipped"].get<int>() + resumed["items_run"].get<int>(), 6);
  const nlohmann::json whole = eval_1("--evalset " + items + " --kv q4_0,q8_0 --db " + db);
  ASSERT_TRUE(whole.contains("run"));
  results::Store store = results::Store::open(db, results::Store::Mode::existing);
  EXPECT_EQ(store.find_run(run_id)->status, kvgate::results::RunStatus::complete);
  const auto a = store.run_item_metrics(run_id), b = store.run_item_metrics(whole["run"].get<int64_t>());
  ASSERT_EQ(a.size(), 18u);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].item_key, b[i].item_key);
    EXPECT_EQ(a[i].metrics.config_id, b[i].metrics.config_id);
    EXPECT_EQ(a[i].metrics.kld_mean, b[i].metrics.kld_mean) << a[i].item_key;  // bit-identical
    EXPECT_EQ(a[i].metrics.kld_p99, b[i].metrics.kld_p99) << a[i].item_key;
    EXPECT_EQ(a[i].metrics.same_top1, b[i].metrics.same_top1) << a[i].item_key;
    EXPECT_EQ(a[i].metrics.nll_mean, b[i].metrics.nll_mean) << a[i].item_key;
    EXPECT_EQ(a[i].metrics.first_divergence, b[i].metrics.first_divergence) << a[i].item_key;
  }
}

nlohmann::json answers_json(const std::string& db, int64_t run, const std::string& filters = "") {
  CliResult r = run_kvgate("runs show " + std::to_string(run) + " --answers --json --db " + db + filters);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

nlohmann::json show_json(const std::string& db, int64_t run) {
  CliResult r = run_kvgate("runs show " + std::to_string(run) + " --json --db " + db);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

// Every turn's answer is stored, and a run stopped by --limit and resumed holds the same answers,
// byte for byte, as a run made in one go.
TEST(EvalCli, AnswersAreStoredAndSurviveResume) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string db = temp("answers.db");
  std::remove(db.c_str());
  const std::string args = "--evalset " + small_evalset() + " --kv q4_0 --db " + db;
  const nlohmann::json straight = eval_json(args);
  const nlohmann::json first = eval_json(args + " --limit 1");
  const int64_t resumed_run = first["run"].get<int64_t>();
  // A resumed --limit run keeps its plan unless --limit says otherwise: two items, as straight.
  eval_json("--resume " + std::to_string(resumed_run) + " --limit 2 --db " + db);

  const nlohmann::json a = answers_json(db, straight["run"].get<int64_t>());
  const nlohmann::json b = answers_json(db, resumed_run);
  ASSERT_TRUE(a.value("stored", false)) << a.dump();
  ASSERT_EQ(a["turns"].size(), 2u) << "one scored span per generated item";
  for (const auto& t : a["turns"]) {
    ASSERT_EQ(t["answers"].size(), 2u);
    EXPECT_EQ(t["answers"][0]["role"], "reference");
    EXPECT_TRUE(t["answers"][0]["first_divergence"].is_null());
    for (const auto& x : t["answers"]) {
      EXPECT_TRUE(x["text"].is_string()) << t.dump();
      EXPECT_GT(x["tokens"].get<int64_t>(), 0);
    }
    EXPECT_TRUE(t["gold"].is_string()) << "generated items have gold answers: " << t.dump();
  }
  EXPECT_EQ(a["turns"], b["turns"]) << "the resumed run's answers differ from the straight run's";
  // The position buckets and first-token rates too.
  const nlohmann::json sa = show_json(db, straight["run"].get<int64_t>()), sb = show_json(db, resumed_run);
  ASSERT_EQ(sa["positions"].size(), 1u) << sa["positions"].dump();
  EXPECT_EQ(sa["positions"], sb["positions"]);
  EXPECT_EQ(sa["summary"], sb["summary"]);

  // --changed keeps only the turns whose answer changed; --config takes the name as typed.
  const nlohmann::json changed = answers_json(db, resumed_run, " --changed --config q4_0");
  size_t n_changed = 0;
  for (const auto& t : a["turns"]) n_changed += t["changed"].get<bool>() ? 1 : 0;
  EXPECT_EQ(changed["turns"].size(), n_changed);
  for (const auto& t : changed["turns"]) EXPECT_FALSE(t["answers"][1]["first_divergence"].is_null());
  CliResult text = run_kvgate("runs show " + std::to_string(resumed_run) + " --answers --domain korean --db " + db);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("korean-s7-0000"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("tables-s7-0000"), std::string::npos) << text.out;
  CliResult bad = run_kvgate("runs show " + std::to_string(resumed_run) + " --answers --config fp8 --db " + db);
  EXPECT_EQ(bad.exit_code, 2) << "fp8 is not a config of the run";
  EXPECT_NE(bad.err.find("no such config"), std::string::npos) << bad.err;
}

// The line of `out` that starts with `prefix` ("" when none).
std::string line_starting(const std::string& out, const std::string& prefix) {
  for (size_t at = 0; at < out.size();) {
    const size_t end = std::min(out.find('\n', at), out.size());
    if (out.compare(at, prefix.size(), prefix) == 0) return out.substr(at, end - at);
    at = end + 1;
  }
  return "";
}

// Configs show as the user typed them (q4_0), with the canonical spec a legend line and the JSON
// away; a resumed run keeps the spelling, and a run stored without one shows its canonical spec.
TEST(EvalCli, ConfigsShowAsTypedWithTheirCanonicalSpecs) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string db = temp("labels.db"), canonical = "q4_0:rot=wht/q4_0:rot=wht";
  std::remove(db.c_str());
  const CliResult r = run_kvgate("eval --suite smoke --limit 1 --kv q4_0 --max-new-tokens 4 --threads 2 --db " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string row = line_starting(r.out, "q4_0 ");
  EXPECT_FALSE(row.empty()) << r.out;
  EXPECT_FALSE(line_starting(r.out, "f16 (ref) ").empty()) << r.out;
  EXPECT_EQ(r.out.find(canonical + " "), std::string::npos) << "no canonical spec in the table's rows: " << r.out;
  EXPECT_NE(r.out.find("canonical specs: f16 = f16/f16; q4_0 = " + canonical + "\n"), std::string::npos) << r.out;
  // The columns stay aligned: each row as long as the header.
  EXPECT_EQ(line_starting(r.out, "kv config").size() - (std::string("Δ").size() - 1), row.size()) << r.out;
  // Under the table: the rollout verdict, naming the config as typed, and what one item cannot conclude.
  EXPECT_NE(r.out.find("verdict per config (rollout policy ci/gates/rollout.json, against f16):\n  q4_0: "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("This run (1 item) "), std::string::npos) << r.out;

  auto show_json = [&] {
    const CliResult s = run_kvgate("runs show 1 --json --db " + db);
    EXPECT_EQ(s.exit_code, 0) << s.err;
    return s.exit_code == 0 ? nlohmann::json::parse(s.out) : nlohmann::json::object();
  };
  auto labels = [](const nlohmann::json& configs) {
    std::map<std::string, std::string> out;  // spec -> label
    for (const auto& c : configs) out[c["spec"].get<std::string>()] = c["label"].get<std::string>();
    return out;
  };
  const std::map<std::string, std::string> typed = {{"f16/f16", "f16"}, {canonical, "q4_0"}};
  nlohmann::json j = show_json();
  EXPECT_EQ(labels(j["configs"]), typed);
  EXPECT_EQ(labels(j["summary"]), typed);
  const CliResult text = run_kvgate("runs show 1 --db " + db);
  EXPECT_FALSE(line_starting(text.out, "  q4_0 ").empty()) << text.out;
  EXPECT_NE(text.out.find("q4_0: "), std::string::npos) << "the verdict names the config as typed: " << text.out;

  // --answers --config takes the label, the canonical spec, or another spelling of it.
  for (const std::string& name : {std::string("q4_0"), canonical, std::string("q4_0:rot=wht")}) {
    const CliResult a = run_kvgate("runs show 1 --answers --json --config " + name + " --db " + db);
    ASSERT_EQ(a.exit_code, 0) << name << ": " << a.err;
    const nlohmann::json answers = nlohmann::json::parse(a.out);
    ASSERT_FALSE(answers["turns"].empty());
    EXPECT_EQ(answers["turns"][0]["answers"][1]["label"], "q4_0");
    EXPECT_EQ(answers["turns"][0]["answers"][1]["config"], canonical);
  }

  // Resumed, it keeps the spelling it began with.
  const CliResult resumed = run_kvgate("eval --resume 1 --limit 2 --max-new-tokens 4 --threads 2 --db " + db);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_FALSE(line_starting(resumed.out, "q4_0 ").empty()) << resumed.out;
  EXPECT_EQ(labels(show_json()["configs"]), typed);

  // A run stored before labels were kept (schema v6) shows its canonical specs, and no legend.
  // The labels are cleared through the row digests, as an upgrade reseals such a file's rows (a
  // plain UPDATE is tampering, which every reader refuses).
  {
    results::Connection c(db, false);
    const results::DigestedTable& table = results::digested_table("run_configs");
    for (const int64_t config_id : {int64_t{1}, int64_t{2}})
      EXPECT_TRUE(results::update_row(c, table, "run_id = 1 AND config_id = ?1", {results::SqlValue(config_id)},
                                      [&](results::Row& row) { row[results::column_index(table, "label")] = {}; }, 1));
  }
  j = show_json();
  EXPECT_EQ(labels(j["configs"]), (std::map<std::string, std::string>{{"f16/f16", "f16/f16"}, {canonical, canonical}}));
  const CliResult old = run_kvgate("runs show 1 --db " + db);
  EXPECT_FALSE(line_starting(old.out, "  " + canonical + " ").empty()) << old.out;
  const CliResult old_answers = run_kvgate("runs show 1 --answers --config q4_0 --db " + db);
  EXPECT_EQ(old_answers.exit_code, 0) << old_answers.err;
  EXPECT_EQ(old_answers.out.find("canonical specs:"), std::string::npos) << old_answers.out;
}

// Depth sweeps (`evalset from-text --sweep`) of three documents of ~1.3k tokens: every bucket
// they reach holds all three, `runs show` gives each bucket's interval over the documents and
// the paired depth effect, the buckets add up to the scored tokens, and the gate decides the
// depth and position checks on them.
TEST(EvalCli, DepthSweepPutsTheSameDocumentsInEveryBucket) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string dir = temp("sweep_docs");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const char* topics[] = {"harbour", "orchard", "library"};
  const char* verbs[] = {"repaired", "counted", "painted", "moved", "inspected", "cleaned"};
  for (int f = 0; f < 3; ++f) {
    std::ofstream out(dir + "/doc" + std::to_string(f) + ".txt");
    for (int p = 0; p < 32; ++p)
      out << "In the " << p + 1 << "th week the " << topics[f] << " team " << verbs[(p + f) % 6]
          << " the old sheds near the river, while the council argued about the budget and the weather stayed "
             "grey. Several neighbours wrote letters asking when the work would end, and the answers were "
             "polite but vague.\n\n";
  }
  const std::string items = temp("sweep.jsonl");
  CliResult r = run_kvgate("evalset from-text --dir " + dir + " --sweep --context-tokens 1300 --out " + items + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(nlohmann::json::parse(r.out)["items"], 3) << r.out;
  const std::string db = temp("positions.db");
  std::remove(db.c_str());
  // The rollout policy as shipped, but checking buckets from 1k on (the documents stop in 1-2k).
  const std::string rollout = temp("rollout-1k.json");
  {
    nlohmann::json p = nlohmann::json::parse(slurp(std::string(KVGATE_SOURCE_DIR) + "/ci/gates/rollout.json"));
    p["positions"]["min_position"] = 1024;
    std::ofstream(rollout) << p.dump();
  }
  const nlohmann::json run =
      eval_json("--evalset " + items + " --kv q4_0 --max-new-tokens 4 --policy " + rollout + " --db " + db);
  const nlohmann::json show = show_json(db, run["run"].get<int64_t>());
  ASSERT_EQ(show["positions"].size(), 1u) << show["positions"].dump();
  const nlohmann::json& curve = show["positions"][0];
  EXPECT_EQ(curve["spec"].get<std::string>().rfind("q4_0", 0), 0u) << "only the candidate has a curve: " << curve.dump();
  EXPECT_EQ(curve["label"], "q4_0") << "the curve names the config as typed: " << curve.dump();
  ASSERT_EQ(curve["buckets"].size(), 2u) << curve.dump();
  int64_t tokens = 0;
  for (const auto& b : curve["buckets"]) {
    tokens += b["scored_tokens"].get<int64_t>();
    EXPECT_EQ(b["items"], 3) << "every bucket holds the same documents: " << b.dump();
    ASSERT_TRUE(b["kld_mean_ci"].is_array()) << b.dump();
    EXPECT_LE(b["kld_mean_ci"][0].get<double>(), b["kld_mean"].get<double>()) << b.dump();
    EXPECT_GE(b["kld_mean_ci"][1].get<double>(), b["kld_mean"].get<double>()) << b.dump();
  }
  EXPECT_TRUE(curve["buckets"][0]["vs_shallowest"].is_null());
  EXPECT_EQ(curve["buckets"][1]["vs_shallowest"]["documents"], 3);
  const nlohmann::json& effect = curve["depth_effect"];
  ASSERT_TRUE(effect.is_object()) << curve.dump();
  EXPECT_EQ(effect["shallow"], "0-1k");
  EXPECT_EQ(effect["deep"], "1-2k");
  EXPECT_EQ(effect["documents"], 3);
  EXPECT_TRUE(effect["kld_ratio"]["low"].is_number()) << effect.dump();
  EXPECT_EQ(show["positions_bootstrap"]["unit"], "item");
  int64_t scored = 0;
  for (const auto& s : show["summary"]) {
    if (s["spec"] == curve["spec"]) scored = s["scored_tokens"].get<int64_t>();
    EXPECT_TRUE(s["first_token_eos_rate"].is_number()) << s.dump();
    if (s["role"] == "reference") EXPECT_EQ(s["first_token_differs_rate"], 0.0);
  }
  EXPECT_GT(scored, 1500);
  EXPECT_EQ(tokens, scored);
  // Bit-identical intervals on a second read (seeded bootstrap).
  EXPECT_EQ(show_json(db, run["run"].get<int64_t>())["positions"], show["positions"]);
  // The rollout verdict checks the position buckets the documents reach from the policy's 1k on
  // (1-2k), each over the three documents.
  ASSERT_EQ(run["verdicts"]["verdicts"].size(), 1u) << run.dump();
  size_t bucket_checks = 0;
  for (const auto& c : run["verdicts"]["verdicts"][0]["checks"])
    if (!c["position_bucket"].is_null()) {
      ++bucket_checks;
      EXPECT_EQ(c["items"], 3) << c.dump();
    }
  EXPECT_EQ(bucket_checks, 2u) << "mean KLD and same top-1 in 1-2k";
  const CliResult text = run_kvgate("runs show latest --db " + db);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("by position"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("\n  q4_0 "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("q4_0: mean KLD at 1-2k is "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("on the same 3 documents"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1st EOS %"), std::string::npos) << text.out;
  const std::string md = temp("sweep.md");
  const CliResult report = run_kvgate("report --md " + md + " --html " + temp("sweep.html") + " --db " + db);
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(slurp(md).find("on the same 3 documents"), std::string::npos);
  EXPECT_NE(slurp(temp("sweep.html")).find("on the same 3 documents"), std::string::npos);

  // The run against itself under a policy whose position and depth checks start at 1k: every
  // reached bucket decided (the depth check has no baseline; the position check, the run itself).
  const std::string id = std::to_string(run["run"].get<int64_t>());
  const std::string policy = temp("depth-policy.json");
  std::ofstream(policy) << R"({"kvgate_gate_policy": 1, "rules": [{"domain": "*", "kv": "*",
    "positions": [{"metric": "kld_mean", "min_position": 1024, "regression": 0.002}],
    "depth": [{"metric": "kld_mean", "min_position": 1024, "ratio_max": 100}]}]})";
  for (const std::string& p : {policy, std::string(KVGATE_SOURCE_DIR) + "/ci/gates/long.json"}) {
    const CliResult gate = run_kvgate("gate --json --no-store --baseline " + id + " --candidate " + id + " --policy " + p +
                                      " --db " + db);
    ASSERT_EQ(gate.exit_code, 0) << gate.out << gate.err;
    size_t depth_checks = 0, decided = 0;
    const nlohmann::json verdict = nlohmann::json::parse(gate.out);  // alive while its checks are walked
    for (const auto& c : verdict["checks"]) {
      const std::string name = c["name"];
      if (name.rfind("position.depth.", 0) == 0) ++depth_checks;
      if (name.rfind("position.depth.kld_mean@", 0) != 0 && name.rfind("position.regression.kld_mean@", 0) != 0) continue;
      EXPECT_TRUE(c["passed"].get<bool>()) << c.dump();
      decided += c["skipped"].get<bool>() ? 0 : 1;
    }
    EXPECT_GT(depth_checks, 0u) << p;
    // The 1k policy decides 1-2k twice; long.json starts at 2k, which no document reaches.
    EXPECT_EQ(decided, p == policy ? 2u : 0u) << gate.out;
  }
}

// kill -9 in the middle of a run: the database keeps whole items only, the run is listed as
// incomplete, and --resume finishes it without redoing what was stored.
TEST(EvalCli, KilledRunLeavesConsistentDatabaseAndResumes) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string db = temp("killed.db");
  std::remove(db.c_str());
  const std::string evalset = small_evalset();  // made here, not in the child, so this process removes it
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string bin = kvgate_binary();
    ::execl(bin.c_str(), bin.c_str(), "eval", "--evalset", evalset.c_str(), "--kv", "q4_0,q8_0", "--threads",
            "1", "--db", db.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait (bounded) until the first item is committed, then kill without warning.
  bool first_item = false;
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(15);
       !first_item && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (!std::ifstream(db).good()) continue;
    try {
      results::Store store = results::Store::open(db, results::Store::Mode::existing);
      const auto runs = store.list_runs();
      first_item = !runs.empty() && runs.front().items >= 1;
    } catch (const std::exception&) {
    }
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(first_item) << "the run never committed an item";
  int64_t run_id = 0;
  {
    results::Store store = results::Store::open(db, results::Store::Mode::existing);
    const auto runs = store.list_runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs.front().status, kvgate::results::RunStatus::running);  // never marked complete
    run_id = runs.front().id;
    // Whole items only: every stored item has a row for each of the three configs.
    const auto pairs = store.finished_pairs(run_id);
    EXPECT_EQ(pairs.size() % 3, 0u);
  }
  const nlohmann::json resumed = eval_json("--resume " + std::to_string(run_id) + " --db " + db);
  EXPECT_EQ(resumed["run"], run_id);
  EXPECT_GE(resumed["items_skipped"].get<int>(), 1);
  EXPECT_EQ(resumed["items_skipped"].get<int>() + resumed["items_run"].get<int>(), 2);
  results::Store store = results::Store::open(db, results::Store::Mode::existing);
  EXPECT_EQ(store.find_run(run_id)->status, kvgate::results::RunStatus::complete);
}

TEST(EvalCli, TwoProcessesWriteOneDatabase) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string db = temp("concurrent.db");
  std::remove(db.c_str());
  CliResult a, b;
  std::thread t1([&] { a = run_kvgate("eval --evalset " + small_evalset() + " --kv q8_0 --threads 1 --db " + db); });
  std::thread t2([&] { b = run_kvgate("eval --evalset " + small_evalset() + " --kv fp8 --threads 1 --db " + db); });
  t1.join();
  t2.join();
  EXPECT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(b.exit_code, 0) << b.err;
  results::Store store = results::Store::open(db, results::Store::Mode::existing);
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& r : runs) {
    EXPECT_EQ(r.status, kvgate::results::RunStatus::complete);
    EXPECT_EQ(r.items, 2);
  }
}

// The start of a per-turn row: the config's label padded to the column, then the turn index.
std::string fmt_row(const std::string& label, int64_t turn) {
  std::string row = "  " + label;
  row.resize(std::max<size_t>(row.size(), 2 + 9), ' ');  // the column fits "f16 (ref)"
  const std::string t = std::to_string(turn);
  return row + std::string(6 - t.size(), ' ') + t + " ";
}

// The table's lines from its header ("per turn over ...") to the end of the output or the next
// line that is not indented.
std::string per_turn_section(const std::string& out) {
  const size_t at = out.find("per turn over ");
  if (at == std::string::npos) return "";
  size_t end = out.find('\n', at);
  while (end != std::string::npos && end + 1 < out.size() && out[end + 1] == ' ') end = out.find('\n', end + 1);
  return out.substr(at, end == std::string::npos ? std::string::npos : end + 1 - at);
}

TEST(EvalCli, ReplayScoresEveryAssistantTurnWithGrowingContext) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string trace = temp("session.jsonl"), db = temp("replay.db");
  std::remove(db.c_str());
  CliResult g = run_kvgate("evalset generate --domain agentic --seed 3 --n 1 --tokens-min 300 --tokens-max 500 --out " + trace);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  CliResult r = run_kvgate("replay --trace " + trace + " --kv q4_0 --threads 2 --db " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The replay ends with its numbers turn by turn (README: per-turn KLD, top-1, TTFT, TPOT): one
  // row per config and turn, the context growing with the turn.
  const std::string table = per_turn_section(r.out);
  ASSERT_FALSE(table.empty()) << r.out;
  EXPECT_NE(table.find("per turn over 1 multi-turn sessions"), std::string::npos) << table;
  EXPECT_NE(table.find("mean KLD  top-1 %   TTFT ms   TPOT ms"), std::string::npos) << table;
  const CliResult show = run_kvgate("runs show latest --json --db " + db);
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const auto j = nlohmann::json::parse(show.out);
  ASSERT_EQ(j["configs"].size(), 2u);
  EXPECT_GT(j["summary"][1]["kld_mean"].get<double>(), 0.0);
  EXPECT_EQ(j["per_turn"]["sessions"], 1);
  std::map<std::string, std::vector<nlohmann::json>> turns;
  for (const auto& t : j["per_turn"]["turns"]) turns[t["label"].get<std::string>()].push_back(t);
  ASSERT_EQ(turns.size(), 2u) << j["per_turn"].dump();
  ASSERT_GE(turns.at("q4_0").size(), 2u) << "an agentic session has several assistant turns";
  for (size_t t = 1; t < turns.at("q4_0").size(); ++t)
    EXPECT_GT(turns.at("q4_0")[t]["context_tokens"].get<double>(), turns.at("q4_0")[t - 1]["context_tokens"].get<double>());
  for (const auto& t : turns.at("q4_0")) {
    EXPECT_EQ(t["spec"], "q4_0:rot=wht/q4_0:rot=wht");
    EXPECT_GT(t["kld_mean"].get<double>(), 0.0);
    EXPECT_TRUE(t["same_top1"].is_number() && t["ttft_ms"].is_number()) << t.dump();
    // Each row of the replay's table, as printed.
    EXPECT_NE(table.find(fmt_row("q4_0", t["turn"].get<int64_t>())), std::string::npos) << table;
  }
  // `runs show` prints the same table from the same rows.
  const CliResult text = run_kvgate("runs show latest --db " + db);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(per_turn_section(text.out), table);

  CliResult bad = run_kvgate("replay --trace " + small_evalset() + " --kv q4_0 --db " + db);
  EXPECT_EQ(bad.exit_code, 2) << "single-answer items are not sessions";
  EXPECT_NE(bad.err.find("not a session"), std::string::npos) << bad.err;

  // The report of a replay: its drift chart has a line per config, and the page renders.
  const std::string html = temp("replay.html");
  ASSERT_EQ(run_kvgate("report --run latest --html " + html + " --db " + db).exit_code, 0);
  EXPECT_EQ(slurp(html).find("no multi-turn sessions in this run"), std::string::npos);
  EXPECT_REPORT_RENDERS(html);
}

// The smoke suite: every domain produces rows, and damage follows the bits thrown away.
TEST(EvalCli, SmokeSuiteOrdersConfigsByDamage) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string db = temp("smoke.db");
  std::remove(db.c_str());
  const nlohmann::json j = eval_json("--suite smoke --kv q8_0,fp8,q4_0,tq3/3,tq2/2 --db " + db);
  ASSERT_TRUE(j.contains("configs"));
  EXPECT_EQ(j["items_run"], j["items"]);
  const auto kld = kld_by_config(j);
  EXPECT_EQ(kld.at("f16/f16"), 0.0);
  // 8-bit formats (q8_0 keeps 8 bits per element with a per-32 scale; FP8 E4M3 has 3 mantissa
  // bits, so its NMSE is ~20x q8_0's) lose far less than 4-bit, which loses less than 3 and 2.
  // (q8_0 and q4_0 are llama.cpp's, rotated by default.)
  const std::string q8 = "q8_0:rot=wht/q8_0:rot=wht", q4 = "q4_0:rot=wht/q4_0:rot=wht";
  EXPECT_LT(kld.at(q8), kld.at("fp8_e4m3/fp8_e4m3"));
  EXPECT_LT(kld.at("fp8_e4m3/fp8_e4m3"), kld.at(q4));
  EXPECT_LT(kld.at(q4), kld.at("tq3/u3"));
  EXPECT_LT(kld.at("tq3/u3"), kld.at("tq2/u2"));
  results::Store store = results::Store::open(db, results::Store::Mode::existing);
  std::map<int64_t, int> items_per_config;
  for (const auto& row : store.run_item_metrics(j["run"].get<int64_t>())) ++items_per_config[row.metrics.config_id];
  EXPECT_EQ(items_per_config.size(), 6u);
  for (const auto& [config, items] : items_per_config) EXPECT_EQ(items, 25) << "config " << config;  // 10 + 15 lookup

}

// Each config is one column of results: a spec given twice (or equal to the reference) would
// write two rows for one (item, config), so it is refused before anything runs.
TEST(EvalCli, ConfigGivenTwiceIsExit2) {
  const std::string db = temp("twice.db");
  std::remove(db.c_str());
  CliResult r = run_kvgate("eval --evalset " + small_evalset() + " --kv fp8,fp8_e4m3 --db " + db);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("twice"), std::string::npos) << r.err;
  r = run_kvgate("eval --evalset " + small_evalset() + " --kv none --db " + db);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("reference"), std::string::npos) << r.err;
}

// An item longer than the model's context (8192 tokens for the default model) stops the run
// before any forward pass, naming the file, the item, its length and the limit; nothing is stored.
TEST(EvalCli, ItemLongerThanTheModelsContextIsExit2BeforeAnyWork) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string items = temp("too_long.jsonl"), db = temp("too_long.db");
  std::remove(db.c_str());
  {
    std::ofstream out(items);
    out << R"({"answer":"4","domain":"custom","id":"short","messages":[{"content":"2+2?","role":"user"},)"
        << R"({"content":"4","role":"assistant"}],"score":{"kind":"answer"}})" << "\n";
    std::string filler;
    for (int i = 0; i < 12000; ++i) filler += "word ";
    out << R"({"domain":"custom","id":"very-long","messages":[{"content":")" << filler
        << R"(Say yes.","role":"user"},{"content":"yes","role":"assistant"}],"score":{"kind":"answer"}})" << "\n";
  }
  const CliResult r = run_kvgate("eval --evalset " + items + " --kv q4_0 --threads 2 --db " + db);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(items + ": item very-long is "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("context of 8192 tokens"), std::string::npos) << r.err;
  // The check comes before the database is opened, so not even an empty one is left behind.
  EXPECT_FALSE(std::filesystem::exists(db)) << "no database was made";
}

}  // namespace
}  // namespace kvgate::testing
