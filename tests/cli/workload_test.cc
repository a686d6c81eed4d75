#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"
#include "tests/runtime/gguf_writer.h"
#include "tests/workloads/mooncake_traces.h"

namespace kvgate::testing {
namespace {

using nlohmann::json;

std::string temp_file(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "kvgate_wl_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

json parse_out(const CliResult& r) {
  json j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j;
}

// `profile` on a Mooncake-format trace, as JSON and as text; returns the JSON.
json expect_mooncake_profile(const std::string& path) {
  const CliResult r = run_kvgate("profile --trace " + path + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const json j = parse_out(r);
  EXPECT_EQ(j["format"], "mooncake");
  EXPECT_TRUE(j["sessions"].is_null());
  const double share = j["summary"]["reusable_prefix_share"].get<double>();
  EXPECT_GT(share, 0.0);
  EXPECT_LT(share, 1.0);
  EXPECT_EQ(j["prefix_reuse"]["block_tokens"], 512);

  const CliResult text = run_kvgate("profile --trace " + path);
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("p95 prompt tokens"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("reusable prefix share"), std::string::npos) << text.out;
  return j;
}

TEST(WorkloadCli, ProfileOfTheMooncakeSample) {
  const json j = expect_mooncake_profile(kMooncakeSample);
  EXPECT_EQ(j["requests"], 209);
  EXPECT_EQ(std::lround(j["prompt_tokens"]["mean"].get<double>()), 6273);
  EXPECT_EQ(std::lround(j["output_tokens"]["mean"].get<double>()), 249);
}

TEST(WorkloadCli, ProfileOfTheMooncakeTrace) {
  if (!have_real_mooncake()) GTEST_SKIP() << real_mooncake_absent("`kvgate profile`");
  const json j = expect_mooncake_profile(kMooncakeReal);
  EXPECT_EQ(j["requests"], 12031);
  EXPECT_EQ(std::lround(j["prompt_tokens"]["mean"].get<double>()), 12035);
  EXPECT_EQ(std::lround(j["output_tokens"]["mean"].get<double>()), 343);
}

TEST(WorkloadCli, BadRowsAbortWithFileAndLineOrAreSkippedAndCounted) {
  const std::string path = temp_file("bad.jsonl",
                                     "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n"
                                     "{\"timestamp\": 5, \"input_length\": \"ten\", \"output_length\": 2}\n"
                                     "{\"timestamp\": 9, \"input_length\": 20, \"output_length\": 2, \"hash_ids\": [1]}\n");
  const CliResult abort = run_kvgate("profile --trace " + path);
  EXPECT_EQ(abort.exit_code, 2);
  EXPECT_NE(abort.err.find(path + ":2:"), std::string::npos) << abort.err;
  EXPECT_EQ(abort.err.find('\n'), abort.err.size() - 1) << "one line: " << abort.err;

  const CliResult skip = run_kvgate("profile --trace " + path + " --bad-rows skip --json");
  ASSERT_EQ(skip.exit_code, 0) << skip.err;
  const json j = parse_out(skip);
  EXPECT_EQ(j["requests"], 2);
  EXPECT_EQ(j["bad_rows_skipped"], 1);

  EXPECT_EQ(run_kvgate("profile --trace " + path + " --bad-rows maybe").exit_code, 2);
  EXPECT_EQ(run_kvgate("profile --trace /nonexistent.jsonl").exit_code, 2);
  EXPECT_EQ(run_kvgate("profile --trace " + path + " --format azure").exit_code, 2);
  std::remove(path.c_str());
}

TEST(WorkloadCli, GenerateIsDeterministicAndProfilesAsSessions) {
  const std::string a = ::testing::TempDir() + "kvgate_wl_gen_a.jsonl";
  const std::string b = ::testing::TempDir() + "kvgate_wl_gen_b.jsonl";
  const std::string flags = " --sessions 12 --concurrency 4 --rounds 3 --seed 5";
  ASSERT_EQ(run_kvgate("workload generate --out " + a + flags).exit_code, 0);
  const CliResult rb = run_kvgate("workload generate --out " + b + flags + " --json");
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(parse_out(rb)["requests"], 36);
  EXPECT_EQ(slurp(a), slurp(b));

  const CliResult p = run_kvgate("profile --trace " + a + " --json");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const json j = parse_out(p);
  EXPECT_EQ(j["format"], "kvgate");
  EXPECT_EQ(j["sessions"], 12);
  EXPECT_DOUBLE_EQ(j["summary"]["turns_per_user"].get<double>(), 3.0);
  EXPECT_EQ(run_kvgate("workload generate --out " + a + " --sessions 0").exit_code, 2);
  std::remove(a.c_str());
  std::remove(b.c_str());
}

TEST(WorkloadCli, CapacityReportsEveryConfigAndUsageErrors) {
  const std::string trace = ::testing::TempDir() + "kvgate_wl_cap.jsonl";
  ASSERT_EQ(run_kvgate("workload generate --out " + trace + " --sessions 8 --concurrency 4 --rounds 2").exit_code, 0);
  const CliResult r = run_kvgate("capacity --trace " + trace +
                                 " --model-arch Llama-3.1-8B --gpu H100 --kv f16,bf16,f32 --kv-overhead f32=1.5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = parse_out(r);
  ASSERT_EQ(j["configs"].size(), 3u);
  // Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K + V) x 2 bytes.
  EXPECT_DOUBLE_EQ(j["configs"][0]["kv_bytes_per_token"].get<double>(), 131072.0);
  EXPECT_DOUBLE_EQ(j["configs"][2]["kv_bytes_per_token"].get<double>(), 262144.0);
  EXPECT_DOUBLE_EQ(j["configs"][2]["overhead_factor"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["model"]["weight_bytes"].get<double>(), 8.03e9 * 2);
  for (const auto& c : j["configs"]) {
    EXPECT_EQ(c["completed"], 16);
    EXPECT_TRUE(c["verdict"] == "weight-bound" || c["verdict"] == "KV-bound" || c["verdict"] == "compute-bound");
  }
  const CliResult text = run_kvgate("capacity --trace " + trace + " --kv f16 --model-arch Qwen2.5-7B --weight-dtype q4_0");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Qwen2.5-7B"), std::string::npos) << text.out;

  EXPECT_EQ(run_kvgate("capacity --trace " + trace + " --gpu B9000").exit_code, 2);
  EXPECT_EQ(run_kvgate("capacity --trace " + trace + " --model-arch GPT-5").exit_code, 2);
  EXPECT_EQ(run_kvgate("capacity --trace " + trace + " --kv nosuchformat").exit_code, 2);
  EXPECT_EQ(run_kvgate("capacity --trace " + trace + " --mem-util 1.5").exit_code, 2);
  EXPECT_EQ(run_kvgate("capacity --trace " + trace + " --kv-overhead f16").exit_code, 2);
  EXPECT_EQ(run_kvgate("capacity --trace " + trace + " --model-arch /nonexistent/model.gguf").exit_code, 2);
  std::remove(trace.c_str());
}

TEST(WorkloadCli, OverheadFactorsComeFromAFileAndMatchSpecsByMeaning) {
  const std::string trace = temp_file("ovh.jsonl", "{\"timestamp_ms\": 0, \"input_tokens\": 500, \"output_tokens\": 50}\n");
  const std::string factors = temp_file("ovh.json", "{\"fp8_e4m3\": 2.0, \"tq4/4\": 1.25}");
  const CliResult r = run_kvgate("capacity --trace " + trace + " --kv fp8,tq4/4,f16 --kv-overhead-file " + factors + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = parse_out(r);
  EXPECT_DOUBLE_EQ(j["configs"][0]["overhead_factor"].get<double>(), 2.0);  // `fp8` is fp8_e4m3
  EXPECT_DOUBLE_EQ(j["configs"][1]["overhead_factor"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(j["configs"][2]["overhead_factor"].get<double>(), 1.0);

  const std::string broken = temp_file("broken.json", "{\"fp8\": \"fast\"}");
  const CliResult bad = run_kvgate("capacity --trace " + trace + " --kv fp8 --kv-overhead-file " + broken);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find(broken), std::string::npos) << bad.err;
  EXPECT_EQ(run_kvgate("capacity --trace " + trace + " --kv fp8 --kv-overhead fp8=-1").exit_code, 2);
  for (const auto& p : {trace, factors, broken}) std::remove(p.c_str());
}

TEST(WorkloadCli, CapacityReadsTheModelShapeFromAGgufFile) {
  GgufWriter w;
  add_tiny_llama_metadata(w);  // 2 layers, 4 heads, 2 KV heads, embedding 32: head_dim 8
  const uint64_t weight_bytes = add_tiny_llama_tensors(w);
  const std::vector<uint8_t> bytes = w.finish();
  const std::string model = ::testing::TempDir() + "kvgate_wl_tiny_" + std::to_string(::getpid()) + ".gguf";
  write_file(model, bytes);
  const std::string trace = temp_file("one.jsonl", "{\"timestamp_ms\": 0, \"input_tokens\": 50, \"output_tokens\": 4}\n");

  const CliResult r = run_kvgate("capacity --trace " + trace + " --model-arch " + model + " --kv f16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = parse_out(r);
  EXPECT_EQ(j["model"]["name"], "tiny");
  EXPECT_EQ(j["model"]["layers"], 2);
  EXPECT_EQ(j["model"]["kv_heads"], 2);
  EXPECT_EQ(j["model"]["head_dim"], 8);
  EXPECT_DOUBLE_EQ(j["model"]["params"].get<double>(), static_cast<double>(weight_bytes / 4));  // all F32
  EXPECT_DOUBLE_EQ(j["model"]["weight_bytes"].get<double>(), static_cast<double>(weight_bytes));
  // 2 layers x 2 KV heads x 8 x (K + V) x 2 bytes.
  EXPECT_DOUBLE_EQ(j["configs"][0]["kv_bytes_per_token"].get<double>(), 128.0);
  EXPECT_EQ(j["configs"][0]["completed"], 1);

  write_file(model, std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  const CliResult truncated = run_kvgate("capacity --trace " + trace + " --model-arch " + model + " --kv f16");
  EXPECT_EQ(truncated.exit_code, 2) << truncated.err;
  EXPECT_NE(truncated.err.find(model), std::string::npos) << truncated.err;
  std::remove(model.c_str());
  std::remove(trace.c_str());
}

// The documented example (docs/workloads.md), after AMD's ROCm TurboQuant study: 100 agentic
// conversations, 32 concurrent, Llama-3.1-70B on one MI300X. FP8's cache cannot keep the 32
// sessions resident; TurboQuant tq4/4 (3.8x smaller than f16) can.
TEST(WorkloadCli, CapacityShowsTheResidencyCliff) {
  const std::string trace = ::testing::TempDir() + "kvgate_wl_cliff.jsonl";
  ASSERT_EQ(run_kvgate("workload generate --out " + trace +
                       " --sessions 100 --concurrency 32 --rounds 6 --system-tokens 2000"
                       " --session-prefix-tokens 4500 --input-tokens 600 --output-tokens 200"
                       " --round-interval-s 30 --seed 7")
                .exit_code,
            0);
  const CliResult r = run_kvgate("capacity --trace " + trace + " --model-arch Llama-3.1-70B --gpu MI300X --kv fp8,tq4/4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = parse_out(r);
  const json& fp8 = j["configs"][0];
  const json& tq = j["configs"][1];
  EXPECT_NEAR(fp8["kv_bytes_per_token"].get<double>() / tq["kv_bytes_per_token"].get<double>(), 1.9, 0.1);
  EXPECT_LT(fp8["prefix_hit_rate"].get<double>(), 0.5);
  EXPECT_GT(tq["prefix_hit_rate"].get<double>(), 0.8);
  EXPECT_GT(fp8["ttft_s"]["p50"].get<double>(), 2.0);
  EXPECT_LT(tq["ttft_s"]["p50"].get<double>(), 1.0);
  EXPECT_EQ(tq["recomputed_tokens"], 0);
  EXPECT_GT(fp8["recomputed_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(fp8["verdict"], "KV-bound");
  std::remove(trace.c_str());
}

}  // namespace
}  // namespace kvgate::testing
