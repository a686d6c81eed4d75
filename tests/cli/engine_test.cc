// End-to-end engine mode: kvgate eval / replay against serving endpoints. The fault cases use
// the fake server (tests/serving/fake_server.h: garbage, a stalled or closed stream, a server
// that refuses); everything else runs a real llama-server (llama.cpp b11434) with the default
// model, one with an f16 cache and one with -ctk q4_0 -ctv q4_0 -fa on.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "results/store.h"
#include "tests/cli/llama_server.h"
#include "tests/cli/run_cli.h"
#include "tests/serving/fake_server.h"

namespace kvgate::testing {
namespace {

std::string temp(const std::string& name) {
  return scratch_path("engine", name);
}

// n generated items of each domain; small, so a CPU server scores them in seconds.
std::string evalset(const std::string& name, int n) {
  const std::string p = temp(name + ".jsonl");
  std::remove(p.c_str());
  for (const char* domain : {"tables", "korean"}) {
    const std::string part = temp(name + "_" + domain + ".jsonl");
    CliResult r = run_kvgate(std::string("evalset generate --domain ") + domain + " --seed 7 --n " + std::to_string(n) +
                             " --tokens-min 120 --tokens-max 200 --out " + part);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::system(("cat " + part + " >> " + p).c_str());
  }
  return p;
}

const std::string& small_evalset() {
  static const std::string path = evalset("small", 1);
  return path;
}

std::string fresh_db(const std::string& name) {
  const std::string db = temp(name);
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((db + suffix).c_str());
  return db;
}

// ---- usage ----

TEST(EngineUsageCli, BadFlagsAreExit2AndAnUnreachableEndpointExit3) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string db = fresh_db("usage.db"), items = " --evalset " + small_evalset() + " --db " + db;
  struct Case {
    std::string args, words;
  };
  for (const Case& c : std::vector<Case>{
           {"--ref-endpoint f16", "--ref-endpoint needs --endpoint"},
           {"--endpoint f16=ftp://x", "http"},
           {"--endpoint f16=http://127.0.0.1:9 --top-k 0", "--top-k"},
           {"--endpoint f16=http://127.0.0.1:9 --ref-endpoint f16 --ref f16", "not both"},
           {"--endpoint f16=http://127.0.0.1:9 --ref-endpoint q8_0", "no endpoint of that name"},
           {"--endpoint f16=http://127.0.0.1:9 --endpoints x.json", "not both"}}) {
    CliResult r = run_kvgate("eval" + items + " " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.words), std::string::npos) << c.args << "\n" << r.err;
  }
  // Port 9 (discard) refuses: discovery fails before any run is written.
  CliResult r = run_kvgate("eval" + items + " --endpoint q8_0=http://127.0.0.1:9");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("endpoint 'q8_0' (http://127.0.0.1:9"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("while discovering"), std::string::npos) << r.err;
  EXPECT_TRUE(results::Store::open(db).list_runs().empty());
}

// ---- faults, on the fake server ----

struct FaultCase {
  Fault fault;
  const char* failure;  // what the item failure records
  const char* words;    // what the message says
};

class EngineFaultCli : public ::testing::TestWithParam<FaultCase> {};

