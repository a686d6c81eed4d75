// Weights as an axis (docs/models.md): the plan of a weights run (harness/eval_plan: models
// crossed with KV specs, labels, the plan text) and the tokenizer check (harness/weights), then,
// end to end on the default model's Q8_0 and Q4_0 variants (scripts/make-weight-variants), one
// run scoring {Q8_0, Q4_0} x {f16, q4_0} against Q8_0 + f16: stored models, the weights x KV
// table of `runs show` and the report, resume, and the gate.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "harness/eval/eval_plan.h"
#include "harness/weights_axis.h"
#include "runtime/model.h"
#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

using harness::ConfigRole;
using harness::EvalPlan;
using harness::PlanFlags;

PlanFlags weights_flags(const std::string& ref_model, const std::string& models, const std::string& kv) {
  PlanFlags f;
  f.suite = "smoke";
  f.ref_model = ref_model;
  f.model = models;
  f.kv = kv;
  return f;
}

std::vector<std::string> specs(const EvalPlan& plan) {
  std::vector<std::string> out;
  for (const auto& c : plan.configs) out.push_back(c.spec);
  return out;
}

std::string usage_error(const PlanFlags& f) {
  try {
    harness::plan_from_flags(f);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no usage error";
  return "";
}

TEST(WeightsPlan, CrossesModelsWithKvSpecsAroundOneReference) {
  const EvalPlan plan = harness::plan_from_flags(weights_flags("/m/a.Q8_0.gguf", "/m/a.Q4_0.gguf", "q4_0"));
  ASSERT_TRUE(plan.weights_run);
  ASSERT_EQ(plan.models.size(), 2u);
  EXPECT_EQ(plan.models[0].label, "a.Q8_0");
  EXPECT_EQ(plan.models[1].path, "/m/a.Q4_0.gguf");
  // A bare q4_0 is canonically rotated as llama.cpp's cache type is (docs/kv-specs.md).
  EXPECT_EQ(specs(plan), (std::vector<std::string>{"a.Q8_0+f16/f16", "a.Q8_0+q4_0:rot=wht/q4_0:rot=wht",
                                                   "a.Q4_0+f16/f16", "a.Q4_0+q4_0:rot=wht/q4_0:rot=wht"}));
  EXPECT_EQ(plan.configs[0].role, ConfigRole::reference);
  for (size_t c = 1; c < plan.configs.size(); ++c) EXPECT_EQ(plan.configs[c].role, ConfigRole::candidate);
  EXPECT_EQ(plan.configs[2].model, 1u);
  EXPECT_EQ(plan.configs[1].kv.canonical(), "q4_0:rot=wht/q4_0:rot=wht");
}

TEST(WeightsPlan, LabelsAndSetsAsAUserWritesThem) {
  // LABEL=PATH; the reference KV spec and the reference model listed again are taken once.
  EvalPlan plan = harness::plan_from_flags(weights_flags("q8=/m/x.gguf", "q4=/m/y.gguf,q8=/m/x.gguf", "f16,q8_0"));
  EXPECT_EQ(specs(plan), (std::vector<std::string>{"q8+f16/f16", "q8+q8_0:rot=wht/q8_0:rot=wht", "q4+f16/f16",
                                                   "q4+q8_0:rot=wht/q8_0:rot=wht"}));
  // Weights only: the reference KV spec for every model.
  plan = harness::plan_from_flags(weights_flags("q8=/m/x.gguf", "q4=/m/y.gguf,q5=/m/z.gguf", "f16"));
  EXPECT_EQ(specs(plan), (std::vector<std::string>{"q8+f16/f16", "q4+f16/f16", "q5+f16/f16"}));
  // A '=' inside a path is not a label.
  EXPECT_EQ(harness::parse_model_arg("/runs/a=b/m.gguf", "--model").label, "m");
  // Plain runs keep their names: the KV spec alone.
  PlanFlags plain;
  plain.suite = "smoke";
  plain.kv = "q4_0";
  plain.model = "/m/x.gguf";
  plan = harness::plan_from_flags(plain);
  EXPECT_FALSE(plan.weights_run);
  EXPECT_EQ(specs(plan), (std::vector<std::string>{"f16/f16", "q4_0:rot=wht/q4_0:rot=wht"}));
  EXPECT_EQ(plan.models.at(0).path, "/m/x.gguf");
}

TEST(WeightsPlan, AmbiguousOrEmptyPlansAreUsageErrors) {
  EXPECT_NE(usage_error(weights_flags("/m/x.gguf", "/n/x.gguf", "q4_0")).find("are both labelled x"), std::string::npos);
  EXPECT_NE(usage_error(weights_flags("/m/x.gguf", "", "f16")).find("no candidate to evaluate"), std::string::npos);
  EXPECT_NE(usage_error(weights_flags("/m/a+b.gguf", "", "q4_0")).find("give one as LABEL=PATH"), std::string::npos);
  PlanFlags two_models;
  two_models.suite = "smoke";
  two_models.kv = "q4_0";
  two_models.model = "/m/x.gguf,/m/y.gguf";
  EXPECT_NE(usage_error(two_models).find("--ref-model"), std::string::npos);
}

// An engine serves the weights it was started with: kvgate cannot put another model under it, so
// a weights run with endpoints is refused, naming both sides, rather than mixing unlike columns.
TEST(WeightsPlan, EndpointsInAWeightsRunAreAUsageError) {
  PlanFlags f = weights_flags("/m/x.gguf", "/m/y.gguf", "q4_0");
  f.endpoints = "q4_0=http://127.0.0.1:1";
  std::string message = usage_error(f);
  EXPECT_NE(message.find("--ref-model"), std::string::npos) << message;
  EXPECT_NE(message.find("--endpoint"), std::string::npos) << message;
  EXPECT_NE(message.find("an engine serves its own weights"), std::string::npos) << message;
  f.endpoints.clear();
  f.ref_endpoint = "q4_0";
  message = usage_error(f);
  EXPECT_NE(message.find("an engine serves its own weights"), std::string::npos) << message;
  // One --model with endpoints stays engine mode's tokenizer model, as before.
  PlanFlags engine;
  engine.suite = "smoke";
  engine.model = "/m/x.gguf";
  engine.endpoints = "q4_0=http://127.0.0.1:1";
  const EvalPlan plan = harness::plan_from_flags(engine);
  EXPECT_FALSE(plan.weights_run);
  EXPECT_TRUE(plan.has_endpoints());
}

TEST(WeightsPlan, ThePlanTextNamesEveryModelByItsDigest) {
  const EvalPlan plan = harness::plan_from_flags(weights_flags("q8=/m/x.gguf", "q4=/m/y.gguf", "q4_0"));
  harness::PlanSettings s{"aaa", 2, 32, "cpu", "0.1.0", "abc", {"aaa", "bbb"}};
  const std::string text = harness::describe_plan(plan, s);
  EXPECT_NE(text.find("model q8 aaa\nmodel q4 bbb\n"), std::string::npos) << text;
  EXPECT_NE(text.find("config candidate q4+q4_0:rot=wht/q4_0:rot=wht\n"), std::string::npos) << text;
  s.weights_sha256[1] = "ccc";
  EXPECT_NE(harness::describe_plan(plan, s), text) << "another candidate file is another plan (shards must not merge)";
  // A plain run's plan text is as before the weights axis existed.
  PlanFlags plain;
  plain.suite = "smoke";
  plain.kv = "q4_0";
  EXPECT_EQ(harness::describe_plan(harness::plan_from_flags(plain), s).find("\nmodel "), std::string::npos);
}

// ---- tokenizer check and end to end on the real default model ----

std::string tiny_model(const std::string& name) {
  return std::string(KVGATE_SOURCE_DIR) + "/tests/golden/tiny_models/" + name;
}

// An endpoint's engine loads its own weights: the table must not pass off the local model's
// size as theirs, nor fit sessions with it.
TEST(WeightsTable, EndpointConfigsShowTheEngineNotTheLocalModel) {
  results::ConfigModel local;
  local.kv_spec = "f16/f16";
  local.label = "SmolLM2";
  local.weight_bytes = 90'000'000;
  local.weight_type = "Q4_1";
  results::StoredConfig ref, served;
  ref.config_id = 1;
  ref.spec = "f16/f16";
  ref.role = results::ConfigRole::reference;
  ref.kv_bytes_per_token = 23040;
  ref.model = local;
  served = ref;
  served.config_id = 2;
  served.spec = harness::endpoint_spec("vllm", kernels::parse_kv_config("fp8_e4m3"));
  served.role = results::ConfigRole::candidate;
  served.kv_bytes_per_token = 11520;
  const harness::GpuBudget budget = harness::gpu_budget("H100", 0, 0.9, 4096);
  results::StoredRun run;
  run.configs = {ref, served};
  const auto rows = harness::weights_kv_rows(run, budget, 123e6);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].weight_bytes, 90e6);
  EXPECT_GT(rows[0].sessions, 0);
  EXPECT_EQ(rows[1].weight_type, "engine");
  EXPECT_TRUE(std::isnan(rows[1].weight_bytes));
  EXPECT_EQ(rows[1].sessions, -1);
  const harness::WeightsKvTable table = harness::weights_kv_table(rows);
  EXPECT_EQ(table.rows[1][1], "engine");
  EXPECT_EQ(table.rows[1][7], "-");   // weights MB
  EXPECT_EQ(table.rows[1][10], "-");  // sessions
}

