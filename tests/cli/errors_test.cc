// Bad input, each answered by a clear error and exit 2 within seconds: a directory, an empty or
// a missing file where a file is expected, a 10 MB field echoed in a message, a mistyped command,
// and every error as one JSON object on stderr under --json.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

using nlohmann::json;

std::string temp_path(const std::string& name) {
  return scratch_path("err", name);
}

std::string temp_file(const std::string& name, const std::string& content) {
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// One line: no message may flood a terminal or a CI log.
void expect_one_short_line(const CliResult& r, size_t max_bytes) {
  EXPECT_FALSE(r.err.empty());
  EXPECT_LE(r.err.size(), max_bytes) << r.err.substr(0, 300);
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err.substr(0, 300);
}

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_path("dir");
    ::mkdir(dir_.c_str(), 0700);
    trace_ = temp_file("trace.jsonl", "{\"timestamp_ms\": 0, \"input_tokens\": 500, \"output_tokens\": 50}\n");
    empty_ = temp_file("empty", "");
  }
  void TearDown() override {
    ::rmdir(dir_.c_str());
    std::remove(trace_.c_str());
    std::remove(empty_.c_str());
  }
  std::string dir_, trace_, empty_;
};

TEST_F(CliErrors, KvOverheadFileThatIsADirectoryIsBadInput) {
  const CliResult r = run_kvgate("capacity --trace " + trace_ + " --kv fp8 --kv-overhead-file " + dir_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(dir_ + ": is a directory, expected a file"), std::string::npos) << r.err;
  expect_one_short_line(r, 400);

  const CliResult empty = run_kvgate("capacity --trace " + trace_ + " --kv fp8 --kv-overhead-file " + empty_);
  EXPECT_EQ(empty.exit_code, 2) << empty.err;
  EXPECT_NE(empty.err.find(empty_ + ": is empty"), std::string::npos) << empty.err;

  const std::string missing = temp_path("missing.json");
  const CliResult gone = run_kvgate("capacity --trace " + trace_ + " --kv fp8 --kv-overhead-file " + missing);
  EXPECT_EQ(gone.exit_code, 2) << gone.err;
  EXPECT_NE(gone.err.find(missing + ": cannot open"), std::string::npos) << gone.err;
}

// The file-taking flags read through one reader (core/mapped_file.h) and say the same thing;
// none of these needs the model before it reads its file.
TEST_F(CliErrors, EveryFileFlagNamesADirectoryAsTheProblem) {
  const std::vector<std::string> commands = {
      "profile --trace " + dir_,
      "capacity --kv f16 --trace " + dir_,
      "evalset validate " + dir_,
      "eval --kv fp8 --db " + temp_path("x.db") + " --evalset " + dir_,
      "replay --kv fp8 --db " + temp_path("x.db") + " --trace " + dir_,
      "kv check fp8 --input " + dir_,
      "kv roundtrip fp8 --output " + temp_path("out.npy") + " --input " + dir_,
  };
  for (const std::string& command : commands) {
    const CliResult r = run_kvgate(command);
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.err;
    EXPECT_NE(r.err.find(dir_ + ": is a directory, expected a file"), std::string::npos) << command << ": " << r.err;
  }
  // A directory is a model too (a Hugging Face checkpoint): an empty one is named with what it lacks.
  const CliResult model = run_kvgate("model info --model " + dir_);
  EXPECT_EQ(model.exit_code, 2) << model.err;
  EXPECT_NE(model.err.find(dir_ + ": no config.json"), std::string::npos) << model.err;
}