// Every generation and scoring request misbehaves; discovery works. Each item is recorded as
// failed on the endpoint (no metrics written), the run stays resumable, and the command exits 3
// naming the endpoint.
TEST_P(EngineFaultCli, FailedItemsAreRecordedAndTheCommandExits3) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  FakeServerOptions o;
  o.personality = Personality::llama_server;
  o.fault_get_requests = false;
  o.stall_ms = 20'000;
  FakeServer server(o);
  server.set_default_fault(GetParam().fault);
  const std::string eps = temp("faults.json"), db = fresh_db("faults.db");
  std::ofstream(eps) << R"({"endpoints": [{"name": "f16", "url": ")" << server.url()
                     << R"(", "engine": "llama-server"}, {"name": "q8_0", "url": ")" << server.url()
                     << R"(", "engine": "llama-server", "stall_timeout_s": 1}]})";
  CliResult r = run_kvgate("eval --evalset " + small_evalset() + " --endpoints " + eps +
                           " --ref-endpoint q8_0 --max-new-tokens 4 --db " + db);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("endpoint 'q8_0' (" + server.url()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(GetParam().words), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--resume"), std::string::npos) << r.err;
  results::Store store = results::Store::open(db, results::Store::Mode::existing);
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, kvgate::results::RunStatus::interrupted);
  EXPECT_EQ(runs[0].items, 0) << "a failed item writes no metrics";
  const auto failures = store.item_failures(runs[0].id);
  ASSERT_EQ(failures.size(), 2u);
  for (const auto& f : failures) {
    EXPECT_EQ(f.endpoint, "q8_0");
    EXPECT_EQ(f.failure, GetParam().failure);
  }
  CliResult show = run_kvgate("runs show latest --db " + db);
  EXPECT_NE(show.out.find("failed items (2"), std::string::npos) << show.out;
}

INSTANTIATE_TEST_SUITE_P(Faults, EngineFaultCli,
                         ::testing::Values(FaultCase{Fault::garbage_body, "consumer", "invalid response"},
                                           FaultCase{Fault::stall_mid_stream, "stall", "the stream stalled"},
                                           FaultCase{Fault::close_mid_stream, "broken", "the connection failed after"}),
                         [](const auto& info) {
                           return std::string(info.param.failure);
                         });

// A server that refuses every answer stops the run at the first item (retries exhausted);
// once it answers again, --resume finishes the run and clears the failure.
TEST(EngineFaultResumeCli, RefusedRunStopsAndResumes) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  FakeServerOptions o;
  o.personality = Personality::llama_server;
  o.fault_get_requests = false;
  FakeServer server(o);
  server.set_default_fault(Fault::close_before_response);
  const std::string db = fresh_db("refused.db");
  const std::string endpoints = "--endpoint f16=" + server.url() + ",q8_0=" + server.url() + " --ref-endpoint f16";
  CliResult r = run_kvgate("eval --evalset " + small_evalset() + " " + endpoints + " --max-new-tokens 4 --db " + db);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("the run stopped"), std::string::npos) << r.err;
  int64_t run_id = 0;
  {
    results::Store store = results::Store::open(db, results::Store::Mode::existing);
    const auto runs = store.list_runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].status, kvgate::results::RunStatus::failed);
    run_id = runs[0].id;
    ASSERT_EQ(store.item_failures(run_id).size(), 1u) << "the run stops at the first refused item";
    EXPECT_EQ(store.item_failures(run_id)[0].failure, "connect");
  }
  server.set_default_fault(Fault::none);
  CliResult resumed = run_kvgate("eval --resume " + std::to_string(run_id) + " --json --db " + db);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto j = nlohmann::json::parse(resumed.out);
  EXPECT_EQ(j["items_run"], 2);
  results::Store store = results::Store::open(db, results::Store::Mode::existing);
  EXPECT_EQ(store.find_run(run_id)->status, kvgate::results::RunStatus::complete);
  EXPECT_TRUE(store.item_failures(run_id).empty());
  // Both names serve the same fake distributions: the estimator sees no change.
  for (const auto& c : j["configs"]) EXPECT_EQ(c["kld_mean"].get<double>(), 0.0) << c.dump();
}

