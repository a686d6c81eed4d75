#include "serving/adapters.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serving/engine_traits.h"

namespace kvgate::serving {
namespace {

using nlohmann::json;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

GenerateRequest greedy(int k) {
  GenerateRequest r;
  r.prompt_tokens = {1, 2, 3};
  r.max_tokens = 8;
  r.top_logprobs = k;
  return r;
}

TEST(BuildGenerate, EachKindSendsTokenIdsGreedily) {
  {
    const EngineRequest r = build_generate(EngineKind::vllm, "m", greedy(20));
    EXPECT_EQ(r.path, "/v1/completions");
    EXPECT_EQ(r.format, ResponseFormat::openai_completions);
    EXPECT_TRUE(r.stream);
    const json b = json::parse(r.body);
    EXPECT_EQ(b["prompt"], json::array({1, 2, 3}));
    EXPECT_EQ(b["model"], "m");
    EXPECT_EQ(b["temperature"], 0);
    EXPECT_EQ(b["max_tokens"], 8);
    EXPECT_EQ(b["logprobs"], 20);
    EXPECT_EQ(b["return_tokens_as_token_ids"], true);
    EXPECT_EQ(b["stream_options"]["include_usage"], true);
  }
  {
    const json b = json::parse(build_generate(EngineKind::openai, "", greedy(0)).body);
    EXPECT_FALSE(b.contains("model"));
    EXPECT_FALSE(b.contains("logprobs"));
    EXPECT_FALSE(b.contains("return_tokens_as_token_ids"));  // vLLM's extension only
  }
  {
    const EngineRequest r = build_generate(EngineKind::sglang, "m", greedy(5));
    EXPECT_EQ(r.path, "/generate");
    const json b = json::parse(r.body);
    EXPECT_EQ(b["input_ids"], json::array({1, 2, 3}));
    EXPECT_EQ(b["sampling_params"]["temperature"], 0);
    EXPECT_EQ(b["sampling_params"]["max_new_tokens"], 8);
    EXPECT_EQ(b["top_logprobs_num"], 5);
    EXPECT_EQ(b["return_logprob"], true);
  }
  {
    GenerateRequest g = greedy(3);
    g.ignore_eos = true;
    const EngineRequest r = build_generate(EngineKind::llama_server, "", g);
    EXPECT_EQ(r.path, "/completion");
    EXPECT_EQ(r.format, ResponseFormat::llama_completion);
    const json b = json::parse(r.body);
    EXPECT_EQ(b["prompt"], json::array({1, 2, 3}));
    EXPECT_EQ(b["n_predict"], 8);
    EXPECT_EQ(b["n_probs"], 3);
    EXPECT_EQ(b["cache_prompt"], true);
    EXPECT_EQ(b["ignore_eos"], true);
  }
  {
    GenerateRequest g;
    g.prompt_text = "hello";
    EXPECT_EQ(json::parse(build_generate(EngineKind::vllm, "m", g).body)["prompt"], "hello");
  }
}

// The neutral sampling fields of `kind` as they sit in `body` (top level, or SGLang's
// sampling_params): every one present with its neutral value.
void expect_pinned(EngineKind kind, const json& body) {
  const EngineTraits& t = engine_traits(kind);
  const json& where = t.sampling_object.empty() ? body : body.at(std::string(t.sampling_object));
  const json neutral = json::parse(t.neutral_sampling);
  EXPECT_FALSE(neutral.empty());
  for (const auto& [key, value] : neutral.items()) {
    ASSERT_TRUE(where.contains(key)) << engine_kind_name(kind) << " request lacks " << key << ": " << body.dump();
    EXPECT_EQ(where[key], value) << engine_kind_name(kind) << " " << key;
  }
}

// Issue 39: a greedy answer must not carry the model file's or the server's sampling defaults
// (vLLM's generation_config.json, llama-server's GGUF general.sampling.*, SGLang's
// --preferred-sampling-params), so every request that samples pins them; and one that reads no
// top-k lists asks for none.
TEST(BuildGenerate, EveryRequestPinsNeutralSamplingAndAsksNoListsItDoesNotRead) {
  for (EngineKind kind : {EngineKind::vllm, EngineKind::sglang, EngineKind::llama_server, EngineKind::openai}) {
    SCOPED_TRACE(engine_kind_name(kind));
    const json plain = json::parse(build_generate(kind, "m", greedy(0)).body);
    expect_pinned(kind, plain);
    for (const char* list : {"logprobs", "top_logprobs_num", "return_logprob", "n_probs", "return_tokens_as_token_ids"})
      EXPECT_FALSE(plain.contains(list)) << list;
    expect_pinned(kind, json::parse(build_generate(kind, "m", greedy(5)).body));
  }
  const json vllm = json::parse(build_generate(EngineKind::vllm, "m", greedy(0)).body);
  EXPECT_EQ(vllm["repetition_penalty"], 1);
  EXPECT_EQ(vllm["presence_penalty"], 0);
  EXPECT_EQ(vllm["frequency_penalty"], 0);
  EXPECT_EQ(vllm["return_token_ids"], true) << "the ids come without logprobs";
  const json llama = json::parse(build_generate(EngineKind::llama_server, "", greedy(0)).body);
  EXPECT_EQ(llama["repeat_penalty"], 1);
  EXPECT_EQ(llama["mirostat"], 0);
  EXPECT_EQ(llama["dry_multiplier"], 0);
  EXPECT_EQ(llama["samplers"], json::array({"temperature"}));
  EXPECT_EQ(llama["return_tokens"], true);
  const json sgl = json::parse(build_generate(EngineKind::sglang, "", greedy(0)).body);
  EXPECT_EQ(sgl["sampling_params"]["repetition_penalty"], 1);
  EXPECT_EQ(sgl["sampling_params"]["max_new_tokens"], 8);
}

TEST(BuildGenerate, RejectsWhatNoEngineAccepts) {
  EXPECT_NE(error_of([] { build_generate(EngineKind::vllm, "", greedy(21)); }).find("top logprobs must be in 0..20"), std::string::npos);
  EXPECT_NE(error_of([] { build_generate(EngineKind::vllm, "", GenerateRequest{}); }).find("empty prompt"), std::string::npos);
  EXPECT_NE(error_of([] { build_generate(EngineKind::automatic, "", greedy(1)); }).find("not resolved"), std::string::npos);
}

ScoreRequest span_request() {
  ScoreRequest r;
  r.context = {10, 11, 12};
  r.span = {13, 14};
  r.top_logprobs = 2;
  return r;
}

TEST(BuildScore, OneRequestOrOnePerSpanToken) {
  const auto v = build_score(EngineKind::vllm, "m", span_request());
  ASSERT_EQ(v.size(), 1u);
  const json vb = json::parse(v[0].body);
  EXPECT_EQ(vb["prompt"], json::array({10, 11, 12, 13, 14}));
  EXPECT_EQ(vb["prompt_logprobs"], 2);
  EXPECT_EQ(vb["stream"], false);

  const auto s = build_score(EngineKind::sglang, "m", span_request());
  ASSERT_EQ(s.size(), 1u);
  const json sb = json::parse(s[0].body);
  // One position early: SGLang leaves the row at logprob_start_len unscored.
  EXPECT_EQ(sb["logprob_start_len"], 2);
  EXPECT_EQ(sb["top_logprobs_num"], 2);
  EXPECT_EQ(sb["input_ids"].size(), 5u);
  expect_pinned(EngineKind::vllm, vb);
  expect_pinned(EngineKind::sglang, sb);

  const auto l = build_score(EngineKind::llama_server, "", span_request());
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(json::parse(l[0].body)["prompt"], json::array({10, 11, 12}));
  EXPECT_EQ(json::parse(l[1].body)["prompt"], json::array({10, 11, 12, 13}));
  for (const auto& r : l) {
    const json b = json::parse(r.body);
    EXPECT_EQ(b["n_predict"], 1);
    EXPECT_EQ(b["n_probs"], 2);
    EXPECT_EQ(b["cache_prompt"], true);
    EXPECT_FALSE(b.contains("logit_bias"));
    expect_pinned(EngineKind::llama_server, b);
  }
  // With a plain token every step samples it, so a partial UTF-8 argmax cannot swallow the
  // step's probabilities (they are of the raw logits, unbiased).
  ScoreRequest plain = span_request();
  plain.plain_token = 13;
  for (const auto& r : build_score(EngineKind::llama_server, "", plain))
    EXPECT_EQ(json::parse(r.body)["logit_bias"], json::parse("[[13, 1000.0]]"));
  EXPECT_EQ(json::parse(plain_token_request())["content"], ".");
  EXPECT_EQ(parse_plain_token(R"({"tokens":[30]})"), 30);
  EXPECT_EQ(parse_plain_token(R"({"tokens":[{"id":30,"piece":"."}]})"), 30);
  EXPECT_FALSE(parse_plain_token(R"({"tokens":[]})").has_value());
  EXPECT_FALSE(parse_plain_token("not json").has_value());

  EXPECT_NE(error_of([] { build_score(EngineKind::openai, "", span_request()); }).find("cannot score"), std::string::npos);
  ScoreRequest no_context = span_request();
  no_context.context.clear();
  EXPECT_NE(error_of([&] { build_score(EngineKind::vllm, "", no_context); }).find("at least one token"), std::string::npos);
}

TEST(ParseScore, VllmPromptLogprobsKeepTopKAndTheTarget) {
  const std::string body = R"({"choices":[{"text":"x","prompt_logprobs":[null,{"11":{"logprob":-1}},{"12":{"logprob":-1}},
    {"13":{"logprob":-0.5,"rank":1},"99":{"logprob":-1.5,"rank":2}},
    {"50":{"logprob":-0.2,"rank":1},"51":{"logprob":-2.2,"rank":2},"14":{"logprob":-6.0,"rank":7}}]}],
    "usage":{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":3}}})";
  const ScoreResult r = parse_score(EngineKind::vllm, span_request(), {body});
  ASSERT_EQ(r.tokens.size(), 2u);
  EXPECT_EQ(r.tokens[0].target, 13);
  EXPECT_DOUBLE_EQ(*r.tokens[0].target_logprob, -0.5);
  ASSERT_EQ(r.tokens[0].top.size(), 2u);
  EXPECT_EQ(r.tokens[0].top[0].id, 13);
  EXPECT_DOUBLE_EQ(*r.tokens[1].target_logprob, -6.0);
  ASSERT_EQ(r.tokens[1].top.size(), 2u);  // rank 7 is the target, not one of the top 2
  EXPECT_EQ(r.tokens[1].top[1].id, 51);
  EXPECT_EQ(r.cached_prompt_tokens, 3);

  const std::string missing = R"({"choices":[{"prompt_logprobs":[null,{},{},{"99":{"logprob":-1}},{"14":{"logprob":-1}}]}]})";
  EXPECT_NE(error_of([&] { parse_score(EngineKind::vllm, span_request(), {missing}); }).find("lacks the prompt token 13"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_score(EngineKind::vllm, span_request(), {R"({"choices":[{"prompt_logprobs":[null]}]})"}); })
                .find("for 1 positions"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_score(EngineKind::vllm, span_request(), {"<html>"}); }).find("not JSON"), std::string::npos);
}

