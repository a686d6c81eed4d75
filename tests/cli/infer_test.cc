// End-to-end: generate and perplexity on the real default model, as a user runs them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

const std::string kSample = std::string(KVGATE_SOURCE_DIR) + "/tests/data/perplexity_sample.txt";

TEST(InferCli, GreedyContinuationOfAFactIsSensible) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  CliResult r = run_kvgate("generate --prompt 'The capital of France is' -n 8 --kv f32 --json --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["text"].get<std::string>().find("Paris"), std::string::npos) << j.dump();
  EXPECT_EQ(j["kv"], "f32/f32");
}

TEST(InferCli, ChatAnswerOfHundredTokensMentionsParis) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  CliResult r = run_kvgate("generate --chat --prompt 'What is the capital of France?' -n 100 --kv f16 --json --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["text"].get<std::string>().find("Paris"), std::string::npos) << j.dump();
  EXPECT_GT(j["tokens"].size(), 3u);
}

TEST(InferCli, PerplexityIsDeterministicAndPlausible) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string cmd = "perplexity --file " + kSample + " --ctx 128 --chunks 3 --kv f16 --json --threads 2";
  CliResult a = run_kvgate(cmd), b = run_kvgate(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(ja["ppl"], jb["ppl"]);  // bit-identical: same inputs, build and thread count
  const double ppl = ja["ppl"]["value"].get<double>();
  EXPECT_GT(ppl, 2.0);
  EXPECT_LT(ppl, 60.0);  // a coherent English text; a broken forward pass gives hundreds or more
  EXPECT_EQ(ja["scored_tokens"].get<int>(), 3 * (128 - 64 - 1));
}

// KL divergence against the f32 reference orders configs by how much they throw away.
TEST(InferCli, KldOrdersConfigsByBitWidth) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  auto mean_kld = [](const std::string& kv) {
    CliResult r = run_kvgate("perplexity --file " + kSample + " --ctx 128 --chunks 2 --kv " + kv +
                             " --ref f32 --json --threads 2");
    EXPECT_EQ(r.exit_code, 0) << kv << ": " << r.err;
    if (r.exit_code != 0) return -1.0;
    return nlohmann::json::parse(r.out)["kld"]["mean"]["value"].get<double>();
  };
  const double f16 = mean_kld("f16"), fp8 = mean_kld("fp8"), q4 = mean_kld("q4_0"), q2 = mean_kld("tq2/2");
  EXPECT_LT(f16, 1e-3);
  EXPECT_LT(f16, fp8);
  EXPECT_LT(fp8, q4);
  EXPECT_LT(q4, q2);
}

// Several --kv share one reference pass per chunk; each config's numbers are the ones it gets
// alone (one JSON object per line, in --kv order).
TEST(InferCli, SeveralConfigsScoreAsIfAlone) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string base = "perplexity --file " + kSample + " --ctx 64 --chunks 2 --ref f16 --json --threads 2";
  CliResult both = run_kvgate(base + " --kv q8_0 --kv q4_0"), alone = run_kvgate(base + " --kv q4_0");
  ASSERT_EQ(both.exit_code, 0) << both.err;
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  std::vector<nlohmann::json> lines;
  std::istringstream in(both.out);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u) << both.out;
  EXPECT_EQ(lines[0]["kv"], "q8_0:rot=wht/q8_0:rot=wht");  // llama.cpp rotates its cache types
  EXPECT_EQ(lines[1]["kv"], "q4_0:rot=wht/q4_0:rot=wht");
  const auto single = nlohmann::json::parse(alone.out);
  EXPECT_EQ(lines[1]["kld"], single["kld"]);
  EXPECT_EQ(lines[1]["ppl"], single["ppl"]);
  EXPECT_LT(lines[0]["kld"]["mean"]["value"].get<double>(), lines[1]["kld"]["mean"]["value"].get<double>());
}