TEST_F(CliErrors, HugeFieldsAreCutWhereTheyAreEchoed) {
  const std::string huge(10'000'000, 'x');
  const std::string item = json{{"id", huge}, {"domain", "d"}, {"text", "hello world"},
                                {"score", {{"kind", "spans"}, {"spans", {{6, 11}}}}}}.dump();
  const std::string twice = temp_file("dup.jsonl", item + "\n" + item + "\n");
  const CliResult dup = run_kvgate("evalset validate " + twice);
  EXPECT_EQ(dup.exit_code, 2);
  EXPECT_NE(dup.err.find("duplicate id \"" + std::string(80, 'x') + "... (10000000 bytes)\""), std::string::npos)
      << dup.err.substr(0, 300);
  expect_one_short_line(dup, 300);

  const std::string role = temp_file("role.jsonl", json{{"id", "a"}, {"domain", "d"},
                                                        {"messages", {{{"role", huge}, {"content", "hi"}}}},
                                                        {"score", {{"kind", "turns"}}}}.dump() + "\n");
  const CliResult bad_role = run_kvgate("evalset validate " + role);
  EXPECT_EQ(bad_role.exit_code, 2);
  EXPECT_NE(bad_role.err.find("(10000000 bytes)"), std::string::npos) << bad_role.err.substr(0, 300);
  expect_one_short_line(bad_role, 300);

  const std::string csv = temp_file("big.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1" +
                                                   std::string(10'000'000, '9') + "x,10\n");
  const CliResult cell = run_kvgate("profile --trace " + csv);
  EXPECT_EQ(cell.exit_code, 2);
  EXPECT_NE(cell.err.find(csv + ":2: column \"ContextTokens\""), std::string::npos) << cell.err.substr(0, 300);
  expect_one_short_line(cell, 300);

  // A KV spec the planner's file names: its message comes from the KV registry, and the CLI's
  // final cap keeps it short wherever a site echoes in full.
  const std::string spec = temp_file("spec.json", json{{huge, 2.0}}.dump());
  const CliResult long_spec = run_kvgate("capacity --trace " + trace_ + " --kv fp8 --kv-overhead-file " + spec);
  EXPECT_EQ(long_spec.exit_code, 2);
  expect_one_short_line(long_spec, 1100);
  const CliResult as_json = run_kvgate("capacity --trace " + trace_ + " --kv fp8 --kv-overhead-file " + spec + " --json");
  EXPECT_EQ(as_json.exit_code, 2);
  expect_one_short_line(as_json, 1200);
  // The same backstop for a gate policy's unknown 10 MB key, read before any run is looked up.
  const std::string policy =
      temp_file("policy.json", json{{"kvgate_gate_policy", 1}, {"rules", {{{"domain", "*"}, {"kv", "*"}, {huge, 1}}}}}.dump());
  const CliResult long_key = run_kvgate("gate --baseline 1 --candidate 2 --policy " + policy + " --db " + temp_path("none.db"));
  EXPECT_EQ(long_key.exit_code, 2);
  EXPECT_NE(long_key.err.find(policy + ": rules[0]: unknown key"), std::string::npos) << long_key.err.substr(0, 300);
  expect_one_short_line(long_key, 1100);
  for (const auto& p : {twice, role, csv, spec, policy}) std::remove(p.c_str());
}

TEST(CliCommands, AMistypedCommandIsNamedWithTheClosestOnes) {
  const CliResult evl = run_kvgate("evl");
  EXPECT_EQ(evl.exit_code, 2);
  EXPECT_NE(evl.err.find("unknown command 'evl'"), std::string::npos) << evl.err;
  EXPECT_NE(evl.err.find("did you mean 'eval'?"), std::string::npos) << evl.err;

  const CliResult lst = run_kvgate("runs lst");
  EXPECT_EQ(lst.exit_code, 2);
  EXPECT_NE(lst.err.find("unknown command 'lst' for 'kvgate runs'"), std::string::npos) << lst.err;
  EXPECT_NE(lst.err.find("did you mean 'runs list'?"), std::string::npos) << lst.err;

  const CliResult nothing_close = run_kvgate("frobnicate");
  EXPECT_EQ(nothing_close.exit_code, 2);
  EXPECT_NE(nothing_close.err.find("unknown command 'frobnicate'; commands: bench, capacity,"), std::string::npos)
      << nothing_close.err;

  // A known command still gets CLI11's own message for its own mistakes.
  const CliResult missing = run_kvgate("runs");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("A subcommand is required"), std::string::npos) << missing.err;
}

json json_error(const CliResult& r) {
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  json j = json::parse(r.err, nullptr, false);
  EXPECT_TRUE(j.is_object()) << r.err;
  return j.is_object() ? j : json::object();
}

TEST(CliCommands, WithJsonEveryErrorIsOneJsonObjectOnStderr) {
  const CliResult usage = run_kvgate("kv show nosuchformat --json");
  EXPECT_EQ(usage.exit_code, 2);
  json j = json_error(usage);
  EXPECT_EQ(j["kind"], "usage");
  EXPECT_EQ(j["exit_code"], 2);
  EXPECT_NE(j["error"].get<std::string>().find("unknown format 'nosuchformat'"), std::string::npos) << usage.err;

  const CliResult input = run_kvgate("profile --trace /nonexistent/trace.jsonl --json");
  EXPECT_EQ(input.exit_code, 2);
  j = json_error(input);
  EXPECT_EQ(j["kind"], "input");
  EXPECT_EQ(j["exit_code"], 2);
  EXPECT_NE(j["error"].get<std::string>().find("/nonexistent/trace.jsonl"), std::string::npos) << input.err;

  const CliResult mistyped = run_kvgate("runs lst --json");
  EXPECT_EQ(mistyped.exit_code, 2);
  j = json_error(mistyped);
  EXPECT_EQ(j["kind"], "usage");
  EXPECT_NE(j["error"].get<std::string>().find("unknown command 'lst'"), std::string::npos) << mistyped.err;

  const CliResult parse = run_kvgate("kv list --no-such-flag --json");
  EXPECT_EQ(parse.exit_code, 2);
  j = json_error(parse);
  EXPECT_EQ(j["kind"], "usage");
  EXPECT_NE(j["error"].get<std::string>().find("--no-such-flag"), std::string::npos) << parse.err;
}

}  // namespace
}  // namespace kvgate::testing