// A load replay's prompts follow the trace: traced lengths, the same block id the same tokens
// (a shared chain of ids is a shared prefix), the traced output length with EOS ignored, in
// arrival order.
TEST(EngineLoadFakeCli, PromptsFollowTheTracedBlocks) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  FakeServer server(FakeServerOptions{});  // vLLM
  const std::string trace = temp("blocks.jsonl"), db = fresh_db("blocks.db");
  {
    std::ofstream out(trace);
    auto row = [&](double t, int input, std::vector<int> ids) {
      out << nlohmann::json{{"timestamp_ms", t}, {"input_tokens", input}, {"output_tokens", 3}, {"block_tokens", 16},
                            {"hash_ids", ids}}
                 .dump()
          << "\n";
    };
    row(0, 40, {1, 2, 3});
    row(100, 48, {1, 2, 4});
    row(200, 10, {5});
    row(300, 20, {2, 6});
  }
  CliResult r = run_kvgate("replay --trace " + trace + " --endpoint f16=" + server.url() + " --json --db " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::vector<int32_t>> prompts;
  for (const RecordedRequest& q : server.requests()) {
    if (q.method != "POST") continue;
    const auto b = nlohmann::json::parse(q.body);
    EXPECT_EQ(b["max_tokens"], 3);
    EXPECT_EQ(b["ignore_eos"], true);
    prompts.push_back(b["prompt"].get<std::vector<int32_t>>());
  }
  ASSERT_EQ(prompts.size(), 4u);
  EXPECT_EQ(prompts[0].size(), 40u);
  EXPECT_EQ(prompts[1].size(), 48u);
  EXPECT_EQ(prompts[2].size(), 10u);
  EXPECT_EQ(prompts[3].size(), 20u);
  auto part = [](const std::vector<int32_t>& p, size_t from, size_t n) { return std::vector<int32_t>(p.begin() + from, p.begin() + from + n); };
  EXPECT_EQ(part(prompts[0], 0, 32), part(prompts[1], 0, 32)) << "blocks 1, 2 shared";
  EXPECT_NE(part(prompts[0], 32, 8), part(prompts[1], 32, 8)) << "block 3 is not block 4";
  EXPECT_EQ(part(prompts[3], 0, 16), part(prompts[0], 16, 16)) << "block 2 is the same tokens wherever it stands";
  EXPECT_NE(part(prompts[2], 0, 10), part(prompts[0], 0, 10));
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["load_replay"]["configs"][0]["measured"]["succeeded"], 4);
  EXPECT_EQ(j["load_replay"]["requests"], 4);
}

// ---- what the engines report and are sent, on the fake in their layouts (issue 39) ----

bool db_has_runs(const std::string& db) {
  if (!std::ifstream(db).good()) return false;
  return !results::Store::open(db, results::Store::Mode::existing).list_runs().empty();
}

// A server started without its --kv-cache-dtype behind fp8=URL: the engine says "auto", the name
// says fp8, and the run would label bf16 rows fp8. Exit 2 before anything is sent or written.
TEST(EngineReportsCli, AKvConfigTheEngineContradictsIsExit2BeforeAnyItem) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  for (Personality who : {Personality::vllm, Personality::sglang}) {
    FakeServerOptions o;
    o.personality = who;  // kv_cache_dtype "auto", both engines' default
    FakeServer server(o);
    const std::string db = fresh_db("contradiction.db");
    CliResult r = run_kvgate("eval --evalset " + small_evalset() + " --endpoint f16=" + server.url() + ",fp8=" +
                             server.url() + " --ref-endpoint f16 --max-new-tokens 4 --db " + db);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("endpoint 'fp8' (" + server.url() + ") runs fp8_e4m3/fp8_e4m3 by its name"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("kv cache dtype 'auto'"), std::string::npos) << r.err;
    EXPECT_FALSE(db_has_runs(db));
    for (const RecordedRequest& q : server.requests()) EXPECT_EQ(q.method == "POST" && q.path != "/tokenize", false) << q.path;
  }
}

