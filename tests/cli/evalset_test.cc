#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "evalset_cli_" + std::to_string(::getpid()) + "_" + name;
}

TEST(EvalsetCli, GenerateIsByteIdenticalAndValidates) {
  const std::string a = temp_path("a.jsonl"), b = temp_path("b.jsonl");
  CliResult r = run_kvgate("evalset generate --domain all --seed 11 --n 2 --out " + a);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_kvgate("evalset generate --domain all --seed 11 --n 2 --out " + b + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json summary = nlohmann::json::parse(r.out);
  EXPECT_EQ(summary["items"], 12) << "2 per generator domain";
  EXPECT_EQ(summary["domains"]["korean"], 2);
  EXPECT_EQ(slurp(a), slurp(b));
  r = run_kvgate("evalset validate " + a + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["hash"], summary["hash"]);
}

TEST(EvalsetCli, GenerateWritesItemsToStdoutWithoutOut) {
  const CliResult r = run_kvgate("evalset generate --domain policy --seed 2 --n 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json item = nlohmann::json::parse(r.out);
  EXPECT_EQ(item["id"], "policy-s2-0000");
  EXPECT_EQ(item["score"]["kind"], "answer");
}

TEST(EvalsetCli, BadInputExitsTwoWithFileAndLine) {
  const std::string bad = temp_path("bad.jsonl");
  std::ofstream(bad) << "\n{\"id\":\"x\",\"domain\":\"custom\",\"text\":\"abc\",\"score\":{\"kind\":\"spans\",\"spans\":[[1,9]]}}\n";
  CliResult r = run_kvgate("evalset validate " + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(bad + ":2: score: spans[0]: end 9 is past the end of text"), std::string::npos) << r.err;
  r = run_kvgate("evalset generate --domain sports --n 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown eval domain \"sports\""), std::string::npos) << r.err;
  r = run_kvgate("evalset generate --domain tables --tokens-min 100");
  EXPECT_EQ(r.exit_code, 2);
  r = run_kvgate("evalset from-git --repo " + temp_path("missing_repo"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not a git repository"), std::string::npos) << r.err;
}

TEST(EvalsetCli, BuiltInSuitesValidateWithTheirKvSpecs) {
  for (const std::string name : {"smoke", "nightly"}) {
    const CliResult r = run_kvgate("evalset validate " + name + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json s = nlohmann::json::parse(r.out);
    EXPECT_EQ(s["suite"], name);
    EXPECT_EQ(s["ref"], "f16");
    EXPECT_EQ(s["suite_hash"].get<std::string>().size(), 16u);
  }
  const std::string suite = temp_path("suite.json");
  std::ofstream(suite) << R"({"name":"x","evalsets":[{"domain":"tables","seed":1,"n":1}],"kv":["not_a_format"]})";
  const CliResult r = run_kvgate("evalset validate " + suite);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(suite + ": kv[0]: "), std::string::npos) << r.err;
}

TEST(EvalsetCli, FromGitAndFromTextOnTheUsersMaterial) {
  const std::string repo = temp_path("repo");
  std::filesystem::remove_all(repo);
  std::filesystem::create_directories(repo);
  const std::string git = "cd '" + repo + "' && git -c user.name=t -c user.email=t@example.invalid -c commit.gpgsign=false ";
  std::ofstream(repo + "/notes.md") << "Alpha line\n";
  ASSERT_EQ(std::system((git + "init -q && " + git + "add -A && " + git + "commit -q -m one >/dev/null 2>&1").c_str()), 0);
  std::ofstream(repo + "/notes.md") << "Alpha line\nBeta line added\n";
  ASSERT_EQ(std::system((git + "commit -q -am two >/dev/null 2>&1").c_str()), 0);
  const std::string out = temp_path("git.jsonl");
  CliResult r = run_kvgate("evalset from-git --repo '" + repo + "' --out " + out + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["commits"], 2);
  const nlohmann::json first = nlohmann::json::parse(slurp(out).substr(0, slurp(out).find('\n')));
  EXPECT_EQ(first["answer"], "Beta line added");

  std::ofstream(repo + "/doc.txt") << "The office opened in 1998 and has 42 desks.\n\nIt moved to a new building in 2015, with room for 120 people.\n";
  r = run_kvgate("evalset from-text --dir '" + repo + "' --json --out " + temp_path("text.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["items"], 2);  // one continuation, one fact ("2015")
  r = run_kvgate("evalset validate " + temp_path("text.jsonl"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Too short for a sweep of 1000 tokens: no documents, a clear error.
  r = run_kvgate("evalset from-text --dir '" + repo + "' --sweep --out " + temp_path("sweep.jsonl"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no documents (need .txt/.md files of at least 90% of --context-tokens)"), std::string::npos) << r.err;
  r = run_kvgate("evalset from-text --dir '" + repo + "' --sweep --context-tokens 30");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--context-tokens must be at least 256 with --sweep"), std::string::npos) << r.err;
  {
    std::ofstream doc(repo + "/long.txt");
    for (int i = 0; i < 40; ++i) doc << "The office on floor " << i % 7 << " keeps its keys in the blue cabinet.\n\n";
  }
  r = run_kvgate("evalset from-text --dir '" + repo + "' --sweep --context-tokens 256 --json --out " + temp_path("sweep.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["items"], 2) << r.out;  // two of 256 tokens; the tail and the short files skipped
  const std::string first_sweep = slurp(temp_path("sweep.jsonl")).substr(0, slurp(temp_path("sweep.jsonl")).find('\n'));
  EXPECT_EQ(nlohmann::json::parse(first_sweep)["meta"]["rule"], "sweep");
}

TEST(EvalsetCli, GeneratesALongItemAtADepthThatValidates) {
  const std::string out = temp_path("long.jsonl");
  CliResult r = run_kvgate("evalset generate --domain long_policy --seed 3 --n 1 --tokens-min 20000 --tokens-max 24000 "
                           "--depth 0.75 --out " + out + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json summary = nlohmann::json::parse(r.out);
  EXPECT_GE(summary["estimated_tokens"]["min"].get<size_t>(), 18000u);
  EXPECT_LE(summary["estimated_tokens"]["max"].get<size_t>(), 24500u);
  const nlohmann::json item = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(item["id"], "long_policy-s3-d750-0000");
  EXPECT_EQ(item["meta"]["depth"], 0.75);
  r = run_kvgate("evalset validate " + out + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["hash"], summary["hash"]);
  for (const std::string name : {"long-cpu", "long-cpu-ci", "long-cpu-sweep", "long"}) {
    r = run_kvgate("evalset validate " + name + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["suite"], name);
  }
  r = run_kvgate("evalset generate --domain retrieval --n 1 --depth 1.5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--depth must be a fraction from 0 to 1"), std::string::npos) << r.err;
  r = run_kvgate("evalset generate --domain tables --n 1 --depth 0.5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--depth applies to the long domains"), std::string::npos) << r.err;

  // Depth lists and sweeps (issue 42).
  r = run_kvgate("evalset generate --domain retrieval --seed 5 --n 2 --tokens-min 2000 --tokens-max 2400 --depth 0.1,0.9 "
                 "--out " + out + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["items"], 4);
  EXPECT_EQ(nlohmann::json::parse(slurp(out).substr(0, slurp(out).find('\n')))["id"], "retrieval-s5-d100-0000");
  r = run_kvgate("evalset generate --domain long_tables --seed 5 --n 1 --tokens-min 2000 --tokens-max 2400 --sweep "
                 "--out " + out + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json sweep = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(sweep["id"], "long_tables-s5-sweep-0000");
  EXPECT_EQ(sweep["score"]["kind"], "spans");
  EXPECT_EQ(sweep["score"]["spans"][0][1], sweep["text"].get<std::string>().size());
  r = run_kvgate("evalset generate --domain retrieval --n 1 --sweep --depth 0.5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--sweep scores every depth"), std::string::npos) << r.err;
  r = run_kvgate("evalset generate --domain retrieval --n 1 --depth 0.5,0.5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("twice"), std::string::npos) << r.err;
  r = run_kvgate("evalset generate --domain policy --n 1 --sweep");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--sweep applies to the long domains"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvgate::testing