// SGLang's row at logprob_start_len (= the context's last token) is [None, id, None] with a null
// top list; the span follows (logprob_result_processor.py:26-84).
TEST(ParseScore, SglangDropsTheUnscoredRowAtStartLen) {
  const std::string body = R"({"text":"z","meta_info":{"cached_tokens":2,
    "input_token_logprobs":[[null,12,null],[-0.5,13,null],[-3.0,14,null]],
    "input_top_logprobs":[null,[[-0.5,13,null],[-1.0,20,null]],[[-0.1,30,null],[-2.9,31,null]]]}})";
  const ScoreResult r = parse_score(EngineKind::sglang, span_request(), {body});
  ASSERT_EQ(r.tokens.size(), 2u);
  EXPECT_DOUBLE_EQ(*r.tokens[0].target_logprob, -0.5);
  EXPECT_DOUBLE_EQ(*r.tokens[1].target_logprob, -3.0);
  EXPECT_EQ(r.tokens[1].top[0].id, 30);
  EXPECT_EQ(r.cached_prompt_tokens, 2);
  const std::string wrong = R"({"meta_info":{"input_token_logprobs":[[null,12,null],[-0.5,13,null],[-3.0,15,null]],
    "input_top_logprobs":[null,[],[]]}})";
  EXPECT_NE(error_of([&] { parse_score(EngineKind::sglang, span_request(), {wrong}); }).find("scored token 15 at span position 1"),
            std::string::npos);
  // A first row that is scored, or names another token, is not the layout asked for: said, not
  // read one position off.
  const std::string scored_first = R"({"meta_info":{"input_token_logprobs":[[-1.0,12,null],[-0.5,13,null],[-3.0,14,null]],
    "input_top_logprobs":[[],[],[]]}})";
  EXPECT_NE(error_of([&] { parse_score(EngineKind::sglang, span_request(), {scored_first}); }).find("not the unscored row"),
            std::string::npos);
  const std::string other_token = R"({"meta_info":{"input_token_logprobs":[[null,11,null],[-0.5,13,null],[-3.0,14,null]],
    "input_top_logprobs":[null,[],[]]}})";
  EXPECT_NE(error_of([&] { parse_score(EngineKind::sglang, span_request(), {other_token}); }).find("context's last token 12"),
            std::string::npos);
  const std::string short_body = R"({"meta_info":{"input_token_logprobs":[[-0.5,13,null],[-3.0,14,null]],"input_top_logprobs":[[],[]]}})";
  EXPECT_NE(error_of([&] { parse_score(EngineKind::sglang, span_request(), {short_body}); }).find("for 2 positions, expected 3"),
            std::string::npos);
}