// SGLang end to end in its own layouts: spans scored from the row after the one it leaves
// unscored (every item failed before), discovery on /server_info, greedy requests pinned and
// without logprobs, the KV label the engine's "auto" as the model's dtype.
TEST(EngineReportsCli, SglangRunsEndToEnd) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  FakeServerOptions o;
  o.personality = Personality::sglang;
  o.model_dtype = "bfloat16";
  FakeServer server(o);
  const std::string db = fresh_db("sglang.db");
  CliResult r = run_kvgate("eval --evalset " + small_evalset() + " --endpoint ref=" + server.url() + ",bf16=" +
                           server.url() + " --ref-endpoint ref --max-new-tokens 4 --json --db " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["items_run"], 2);
  for (const auto& c : j["configs"]) EXPECT_EQ(c["kld_mean"].get<double>(), 0.0) << c.dump();
  int scoring = 0, greedy = 0;
  std::set<std::string> paths;
  for (const RecordedRequest& q : server.requests()) {
    paths.insert(q.method + " " + q.path);
    if (q.path != "/generate") continue;
    const auto b = nlohmann::json::parse(q.body);
    EXPECT_EQ(b["sampling_params"]["repetition_penalty"], 1) << q.body;
    EXPECT_EQ(b["sampling_params"]["temperature"], 0) << q.body;
    if (b.value("return_logprob", false)) {
      ++scoring;
      EXPECT_GE(b["logprob_start_len"].get<int64_t>(), 0);
    } else {
      ++greedy;
      EXPECT_FALSE(b.contains("top_logprobs_num")) << "nothing reads a greedy answer's top-k lists";
    }
  }
  EXPECT_GT(scoring, 0);
  EXPECT_GT(greedy, 0);
  EXPECT_TRUE(paths.count("GET /server_info"));
  EXPECT_FALSE(paths.count("GET /get_server_info")) << "the deprecated alias warns on every call";
  results::Store store = results::Store::open(db, results::Store::Mode::existing);
  for (const auto& e : store.config_endpoints(j["run"].get<int64_t>())) {
    EXPECT_EQ(e.kv, "bf16/bf16") << e.name;
    EXPECT_EQ(e.kv_source, e.name == "ref" ? "engine" : "name") << "ref: the engine named the model's dtype";
    EXPECT_EQ(e.kv_reported, "auto: the model's dtype, bfloat16");
  }
}

// SGLang's /server_info has context_length null by default; /v1/models and the scheduler's
// max_req_input_len still say what fits, so oversize items stop the run before any work.
TEST(EngineReportsCli, SglangContextIsLearntAndOversizeItemsAreExit2) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  FakeServerOptions o;
  o.personality = Personality::sglang;
  o.context_length = 100;  // the items are 120-200 tokens
  FakeServer server(o);
  const std::string db = fresh_db("sglang-context.db");
  CliResult r = run_kvgate("eval --evalset " + small_evalset() + " --endpoint f16=" + server.url() + ",bf16=" +
                           server.url() + " --ref-endpoint f16 --max-new-tokens 4 --db " + db);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("does not fit endpoint 'f16'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("max_req_input_len"), std::string::npos) << r.err;
  EXPECT_FALSE(db_has_runs(db));
  for (const RecordedRequest& q : server.requests()) EXPECT_NE(q.path, "/generate");
}

