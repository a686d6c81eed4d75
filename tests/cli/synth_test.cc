// End-to-end: `kvgate model synth` writes a random-weight model at a real shape with the default
// model's tokenizer; `model info` marks it, `eval` and `replay` refuse it unless told, and
// `bench model` runs on it.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

namespace fs = std::filesystem;

std::string temp(const std::string& name) { return scratch_path("synth", name); }

// The 2-layer test shape: 256 wide, the default model's 49,152-token vocabulary.
std::string synth(const std::string& name, const std::string& args) {
  const std::string out = temp(name);
  const CliResult r = run_kvgate("model synth --shape tiny --out " + out + " " + args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return out;
}

TEST(SynthCli, WritesALoadableModelThatInfoMarksSynthetic) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string out = temp("tiny.gguf");
  CliResult r = run_kvgate("model synth --shape tiny --weights q4_0 --json --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["synthetic"], true);
  EXPECT_EQ(j["n_vocab"], 49152);
  EXPECT_EQ(j["n_layers"], 2);
  EXPECT_EQ(j["size_bytes"].get<uint64_t>(), fs::file_size(out));

  CliResult info = run_kvgate("model info --json --model " + out);
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const nlohmann::json i = nlohmann::json::parse(info.out);
  EXPECT_EQ(i["synthetic"], true);
  EXPECT_EQ(i["arch"]["n_layers"], 2);
  EXPECT_EQ(i["arch"]["n_embd"], 256);
  EXPECT_EQ(i["arch"]["n_vocab"], 49152);
  EXPECT_EQ(i["tensor_types"][1]["type"], "Q4_0");  // after F32's norms
  CliResult text = run_kvgate("model info --model " + out);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("synthetic              yes: random weights (tiny, Q4_0 weights, seed 0)"), std::string::npos)
      << text.out;

  // The default model is not.
  CliResult real = run_kvgate("model info --json");
  ASSERT_EQ(real.exit_code, 0) << real.err;
  EXPECT_EQ(nlohmann::json::parse(real.out)["synthetic"], false);
}

TEST(SynthCli, SameSeedSameBytesEveryWeightType) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  for (const char* weights : {"f16", "q8_0", "q4_0", "q4_k"}) {
    const std::string w = std::string("--weights ") + weights;
    const std::string a = synth(std::string(weights) + "_a.gguf", w + " --seed 7");
    const std::string b = synth(std::string(weights) + "_b.gguf", w + " --seed 7");
    const std::string c = synth(std::string(weights) + "_c.gguf", w + " --seed 8");
    EXPECT_EQ(slurp(a), slurp(b)) << weights;
    EXPECT_NE(slurp(a), slurp(c)) << weights;
    CliResult info = run_kvgate("model info --json --model " + a);
    ASSERT_EQ(info.exit_code, 0) << weights << ": " << info.err;
  }
}

TEST(SynthCli, LayersCutTheShape) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  for (const std::string& args : {std::string("--shape tiny-layers=1"), std::string("--shape tiny --layers 1")}) {
    const std::string out = temp("one_layer.gguf");
    CliResult r = run_kvgate("model synth " + args + " --json --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["n_layers"], 1) << args;
    EXPECT_EQ(nlohmann::json::parse(r.out)["shape"], "tiny-layers=1") << args;
  }
}

TEST(SynthCli, BadShapesWeightsAndPathsAreErrors) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string out = temp("bad.gguf");
  struct Case {
    std::string args;
    int exit_code;
    const char* says;
  };
  for (const Case& c : {Case{"--shape llama-9b --out " + out, 2, "unknown shape"},
                        Case{"--shape tiny-layers=3 --out " + out, 2, "has 2 layers"},
                        Case{"--shape tiny-layers=x --out " + out, 2, "positive layer count"},
                        Case{"--shape tiny --layers 5 --out " + out, 2, "has 2 layers"},
                        Case{"--shape tiny --weights q2_k --out " + out, 2, "f16, q8_0, q4_0 or q4_k"},
                        Case{"--shape tiny --out /nonexistent-dir/x.gguf", 3, "/nonexistent-dir/x.gguf"}}) {
    CliResult r = run_kvgate("model synth " + c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists("/nonexistent-dir/x.gguf.partial"));
}

TEST(SynthCli, EvalAndReplayRefuseItUnlessAllowed) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string model = synth("refused.gguf", "--weights q8_0");
  const std::string db = temp("refused.db"), trace = temp("session.jsonl");
  CliResult g = run_kvgate("evalset generate --domain agentic --seed 3 --n 1 --tokens-min 100 --tokens-max 200 --out " + trace);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  for (const std::string& command : {std::string("eval --suite smoke --limit 1"), "replay --trace " + trace}) {
    CliResult r = run_kvgate(command + " --kv q4_0 --threads 2 --model " + model + " --db " + db);
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.err;
    EXPECT_NE(r.err.find("synthetic model"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--allow-synthetic"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(db)) << "a refused run must not create a database";
  CliResult allowed =
      run_kvgate("eval --suite smoke --limit 1 --kv q4_0 --threads 2 --json --allow-synthetic --model " + model + " --db " + db);
  ASSERT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_EQ(nlohmann::json::parse(allowed.out)["configs"].size(), 2u);
}

TEST(SynthCli, BenchModelRunsOnItOnTheCpu) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string model = synth("bench.gguf", "--weights q4_0");
  CliResult r = run_kvgate("bench model --model " + model +
                           " --kv f16 --prefill-tokens 64 --decode-steps 2 --contexts 0 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("tests")) << r.out;
  ASSERT_EQ(j["tests"].size(), 2u) << r.out;
  EXPECT_EQ(j["tests"][0]["test"], "pp64");
  EXPECT_GT(j["tests"][0]["ratio_to_sgemm"].get<double>(), 0.0) << j["tests"][0];
  EXPECT_GT(j["tests"][1]["ratio_to_copy"].get<double>(), 0.0) << j["tests"][1];
  for (const auto& t : j["tests"]) EXPECT_GT(t["avg_ts"].get<double>(), 0.0) << t;
}

}  // namespace
}  // namespace kvgate::testing