TEST(WeightsTokenizer, TheFingerprintSeparatesVocabulariesAndTheCheckNamesBothFiles) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const auto smol = runtime::Model::load(default_model_file());
  const auto tiny = runtime::Model::load(tiny_model("tiny-qwen2.gguf"));
  EXPECT_EQ(harness::tokenizer_fingerprint(smol->files()), harness::tokenizer_fingerprint(smol->files()));
  EXPECT_NE(harness::tokenizer_fingerprint(smol->files()), harness::tokenizer_fingerprint(tiny->files()));
  EXPECT_NO_THROW(harness::check_same_tokenizer(*smol, *smol));
  try {
    harness::check_same_tokenizer(*smol, *tiny);
    ADD_FAILURE() << "different tokenizers accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    const std::string m = e.what();
    EXPECT_NE(m.find(default_model_file()), std::string::npos) << m;
    EXPECT_NE(m.find("tiny-qwen2.gguf"), std::string::npos) << m;
    EXPECT_NE(m.find("different tokenizers"), std::string::npos) << m;
  }
}

std::string temp(const std::string& name) {
  return scratch_path("weights", name);
}

// The variants' paths (Q8_0, Q4_0) from the project's script; empty with `why` set when no
// venv can be made here (its exit 4), the only case the tests skip.
std::vector<std::string> weight_variants(std::string& why) {
  const std::string out = temp("variants.out"), err = temp("variants.err");
  const std::string cmd = std::string(KVGATE_SOURCE_DIR) + "/scripts/make-weight-variants >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::vector<std::string> paths;
  if (code == 4) {
    why = slurp(err);
    return paths;
  }
  EXPECT_EQ(code, 0) << slurp(err);
  std::istringstream lines(slurp(out));
  for (std::string line; std::getline(lines, line);) paths.push_back(line);
  EXPECT_EQ(paths.size(), 2u) << slurp(out);
  return paths;
}