// Every greedy request pins the sampling the model file could set (vLLM: generation_config.json;
// llama-server: the GGUF's general.sampling.*) and asks for no top-k lists, which nothing reads
// and which would be in TTFT and TPOT.
TEST(EngineReportsCli, GreedyRequestsPinSamplingAndAskNoTopK) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  for (Personality who : {Personality::vllm, Personality::llama_server}) {
    FakeServerOptions o;
    o.personality = who;
    FakeServer server(o);
    CliResult r = run_kvgate("eval --evalset " + small_evalset() + " --endpoint f16=" + server.url() + ",bf16=" +
                             server.url() + " --ref-endpoint f16 --max-new-tokens 4 --db " + fresh_db("pinned.db"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    int greedy = 0;
    for (const RecordedRequest& q : server.requests()) {
      if (q.method != "POST" || q.path == "/tokenize") continue;
      const auto b = nlohmann::json::parse(q.body);
      if (who == Personality::vllm) {
        EXPECT_EQ(b["repetition_penalty"], 1) << q.body;
        EXPECT_EQ(b["presence_penalty"], 0) << q.body;
        EXPECT_EQ(b["frequency_penalty"], 0) << q.body;
        if (b.contains("prompt_logprobs")) continue;
        EXPECT_FALSE(b.contains("logprobs")) << q.body;
      } else {
        EXPECT_EQ(b["repeat_penalty"], 1) << q.body;
        EXPECT_EQ(b["mirostat"], 0) << q.body;
        EXPECT_EQ(b["dry_multiplier"], 0) << q.body;
        EXPECT_EQ(b["samplers"], nlohmann::json::array({"temperature"})) << q.body;
        if (b["n_predict"] == 1) continue;  // a scoring step
        EXPECT_FALSE(b.contains("n_probs")) << q.body;
      }
      ++greedy;
    }
    EXPECT_GT(greedy, 0);
  }
}

// vLLM fills usage.prompt_tokens_details only with --enable-prompt-tokens-details: without it a
// replay's hit rate is unknown, and kvgate says so and how to get it rather than print a bare
// "-" (or NaN). With the flag the rate is there and nothing is said.
TEST(EngineReportsCli, VllmWithoutPromptTokensDetailsSaysHitsAreUnknown) {
  KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
  const std::string trace = temp("details.jsonl");
  {
    std::ofstream out(trace);
    for (int i = 0; i < 3; ++i)
      out << nlohmann::json{{"timestamp_ms", i * 10.0}, {"input_tokens", 32}, {"output_tokens", 2}, {"block_tokens", 16},
                            {"hash_ids", {1, 2}}}
                 .dump()
          << "\n";
  }
  for (bool details : {false, true}) {
    FakeServerOptions o;
    o.vllm_prompt_tokens_details = details;
    FakeServer server(o);
    CliResult r = run_kvgate("replay --trace " + trace + " --endpoint f16=" + server.url() + " --db " +
                             fresh_db("details.db"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const bool said = r.out.find("endpoint 'f16' (vLLM) reported no cached prompt tokens in 3 answers") != std::string::npos &&
                      r.out.find("--enable-prompt-tokens-details") != std::string::npos;
    EXPECT_EQ(said, !details) << r.out;
  }
  FakeServer plain;
  const std::string db = fresh_db("details-eval.db");
  CliResult e = run_kvgate("eval --evalset " + small_evalset() + " --endpoint f16=" + plain.url() + ",bf16=" +
                           plain.url() + " --ref-endpoint f16 --max-new-tokens 4 --db " + db);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.out.find("note: endpoint 'f16' (vLLM) reported no cached prompt tokens"), std::string::npos) << e.out;
  CliResult show = run_kvgate("runs show latest --db " + db);
  EXPECT_NE(show.out.find("start vLLM with --enable-prompt-tokens-details"), std::string::npos) << show.out;
}

// ---- a real llama-server ----

class EngineLlamaServerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    KVGATE_SKIP_UNLESS_LLAMA_SERVER();
    f16_ = start({"-ctk", "f16", "-ctv", "f16"}, "f16");
    q4_ = start({"-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"}, "q4_0");
  }

  std::unique_ptr<LlamaServer> start(const std::vector<std::string>& kv, const std::string& name) {
    static int started = 0;
    auto s = std::make_unique<LlamaServer>(kv, temp("llama-" + name + "-" + std::to_string(started++) + ".log"));
    if (s->wait_ready().empty()) ADD_FAILURE() << "llama-server " << name << " did not start:\n" << s->log_tail();
    return s;
  }

  std::string both() const { return "--endpoint f16=" + f16_->url() + ",q4_0=" + q4_->url() + " --ref-endpoint f16"; }

  std::unique_ptr<LlamaServer> f16_, q4_;
};

