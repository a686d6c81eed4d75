// End-to-end: the architectures beyond the default model through the real binary — the tiny
// random-weight qwen2 / qwen3 / llama3 files committed in tests/golden/tiny_models, and Gemma 3
// 270M when `kvgate model fetch --name gemma3-270m` has fetched it (those tests skip otherwise).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

namespace fs = std::filesystem;

std::string tiny(const std::string& name) { return std::string(KVGATE_SOURCE_DIR) + "/tests/golden/tiny_models/" + name; }

fs::path gemma_file() {
  const char* home = std::getenv("KVGATE_HOME");
  fs::path dir = home && *home ? fs::path(home) : fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/") / ".cache" / "kvgate";
  return dir / "models" / "gemma-3-270m-q4_k_m.gguf";
}

#define SKIP_UNLESS_GEMMA_FETCHED()                                                                   \
  if (!fs::exists(gemma_file()))                                                                      \
  GTEST_SKIP() << "Gemma 3 270M not fetched (" << gemma_file()                                        \
               << " missing); run `kvgate model fetch --name gemma3-270m`"

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "kvgate_arch_cli_" + std::to_string(::getpid()) + "_" + name;
}

TEST(ArchitecturesCli, InfoNamesLayoutAndScaling) {
  CliResult r = run_kvgate("model info --json --model " + tiny("tiny-qwen2.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["arch"]["architecture"], "qwen2");
  EXPECT_EQ(j["arch"]["rope_layout"], "halves");
  EXPECT_EQ(j["arch"]["sliding_window_layers"], 0);
  r = run_kvgate("model info --model " + tiny("tiny-llama-linear.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("adjacent pairs, linear scaling x4"), std::string::npos) << r.out;
}

TEST(ArchitecturesCli, TinyModelsGenerateAndScorePerplexity) {
  for (const char* name : {"tiny-qwen2.gguf", "tiny-qwen3.gguf", "tiny-llama3.gguf"}) {
    CliResult r = run_kvgate("generate --json --threads 2 --ignore-eos -n 6 --kv fp8 --prompt 'hello world' --model " +
                             tiny(name));
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].size(), 6u) << name;
    r = run_kvgate("perplexity --json --threads 2 --ctx 64 --chunks 1 --kv int8_pth --ref f16 --file " +
                   std::string(KVGATE_SOURCE_DIR) + "/tests/data/perplexity_sample.txt --model " + tiny(name));
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_GT(nlohmann::json::parse(r.out)["chunk_ppl"][0].get<double>(), 1.0) << name;
  }
}

TEST(ArchitecturesCli, UnsupportedArchitectureExitsTwoNamingIt) {
  std::ifstream in(tiny("tiny-qwen3.gguf"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t at = bytes.find("qwen3"); at != std::string::npos; at = bytes.find("qwen3", at + 5))
    bytes.replace(at, 5, "phi42");
  const std::string path = temp_path("phi42.gguf");
  std::ofstream(path, std::ios::binary) << bytes;
  const CliResult r = run_kvgate("generate -n 1 --prompt hi --model " + path);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("'phi42' is not supported"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gemma3"), std::string::npos) << r.err;  // the supported list
  fs::remove(path);
}

TEST(ArchitecturesCli, GemmaInfoCountsTheSlidingWindow) {
  SKIP_UNLESS_GEMMA_FETCHED();
  const CliResult r = run_kvgate("model info --json --model gemma3-270m");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["arch"]["sliding_window"], 512);
  EXPECT_EQ(j["arch"]["sliding_window_layers"], 15);
  EXPECT_EQ(j["kv_bytes_per_token_f16"], 18432);
  // 3 global layers x 4096 + 15 local x 512 tokens, 1024 bytes each.
  EXPECT_EQ(j["kv_bytes_per_sequence_f16"]["4096"], 20447232);
}

// The chat prompt of tests/golden/gemma3_logits.json's greedy run: the same first tokens as
// llama.cpp (where its top-1 margins are above 1).
TEST(ArchitecturesCli, GemmaChatGenerationMatchesLlamaCpp) {
  SKIP_UNLESS_GEMMA_FETCHED();
  const CliResult r = run_kvgate(
      "generate --json --threads 2 --kv f32 -n 7 --chat --prompt 'What is the capital of France?' --model gemma3-270m");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"], 16);
  EXPECT_EQ(j["tokens"], nlohmann::json::parse("[3689, 563, 506, 5279, 529, 7001, 236881]"));
}

TEST(ArchitecturesCli, GemmaEvalRunsEndToEnd) {
  SKIP_UNLESS_GEMMA_FETCHED();
  const std::string items = temp_path("policy.jsonl"), db = temp_path("gemma.db");
  CliResult r = run_kvgate("evalset generate --domain policy --seed 3 --out " + items);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_kvgate("eval --json --threads 2 --limit 1 --kv q8_0 --model gemma3-270m --evalset " + items + " --db " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("q8_0"), std::string::npos) << r.out;
  fs::remove(items);
  fs::remove(db);
}

}  // namespace
}  // namespace kvgate::testing