TEST(ParseScore, LlamaServerStepsTargetOutsideTopK) {
  auto step = [](int evaluated, const std::string& top, int cache_n) {
    return R"({"content":"x","stop":true,"tokens_evaluated":)" + std::to_string(evaluated) +
           R"(,"completion_probabilities":[{"id":1,"token":"x","logprob":-0.1,"top_logprobs":)" + top +
           R"(}],"timings":{"cache_n":)" + std::to_string(cache_n) + "}}";
  };
  const std::vector<std::string> bodies = {
      step(3, R"([{"id":13,"token":"a","logprob":-0.3},{"id":7,"token":"b","logprob":-1.9}])", 0),
      step(4, R"([{"id":8,"token":"c","logprob":-0.2},{"id":9,"token":"d","logprob":-2.0}])", 3)};
  const ScoreResult r = parse_score(EngineKind::llama_server, span_request(), bodies);
  EXPECT_DOUBLE_EQ(*r.tokens[0].target_logprob, -0.3);
  EXPECT_FALSE(r.tokens[1].target_logprob.has_value());  // 14 is not in its top 2
  EXPECT_EQ(r.tokens[1].top.size(), 2u);
  EXPECT_EQ(r.cached_prompt_tokens, 3);
  const std::vector<std::string> wrong_len = {bodies[0], step(9, "[]", 0)};
  EXPECT_NE(error_of([&] { parse_score(EngineKind::llama_server, span_request(), wrong_len); }).find("evaluated 9 prompt tokens"),
            std::string::npos);
}

