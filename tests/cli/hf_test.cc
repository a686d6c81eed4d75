// End-to-end: Hugging Face model directories through the real binary — the tiny fixtures of
// tests/golden/hf, directories damaged in the ways a download goes wrong (exit 2 naming the file
// and the problem), `model synth --format hf`, and the default model's directory
// (scripts/make-hf-default) next to its GGUF in one weights run (skipped, saying so, when the
// directory has not been made).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return std::string(KVGATE_SOURCE_DIR) + "/tests/golden/hf/" + name; }

fs::path home() {
  const char* h = std::getenv("KVGATE_HOME");
  return h && *h ? fs::path(h) : fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/") / ".cache" / "kvgate";
}

// A writable copy of a fixture under the test's scratch path.
std::string copy_fixture(const std::string& name, const std::string& as) {
  const std::string dir = scratch_path("hf", as);
  fs::remove_all(dir);
  fs::copy(fixture(name), dir, fs::copy_options::recursive);
  return dir;
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(HfCli, InfoTokenizeAndGenerate) {
  CliResult r = run_kvgate("model info --json --model " + fixture("qwen3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "hf");
  EXPECT_EQ(j["arch"]["architecture"], "qwen3");
  EXPECT_EQ(j["arch"]["rope_layout"], "halves");
  EXPECT_EQ(j["tensor_types"][0]["type"], "F32");
  r = run_kvgate("model info --model " + fixture("gemma3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "hf (Hugging Face directory, 1 safetensors file(s))");
  EXPECT_HAS(r.out, "BF16");

  const nlohmann::json golden = nlohmann::json::parse(slurp(fixture("qwen2.golden.json")));
  const nlohmann::json& first = golden["tokens"][0];
  r = run_kvgate("tokenize --json --model " + fixture("qwen2") + " --text '" + first["text"].get<std::string>() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["ids"], first["ids"]);

  for (const char* name : {"llama3", "mistral", "gemma3"}) {
    r = run_kvgate(std::string("generate --threads 1 -n 4 --prompt 'The quick brown' --model ") + fixture(name));
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
  }
  // The Gemma fixture's template renders its BOS text: a chat prompt gets it once.
  r = run_kvgate("generate --threads 1 -n 2 --chat --prompt 'hi' --json --model " + fixture("gemma3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

TEST(HfCli, DamagedDirectoriesExit2NamingTheFileAndProblem) {
  {
    const std::string dir = copy_fixture("qwen3", "missing_shard");
    fs::remove(fs::path(dir) / "model-00002-of-00003.safetensors");
    const CliResult r = run_kvgate("model info --model " + dir);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_HAS(r.err, "model.safetensors.index.json: shard 'model-00002-of-00003.safetensors' is missing");
  }
  {
    const std::string dir = copy_fixture("qwen2", "wrong_dtype");
    std::string bytes = slurp(dir + "/model.safetensors");
    bytes.replace(bytes.find("\"BF16\""), 6, "\"U16\" ");
    write_file(dir + "/model.safetensors", bytes);
    const CliResult r = run_kvgate("generate -n 1 --prompt hi --model " + dir);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_HAS(r.err, dir + "/model.safetensors: at byte ");
    EXPECT_HAS(r.err, "has dtype U16; kvgate reads F32, F16 and BF16 weights");
  }
  {
    const std::string dir = copy_fixture("llama3", "unknown_key");
    nlohmann::json config = nlohmann::json::parse(slurp(dir + "/config.json"));
    config["moe_router_bias"] = true;
    write_file(dir + "/config.json", config.dump());
    const CliResult r = run_kvgate("model info --model " + dir);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_HAS(r.err, dir + "/config.json: moe_router_bias: is not a config key kvgate knows for llama");
  }
  {
    const std::string dir = copy_fixture("mistral", "truncated");
    write_file(dir + "/model.safetensors", slurp(dir + "/model.safetensors").substr(0, 64));
    const CliResult r = run_kvgate("model info --model " + dir);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_HAS(r.err, dir + "/model.safetensors: at byte 0: truncated safetensors header");
  }
}

// A directory's chat template runs as written (runtime/jinja.h): the real Llama 3.1 template on
// the Llama 3 fixture; a malformed template and a template's raise_exception exit 2 naming the
// template file, line and column.
TEST(HfCli, ChatTemplatesRunAsWrittenAndBadOnesExit2) {
  const std::string llama = copy_fixture("llama3", "llama31_chat");
  fs::copy_file(fixture("chat/llama3.1-instruct.jinja"), fs::path(llama) / "chat_template.jinja");
  CliResult r = run_kvgate("tokenize --chat --json --model " + llama + " --text 'Name a prime.'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json pieces = nlohmann::json::parse(r.out)["pieces"];
  ASSERT_GT(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], "<|begin_of_text|>");
  EXPECT_EQ(pieces[1], "<|start_header_id|>");
  r = run_kvgate("generate --threads 1 -n 2 --chat --prompt hi --json --model " + llama);
  EXPECT_EQ(r.exit_code, 0) << r.err;

  write_file(llama + "/chat_template.jinja", "{% for m in messages %}\n  {{ m.content }\n{% endfor %}");
  r = run_kvgate("generate -n 1 --chat --prompt hi --model " + llama);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, llama + "/chat_template.jinja:2:16: '}' without its opening bracket (a tag's close is '}}')");

  const std::string mistral = copy_fixture("mistral", "mistral_chat");
  fs::copy_file(fixture("chat/mistral-7b-instruct-v0.3.jinja"), fs::path(mistral) / "chat_template.jinja");
  const std::string messages = scratch_path("hf", "two_users.json");
  write_file(messages, R"([{"role": "user", "content": "one"}, {"role": "user", "content": "two"}])");
  r = run_kvgate("generate -n 1 --messages " + messages + " --model " + mistral);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, mistral + "/chat_template.jinja:");
  EXPECT_HAS(r.err, "raise_exception: After the optional system message, conversation roles must alternate");
}

TEST(HfCli, SynthWritesADirectoryTheRuntimeLoads) {
  const std::string out = scratch_path("hf", "synth");
  CliResult r = run_kvgate("model synth --format hf --shape qwen2.5-7b-layers=1 --weights bf16 --tokenizer " +
                           fixture("qwen2") + " --out " + out + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["format"], "hf");
  r = run_kvgate("model info --json --model " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["synthetic"].get<bool>());
  EXPECT_EQ(j["arch"]["n_embd"], 3584);
  r = run_kvgate("eval --suite smoke --limit 1 --db " + scratch_path("hf", "synth.db") + " --model " + out);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "synthetic");
  r = run_kvgate("model synth --format hf --shape tiny --weights q4_0 --tokenizer " + fixture("qwen2") + " --out " + out);
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

TEST(HfCli, DefaultModelDirectoryBesideItsGguf) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const fs::path dir = home() / "models" / "SmolLM2-135M-Instruct-hf";
  if (!fs::exists(home() / "models" / "SmolLM2-135M-Instruct-hf.golden.json"))
    GTEST_SKIP() << dir << " not made; run scripts/make-hf-default (scripts/test does)";
  // One weights run: the bf16 directory is the reference, the Q4_1 GGUF it was made from a
  // candidate. They share a tokenizer, and the GGUF's logits differ from the directory's only by
  // the bf16 rounding of its dequantized weights (docs/models.md gives the full smoke figures).
  const std::string db = scratch_path("hf", "weights.db");
  const CliResult r = run_kvgate("eval --suite smoke --limit 2 --max-new-tokens 4 --threads 2 --kv f16 --json --db " + db +
                                 " --ref-model hf=" + dir.string() + " --model gguf=" + default_model_file());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  bool found = false;
  for (const auto& c : j["configs"]) {
    if (c["kv"].get<std::string>().rfind("gguf+", 0) != 0) continue;
    found = true;
    EXPECT_LT(c["kld_mean"].get<double>(), 0.01) << c.dump();
    EXPECT_GT(c["same_top1"].get<double>(), 0.9) << c.dump();
  }
  EXPECT_TRUE(found) << r.out;
}

}  // namespace
}  // namespace kvgate::testing