TEST_F(EngineLlamaServerCli, EvalScoresEachEndpointIntoTheStore) {
  const std::string db = fresh_db("eval.db");
  CliResult r = run_kvgate("eval --evalset " + small_evalset() + " " + both() + " --max-new-tokens 4 --json --db " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["configs"].size(), 2u);
  EXPECT_EQ(j["configs"][0]["kv"], "endpoint:f16=f16/f16");
  EXPECT_EQ(j["configs"][0]["kld_mean"].get<double>(), 0.0) << "the reference against itself";
  EXPECT_EQ(j["configs"][1]["kv"], "endpoint:q4_0=q4_0:rot=wht/q4_0:rot=wht");
  EXPECT_GT(j["configs"][1]["kld_mean"].get<double>(), 0.0) << "a q4_0 cache changes the distribution";
  EXPECT_LT(j["configs"][1]["kld_mean"].get<double>(), 1.0);
  EXPECT_EQ(j["configs"][1]["kld_estimator"], "topk");
  EXPECT_EQ(j["configs"][1]["top_k"], 20);
  EXPECT_GT(j["configs"][1]["ttft_p50_ms"].get<double>(), 0.0);

  results::Store store = results::Store::open(db, results::Store::Mode::existing);
  const int64_t run = j["run"].get<int64_t>();
  const auto endpoints = store.config_endpoints(run);
  ASSERT_EQ(endpoints.size(), 2u);
  for (const auto& e : endpoints) {
    EXPECT_EQ(e.engine, "llama-server");
    EXPECT_NE(e.engine_version.find("b11434"), std::string::npos) << e.engine_version;
    EXPECT_NE(e.model.find("SmolLM2"), std::string::npos) << e.model;
    EXPECT_EQ(e.kv_source, "name");
  }
  for (const auto& c : store.run_configs(run)) {
    EXPECT_EQ(c.kld_estimator, "topk");
    EXPECT_EQ(c.top_k, 20);
  }
  for (const auto& t : store.run_turn_metrics(run)) {
    ASSERT_TRUE(t.turn.prompt_tokens && t.turn.cached_tokens) << "llama-server reports timings.cache_n";
    EXPECT_EQ(*t.turn.prompt_tokens, t.turn.context_tokens);
  }
  CliResult show = run_kvgate("runs show " + std::to_string(run) + " --db " + db);
  EXPECT_NE(show.out.find("top-k estimates (k = 20"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("llama-server (version b11434"), std::string::npos) << show.out;
  const std::string md = temp("eval.md");
  ASSERT_EQ(run_kvgate("report --run " + std::to_string(run) + " --md " + md + " --db " + db).exit_code, 0);
  EXPECT_NE(slurp(md).find("top-k estimates"), std::string::npos);
}

// The cross-check: an in-process q4_0 and llama-server's q4_0 on the same items, both scored
// with the top-k estimator against the in-process f16 reference, and against each other.
TEST_F(EngineLlamaServerCli, CrossCheckComparesEmulationWithTheEngine) {
  const std::string db = fresh_db("cross.db");
  CliResult r = run_kvgate("eval --evalset " + small_evalset() + " --kv q4_0 --endpoint q4_0=" + q4_->url() +
                           " --max-new-tokens 4 --threads 1 --json --db " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["configs"].size(), 3u);
  for (const auto& c : j["configs"]) EXPECT_EQ(c["kld_estimator"], "topk") << "estimator against estimator";
  ASSERT_EQ(j["cross_check"].size(), 1u);
  const auto& x = j["cross_check"][0];
  // Bare q4_0 is rotated as llama.cpp b11434 rotates it, on both sides of the cross-check.
  EXPECT_EQ(x["emulation"], "q4_0:rot=wht/q4_0:rot=wht");
  EXPECT_EQ(x["engine"], "endpoint:q4_0=q4_0:rot=wht/q4_0:rot=wht");
  EXPECT_GT(x["positions"].get<int>(), 0);
  EXPECT_TRUE(std::isfinite(x["kld_emulation_engine_mean"].get<double>()));
  EXPECT_EQ(x["metrics"].size(), 6u);
  const std::string md = temp("cross.md");
  ASSERT_EQ(run_kvgate("report --run latest --md " + md + " --db " + db).exit_code, 0);
  EXPECT_NE(slurp(md).find("Cross-check: q4_0:rot=wht/q4_0:rot=wht emulated"), std::string::npos);
  // The report of an engine-mode run: its endpoints and the cross-check beside the charts.
  const std::string html = temp("cross.html");
  ASSERT_EQ(run_kvgate("report --run latest --html " + html + " --db " + db).exit_code, 0);
  EXPECT_REPORT_RENDERS(html);
}

// Replayed sessions resend each turn's growing prefix; the engine's own counters show it cached.
TEST_F(EngineLlamaServerCli, ReplayedSessionsHitTheEnginePrefixCache) {
  const std::string trace = temp("session.jsonl"), db = fresh_db("replay.db");
  CliResult g = run_kvgate("evalset generate --domain agentic --seed 3 --n 1 --tokens-min 300 --tokens-max 500 --out " + trace);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  CliResult r = run_kvgate("replay --trace " + trace + " " + both() + " --max-new-tokens 4 --json --db " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  results::Store store = results::Store::open(db, results::Store::Mode::existing);
  int later_turns = 0;
  for (const auto& t : store.run_turn_metrics(nlohmann::json::parse(r.out)["run"].get<int64_t>())) {
    ASSERT_TRUE(t.turn.cached_tokens.has_value());
    if (t.turn.turn_index == 0) continue;
    ++later_turns;
    EXPECT_GT(*t.turn.cached_tokens, 0) << "turn " << t.turn.turn_index << " resends the previous turns' prefix";
  }
  EXPECT_GT(later_turns, 0);
}

// Gates read engine runs like any others: a q4_0 endpoint that really quantizes is a
// regression against one that does not (the f16 server under the q4_0 name), and a rerun is not.
TEST_F(EngineLlamaServerCli, GateBetweenTwoEngineRuns) {
  const std::string db = fresh_db("gate.db"), policy = temp("policy.json");
  std::ofstream(policy) << R"({"kvgate_gate_policy": 1, "bootstrap": {"resamples": 500, "confidence": 0.9, "seed": 1},
    "rules": [{"domain": "*", "kv": "*", "regression": {"kld_mean": 0.002, "same_top1": 0.01}}],
    "latency": {"ttft_p50_ratio_max": null, "ttft_p95_ratio_max": null, "tpot_p50_ratio_max": null, "tpot_p95_ratio_max": null}})";
  const std::string& items = small_evalset();
  auto eval = [&](const std::string& q4_url) {
    CliResult r = run_kvgate("eval --evalset " + items + " --endpoint f16=" + f16_->url() + ",q4_0=" + q4_url +
                             " --ref-endpoint f16 --max-new-tokens 2 --json --db " + db);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["run"].get<int64_t>() : 0;
  };
  const int64_t lossless = eval(f16_->url()), quantized = eval(q4_->url()), again = eval(q4_->url());
  CliResult fired = run_kvgate("gate --baseline " + std::to_string(lossless) + " --candidate " + std::to_string(quantized) +
                               " --policy " + policy + " --db " + db);
  EXPECT_EQ(fired.exit_code, 1) << fired.out << fired.err;
  CliResult quiet = run_kvgate("gate --baseline " + std::to_string(quantized) + " --candidate " + std::to_string(again) +
                               " --policy " + policy + " --db " + db);
  EXPECT_EQ(quiet.exit_code, 0) << quiet.out << quiet.err;
}