TEST(Discovery, ReadsWhatEachEngineReports) {
  const EngineInfo llama = parse_discovery(EngineKind::llama_server,
                                           {{"/props", R"({"build_info":"b11434-abc","model_alias":"smol",
                                                           "default_generation_settings":{"n_ctx":8192}})"},
                                            {"/v1/models", R"({"data":[{"id":"smol"}]})"}});
  EXPECT_EQ(llama.version, "b11434-abc");
  EXPECT_EQ(llama.model, "smol");
  EXPECT_EQ(llama.context_length, 8192);
  EXPECT_EQ(llama.kv_cache_dtype, "");  // /props does not say; the user states it

  const EngineInfo vllm = parse_discovery(EngineKind::vllm, {{"/version", R"({"version":"0.11.0"})"},
                                                             {"/v1/models", R"({"data":[{"id":"meta/llama","max_model_len":32768}]})"}});
  EXPECT_EQ(vllm.version, "0.11.0");
  EXPECT_EQ(vllm.model, "meta/llama");
  EXPECT_EQ(vllm.context_length, 32768);

  const EngineInfo sgl = parse_discovery(
      EngineKind::sglang, {{"/get_server_info", R"({"version":"0.5.2","kv_cache_dtype":"fp8_e5m2","model_path":"/m"})"}});
  EXPECT_EQ(sgl.kv_cache_dtype, "fp8_e5m2");
  EXPECT_EQ(sgl.model, "/m");
  EXPECT_NE(sgl.raw.find("/get_server_info"), std::string::npos);

  EXPECT_EQ(kind_from_probe("/props", R"({"build_info":"b1"})"), EngineKind::llama_server);
  EXPECT_EQ(kind_from_probe("/get_server_info", R"({"version":"0.5","model_path":"/m"})"), EngineKind::sglang);
  EXPECT_EQ(kind_from_probe("/server_info", R"({"version":"0.5.23","kv_cache_dtype":"auto"})"), EngineKind::sglang);
  // vLLM's dev-mode /server_info is not SGLang's.
  EXPECT_FALSE(kind_from_probe("/server_info", R"({"vllm_config":"model=m, dtype=bfloat16"})").has_value());
  EXPECT_EQ(kind_from_probe("/version", R"({"version":"0.11"})"), EngineKind::vllm);
  EXPECT_FALSE(kind_from_probe("/version", "not json").has_value());
  EXPECT_NE(error_of([] { parse_discovery(EngineKind::vllm, {{"/version", "<html>"}}); }).find("GET /version"), std::string::npos);
}