// --kld-definition: llama.cpp (default) leaves out the reference's entries with ln p <= -16,
// full keeps them, llama.cpp-stored also rounds the reference to llama.cpp's 16-bit storage.
// All three measure the same divergence, so they differ only slightly.
TEST(InferCli, KldDefinitionSelectsLlamaCppsOrTheFullSum) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  auto run = [](const std::string& definition) {
    CliResult r = run_kvgate("perplexity --file " + kSample + " --ctx 64 --chunks 2 --kv q4_0 --ref f16 --json" +
                             " --threads 2" + (definition.empty() ? "" : " --kld-definition " + definition));
    EXPECT_EQ(r.exit_code, 0) << definition << ": " << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  };
  const auto by_default = run(""), llama = run("llama.cpp"), full = run("full"), stored = run("llama.cpp-stored");
  ASSERT_TRUE(by_default.contains("kld") && full.contains("kld") && stored.contains("kld"));
  EXPECT_EQ(by_default["kld_definition"], "llama.cpp");
  EXPECT_EQ(by_default["kld"], llama["kld"]);
  EXPECT_EQ(full["kld_definition"], "full");
  const double k_llama = llama["kld"]["mean"]["value"].get<double>();
  const double k_full = full["kld"]["mean"]["value"].get<double>();
  const double k_stored = stored["kld"]["mean"]["value"].get<double>();
  EXPECT_NE(k_llama, k_full);
  EXPECT_NEAR(k_full, k_llama, 0.05 * k_llama);
  EXPECT_NEAR(k_stored, k_llama, 0.05 * k_llama);
  // Only the KL sum changes with the definition; the candidate's own PPL never does.
  EXPECT_EQ(full["kld"]["ppl_base"], llama["kld"]["ppl_base"]);
  EXPECT_EQ(stored["kld"]["ppl_q"], llama["kld"]["ppl_q"]);

  CliResult bad = run_kvgate("perplexity --file " + kSample + " --ctx 64 --kv q4_0 --ref f16 --kld-definition exact");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("llama.cpp, llama.cpp-stored, full"), std::string::npos) << bad.err;
}

TEST(InferCli, BadInputsExitTwo) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  EXPECT_EQ(run_kvgate("perplexity --file /nonexistent/file.txt --ctx 128").exit_code, 2);
  EXPECT_EQ(run_kvgate("generate --prompt hi --kv not_a_format").exit_code, 2);
  EXPECT_EQ(run_kvgate("generate").exit_code, 2);
  CliResult r = run_kvgate("perplexity --file " + kSample + " --ctx 100000");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("fewer than one chunk"), std::string::npos) << r.err;
}

// --backend picks where the model runs. cpu always works; a GPU backend works in a GPU build
// with a device, and otherwise is an environment error (exit 3) that says what is missing.
TEST(InferCli, BackendFlag) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  EXPECT_EQ(run_kvgate("generate --prompt hi -n 2 --backend cpu --json --threads 2").exit_code, 0);
  CliResult bad = run_kvgate("generate --prompt hi -n 2 --backend tpu");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("expected cpu, cuda or hip"), std::string::npos) << bad.err;
  for (const std::string backend : {"cuda", "hip"}) {
    CliResult r = run_kvgate("generate --prompt hi -n 2 --json --backend " + backend);
    if (r.exit_code == 0) continue;  // a GPU build on a machine with that device
    EXPECT_EQ(r.exit_code, 3) << backend << ": " << r.err;
    EXPECT_NE(r.err.find("--backend " + backend), std::string::npos) << r.err;
  }
  const std::string db = ::testing::TempDir() + "kvgate_backend_flag.db";
  std::remove(db.c_str());
  ASSERT_EQ(run_kvgate("eval --suite smoke --limit 1 --kv q8_0 --backend cpu --threads 2 --json --db " + db).exit_code, 0);
  CliResult runs = run_kvgate("runs show 1 --json --db " + db);
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  EXPECT_EQ(nlohmann::json::parse(runs.out)["backend"], "cpu") << runs.out;
  std::remove(db.c_str());
}

}  // namespace
}  // namespace kvgate::testing