// The server dies mid-run: the item in flight is recorded as failed, the command exits 3
// naming the endpoint, and --resume against the restarted server (a new port) finishes the run.
TEST_F(EngineLlamaServerCli, ResumeAfterTheServerIsKilledMidRun) {
  const std::string db = fresh_db("killed.db"), items = evalset("killed", 2), out = temp("killed.err");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string bin = kvgate_binary(), endpoints = "f16=" + f16_->url() + ",q4_0=" + q4_->url();
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    ::execl(bin.c_str(), bin.c_str(), "eval", "--evalset", items.c_str(), "--endpoint", endpoints.c_str(), "--ref-endpoint",
            "f16", "--max-new-tokens", "4", "--db", db.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  bool first_item = false;
  for (int i = 0; i < 1500 && !first_item; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (!std::ifstream(db).good()) continue;
    try {
      results::Store store = results::Store::open(db, results::Store::Mode::existing);
      const auto runs = store.list_runs();
      first_item = !runs.empty() && runs.front().items >= 1;
    } catch (const std::exception&) {
    }
  }
  q4_->kill();
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(first_item) << "the run never committed an item";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3) << slurp(out);
  EXPECT_NE(slurp(out).find("endpoint 'q4_0'"), std::string::npos) << slurp(out);
  int64_t run_id = 0;
  {
    results::Store store = results::Store::open(db, results::Store::Mode::existing);
    const auto runs = store.list_runs();
    ASSERT_EQ(runs.size(), 1u);
    run_id = runs[0].id;
    EXPECT_NE(runs[0].status, kvgate::results::RunStatus::complete);
    EXPECT_LT(runs[0].items, 4);
    ASSERT_FALSE(store.item_failures(run_id).empty());
    EXPECT_EQ(store.item_failures(run_id)[0].endpoint, "q4_0");
  }
  q4_ = start({"-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"}, "q4_0-again");
  CliResult resumed = run_kvgate("eval --resume " + std::to_string(run_id) + " --endpoint q4_0=" + q4_->url() +
                                 " --max-new-tokens 4 --json --db " + db);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  results::Store store = results::Store::open(db, results::Store::Mode::existing);
  EXPECT_EQ(store.find_run(run_id)->status, kvgate::results::RunStatus::complete);
  EXPECT_EQ(store.find_run(run_id)->items, 4);
  EXPECT_TRUE(store.item_failures(run_id).empty());
  for (const auto& e : store.config_endpoints(run_id))
    if (e.name == "q4_0") {
      EXPECT_EQ(e.url, q4_->url()) << "the run records where it finished";
    }
}