TEST(Discovery, KvDtypeFromVllmMetricsAndSglangServerInfo) {
  const std::string metrics = "# TYPE vllm:cache_config_info gauge\n"
                              "vllm:cache_config_info_x{cache_dtype=\"wrong\"} 1.0\n"
                              "vllm:cache_config_info{block_size=\"16\",note=\"a \\\"q\\\" b\",cache_dtype=\"fp8_e4m3\",engine=\"0\"} 1.0\n";
  const EngineInfo vllm = parse_discovery(EngineKind::vllm, {{"/version", R"({"version":"0.34.0"})"}, {"/metrics", metrics}});
  EXPECT_EQ(vllm.kv_cache_dtype, "fp8_e4m3");
  EXPECT_EQ(reported_kv_label(vllm), "fp8_e4m3");
  EXPECT_EQ(nlohmann::json::parse(vllm.raw)["/metrics"]["vllm:cache_config_info"]["note"], "a \"q\" b");
  const EngineInfo quiet = parse_discovery(EngineKind::vllm, {{"/metrics", "vllm:num_requests_running 0\n"}});
  EXPECT_EQ(quiet.kv_cache_dtype, "");
  ASSERT_FALSE(quiet.notes.empty());
  EXPECT_NE(quiet.notes.back().find("--disable-log-stats"), std::string::npos);

  const EngineInfo auto_vllm = parse_discovery(EngineKind::vllm, {{"/metrics", R"(vllm:cache_config_info{cache_dtype="auto"} 1.0)"}});
  EXPECT_EQ(reported_kv_label(auto_vllm), "auto: the model's dtype (vLLM does not report which)");

  const EngineInfo sgl = parse_discovery(
      EngineKind::sglang, {{"/server_info", R"({"version":"0.5.23","kv_cache_dtype":"auto","dtype":"bfloat16",
                                                "context_length":null,"max_req_input_len":4090})"},
                           {"/v1/models", R"({"data":[{"id":"m","max_model_len":4096}]})"}});
  EXPECT_EQ(sgl.model_dtype, "bfloat16");
  EXPECT_EQ(reported_kv_label(sgl), "auto: the model's dtype, bfloat16");
  EXPECT_EQ(sgl.context_length, 4096) << "learnt from /v1/models where /server_info has null";
  EXPECT_EQ(sgl.max_input_tokens, 4090);
  EXPECT_TRUE(sgl.notes.empty());
  EXPECT_EQ(context_problem(sgl, 4000, 96), "");
  EXPECT_NE(context_problem(sgl, 4000, 97).find("more than the 4096 tokens of context"), std::string::npos);
  EXPECT_NE(context_problem(sgl, 4090, 1).find("max_req_input_len"), std::string::npos);

  const EngineInfo blind = parse_discovery(EngineKind::sglang, {{"/server_info", R"({"context_length":null})"}});
  EXPECT_FALSE(blind.context_length.has_value());
  EXPECT_EQ(context_problem(blind, 1000000, 100), "") << "nothing known, nothing refused";
  ASSERT_EQ(blind.notes.size(), 2u);
  EXPECT_NE(blind.notes[0].find("no context length"), std::string::npos);
  EXPECT_NE(blind.notes[1].find("no kv_cache_dtype"), std::string::npos);
}

}  // namespace
}  // namespace kvgate::serving