nlohmann::json run_json(const std::string& args, int expected_exit = 0) {
  const CliResult r = run_kvgate(args + " --json");
  EXPECT_EQ(r.exit_code, expected_exit) << args << "\n" << r.err;
  return r.out.empty() ? nlohmann::json::object() : nlohmann::json::parse(r.out);
}

TEST(WeightsEndToEnd, OneRunScoresWeightsTimesKvAgainstOneReference) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  std::string why;
  const std::vector<std::string> variants = weight_variants(why);
  if (!why.empty()) GTEST_SKIP() << "scripts/make-weight-variants could not make its venv: " << why;
  ASSERT_EQ(variants.size(), 2u);
  const std::string db = temp("run.db");
  std::remove(db.c_str());
  const std::string models = "--ref-model q8=" + variants[0] + " --model q4=" + variants[1];
  const std::string common = "--suite smoke --max-new-tokens 2 --threads 2 --db " + db;

  // One item first, then the run resumed to two: the resumed plan rebuilds the same configs on
  // the same models. (The summary of `eval` covers the item run now; `runs show` both.)
  nlohmann::json first = run_json("eval " + common + " --limit 1 --kv q4_0 " + models);
  ASSERT_EQ(first["configs"].size(), 4u) << first.dump();
  const int64_t run = first["run"].get<int64_t>();
  const nlohmann::json j = run_json("eval --resume " + std::to_string(run) + " --limit 2 --db " + db +
                                    " --max-new-tokens 2 --threads 2");
  EXPECT_EQ(j["run"], run);
  EXPECT_EQ(j["items_run"], 1);
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& c : j["configs"]) by_name[c["kv"].get<std::string>()] = c;
  ASSERT_EQ(by_name.size(), 4u) << j.dump();
  EXPECT_TRUE(by_name.at("q8+f16/f16")["reference"].get<bool>());
  EXPECT_EQ(by_name.at("q8+f16/f16")["kld_mean"].get<double>(), 0.0);
  const double weights_only = by_name.at("q4+f16/f16")["kld_mean"].get<double>();
  const double kv_only = by_name.at("q8+q4_0:rot=wht/q4_0:rot=wht")["kld_mean"].get<double>();
  const double both = by_name.at("q4+q4_0:rot=wht/q4_0:rot=wht")["kld_mean"].get<double>();
  EXPECT_GT(weights_only, 0.0);
  EXPECT_GT(kv_only, 0.0);
  EXPECT_GT(both, std::max(weights_only, kv_only)) << "two losses together exceed either alone";
  EXPECT_EQ(by_name.at("q4+q4_0:rot=wht/q4_0:rot=wht")["weights"], "q4");
  EXPECT_EQ(by_name.at("q4+q4_0:rot=wht/q4_0:rot=wht")["kv_spec"], "q4_0:rot=wht/q4_0:rot=wht");

  // The store holds each config's model; the table puts loss beside memory.
  const nlohmann::json shown = run_json("runs show " + std::to_string(run) + " --db " + db + " --gpu H200 --context 8192");
  std::map<std::string, nlohmann::json> model_of;
  for (const auto& c : shown["configs"]) model_of[c["spec"].get<std::string>()] = c["model"];
  ASSERT_TRUE(model_of.at("q4+f16/f16").is_object()) << shown.dump();
  EXPECT_EQ(model_of.at("q4+f16/f16")["weight_type"], "Q4_0");
  EXPECT_EQ(model_of.at("q8+q4_0:rot=wht/q4_0:rot=wht")["weight_type"], "Q8_0");
  EXPECT_EQ(model_of.at("q8+q4_0:rot=wht/q4_0:rot=wht")["path"], variants[0]);
  EXPECT_EQ(model_of.at("q4+f16/f16")["sha256"].get<std::string>().size(), 64u);
  EXPECT_NE(model_of.at("q4+f16/f16")["sha256"], model_of.at("q8+f16/f16")["sha256"]);
  const nlohmann::json& table = shown["weights_kv"];
  EXPECT_EQ(table["gpu"], "H200");
  EXPECT_EQ(table["context"], 8192);
  std::map<std::string, nlohmann::json> row;
  for (const auto& r : table["rows"]) row[r["spec"].get<std::string>()] = r;
  ASSERT_EQ(row.size(), 4u);
  EXPECT_GT(row.at("q4+q4_0:rot=wht/q4_0:rot=wht")["kld_mean"].get<double>(),
            row.at("q4+f16/f16")["kld_mean"].get<double>());
  EXPECT_LT(row.at("q4+f16/f16")["weight_bytes"].get<double>(), row.at("q8+f16/f16")["weight_bytes"].get<double>());
  EXPECT_LT(row.at("q8+q4_0:rot=wht/q4_0:rot=wht")["kv_bytes_per_token"].get<double>(),
            row.at("q8+f16/f16")["kv_bytes_per_token"].get<double>());
  // The delta under the metric's one name (gold_accuracy); null where the run has no gold answer.
  EXPECT_TRUE(row.at("q8+f16/f16").contains("gold_accuracy_delta")) << row.at("q8+f16/f16").dump();
  EXPECT_FALSE(row.at("q8+f16/f16").contains("accuracy_delta")) << row.at("q8+f16/f16").dump();
  EXPECT_EQ(row.at("q8+f16/f16")["kv_bytes_per_session"].get<double>(),
            row.at("q8+f16/f16")["kv_bytes_per_token"].get<double>() * 8192);
  // For a 135M model the memory wall is the KV cache: 4-bit KV fits about 3.5x the sessions,
  // 4-bit weights barely any more.
  const int64_t f16_sessions = row.at("q8+f16/f16")["sessions"].get<int64_t>();
  EXPECT_GT(row.at("q8+q4_0:rot=wht/q4_0:rot=wht")["sessions"].get<int64_t>(), 3 * f16_sessions);
  EXPECT_GE(row.at("q4+f16/f16")["sessions"].get<int64_t>(), f16_sessions);
  const CliResult text = run_kvgate("runs show " + std::to_string(run) + " --db " + db);
  EXPECT_NE(text.out.find("weights x KV: quality against the reference, memory on H100 (80 GB x 0.90), sessions of 4,096 tokens"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("q4+q4_0: mean KLD"), std::string::npos) << "the per-axis attribution line, as typed";

  const std::string md = temp("report.md");
  EXPECT_EQ(run_kvgate("report --db " + db + " --md " + md + " --gpu MI300X").exit_code, 0);
  EXPECT_NE(slurp(md).find("## Weights x KV"), std::string::npos);
  EXPECT_NE(slurp(md).find("memory on MI300X"), std::string::npos);
  const std::string html = temp("report.html");
  EXPECT_EQ(run_kvgate("report --db " + db + " --html " + html + " --gpu MI300X").exit_code, 0);
  EXPECT_NE(slurp(html).find("<h2>Weights x KV</h2>"), std::string::npos);

  // Gates take these configs as any others: a run against itself passes.
  const CliResult gate = run_kvgate("gate --db " + db + " --baseline " + std::to_string(run) + " --candidate " +
                                    std::to_string(run) + " --policy " + KVGATE_SOURCE_DIR + "/ci/gates/default.json");
  EXPECT_EQ(gate.exit_code, 0) << gate.out << gate.err;
  std::remove(md.c_str());
  std::remove(db.c_str());
  EXPECT_REPORT_RENDERS(html);
}