// Load replay of a small shape trace: requests at their arrival times with prefix sharing,
// per-request rows stored, the engine's cache hits read, the capacity prediction beside them.
TEST_F(EngineLlamaServerCli, LoadReplayOfAShapeTrace) {
  const std::string trace = temp("shape.jsonl"), db = fresh_db("load.db");
  {
    std::ofstream out(trace);
    for (int i = 0; i < 8; ++i) {
      // Two sessions; each request repeats its session's 64-token prefix and adds its own block.
      const int s = i % 2;
      out << nlohmann::json{{"session", "s" + std::to_string(s)}, {"turn", i / 2 + 1}, {"timestamp_ms", i * 150.0},
                            {"input_tokens", 75}, {"output_tokens", 4}, {"block_tokens", 16},
                            {"hash_ids", {10 * s, 10 * s + 1, 10 * s + 2, 10 * s + 3, 100 + i}}}
                 .dump()
          << "\n";
    }
  }
  CliResult r = run_kvgate("replay --trace " + trace + " --endpoint f16=" + f16_->url() + ",q4_0=" + q4_->url() +
                           " --max-inflight 4 --gpu H100 --json --db " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["load_replay"]["configs"].size(), 2u);
  for (const auto& c : j["load_replay"]["configs"]) {
    EXPECT_EQ(c["measured"]["succeeded"], 8) << c.dump();
    EXPECT_GT(c["measured"]["ttft_ms"]["p50"].get<double>(), 0.0);
    EXPECT_GT(c["measured"]["prefix_hit_rate"].get<double>(), 0.0) << "later requests share their session's prefix";
    EXPECT_GT(c["predicted"]["prefix_hit_rate"].get<double>(), 0.0);
  }
  results::Store store = results::Store::open(db, results::Store::Mode::existing);
  const int64_t run = j["run"].get<int64_t>();
  EXPECT_EQ(store.find_run(run)->status, kvgate::results::RunStatus::complete);
  EXPECT_EQ(store.load_requests(run).size(), 16u);
  EXPECT_EQ(store.capacity_predictions(run).size(), 2u);
  CliResult show = run_kvgate("runs show " + std::to_string(run) + " --db " + db);
  EXPECT_NE(show.out.find("load replay"), std::string::npos) << show.out;
  const std::string html = temp("load.html");
  ASSERT_EQ(run_kvgate("report --run " + std::to_string(run) + " --html " + html + " --db " + db).exit_code, 0);
  EXPECT_NE(slurp(html).find("<h2>Load replay</h2>"), std::string::npos);
  EXPECT_REPORT_RENDERS(html);
}

}  // namespace
}  // namespace kvgate::testing