TEST(WeightsEndToEnd, AWeightsRunWithEndpointsExitsTwoBeforeAnything) {
  // No model, no server: the plan is refused before either is touched, for eval and load replay.
  const std::string db = temp("endpoints.db"), trace = temp("shape.jsonl");
  std::remove(db.c_str());
  {
    std::ofstream out(trace);
    out << R"({"timestamp_ms": 0, "input_tokens": 40, "output_tokens": 3, "block_tokens": 16, "hash_ids": [1, 2, 3]})"
        << "\n";
  }
  for (const std::string& command : {std::string("eval --suite smoke --kv q4_0"), "replay --trace " + trace}) {
    const CliResult r = run_kvgate(command + " --db " + db +
                                   " --ref-model /nonexistent/a.gguf --model /nonexistent/b.gguf"
                                   " --endpoint q4_0=http://127.0.0.1:1");
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.err;
    EXPECT_NE(r.err.find("an engine serves its own weights"), std::string::npos) << command << "\n" << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(db)) << "rejected input leaves no results database behind";
  std::remove(trace.c_str());
  std::remove(db.c_str());
}

TEST(WeightsEndToEnd, ModelsWithAnotherTokenizerAreRefusedBeforeAnyRun) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string db = temp("refused.db");
  std::remove(db.c_str());
  const CliResult r = run_kvgate("eval --suite smoke --limit 1 --kv q4_0 --db " + db + " --ref-model " +
                                 default_model_file() + " --model " + tiny_model("tiny-qwen2.gguf"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("different tokenizers"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(default_model_file()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tiny-qwen2.gguf"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(db)) << "rejected input leaves no results database behind";
  std::remove(db.c_str());
}

}  // namespace
}  // namespace kvgate::testing
