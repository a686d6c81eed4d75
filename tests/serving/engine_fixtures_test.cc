// kvgate against the engines' own layouts: the fixtures (tests/serving/fixtures/, complete
// bodies written from vLLM 0.34.0, SGLang 0.5.23 and llama.cpp b11434's released code) served
// by the fake in fixture mode, which answers only the exact requests the fixtures hold. So each
// test here pins what kvgate sends as well as what it reads, and the synthesised fake is checked
// against the same fixtures (FakeLayout).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "serving/adapters.h"
#include "serving/engine_client.h"
#include "serving/engine_traits.h"
#include "tests/serving/fake_server.h"
#include "tests/serving/fixtures.h"

namespace kvgate::serving {
namespace {

using kvgate::testing::FakeServer;
using kvgate::testing::FakeServerOptions;
using kvgate::testing::Fixture;
using kvgate::testing::fixture;
using kvgate::testing::Personality;
using nlohmann::json;

FakeServerOptions serving(const std::vector<std::string>& names) {
  FakeServerOptions o;
  for (const std::string& n : names) o.fixtures.push_back(fixture(n));
  return o;
}

EndpointConfig endpoint_at(const FakeServer& server, EngineKind kind) {
  EndpointConfig e;
  e.name = "ep";
  e.url = server.url();
  e.kind = kind;
  e.timeouts.total = std::chrono::milliseconds(5000);
  return e;
}

std::vector<std::string> paths_asked(const FakeServer& server) {
  std::vector<std::string> out;
  for (const auto& r : server.requests()) out.push_back(r.method + " " + r.path);
  return out;
}

bool asked(const FakeServer& server, const std::string& what) {
  for (const std::string& p : paths_asked(server))
    if (p == what) return true;
  return false;
}

TEST(EngineFixtures, EveryFixtureNamesTheReleaseItWasWrittenFrom) {
  const std::pair<const char*, const char*> engines[] = {
      {"vllm", "vLLM 0.34.0"}, {"sglang", "SGLang 0.5.23"}, {"llama-server", "llama.cpp b11434"}};
  for (const auto& [dir, release] : engines) {
    const std::vector<Fixture> all = kvgate::testing::engine_fixtures(dir);
    EXPECT_GE(all.size(), 3u) << dir;
    for (const Fixture& f : all) {
      EXPECT_NE(f.comment.find(release), std::string::npos) << f.file << " does not name " << release;
      const bool cites_source = f.comment.find(".py:") != std::string::npos || f.comment.find(".cpp:") != std::string::npos;
      EXPECT_TRUE(cites_source) << f.file << " names no source file:line";
      EXPECT_FALSE(f.body.empty()) << f.file;
    }
  }
}

// ---- SGLang 0.5.23 ----

ScoreRequest fixture_span() {
  ScoreRequest r;
  r.context = {1, 504, 3458, 314, 260};
  r.span = {1345, 28, 17};
  r.top_logprobs = 3;
  return r;
}

// Issue 39 item 1: SGLang never scores the row at logprob_start_len, so kvgate asks from the
// context's last token and reads the span from row 1. (The old adapters asked from the span's
// first token and threw "input_token_logprobs[0] has no logprob" on every span.)
TEST(EngineFixtures, SglangScoresASpanFromTheRowAfterTheDroppedOne) {
  const Fixture score = fixture("sglang/score.http");
  const ScoreResult direct = parse_score(EngineKind::sglang, fixture_span(), {score.body});
  FakeServer server(serving({"sglang/server_info.http", "sglang/model_info.http", "sglang/models.http", "sglang/score.http"}));
  HttpClient http(HttpClientOptions{});
  EngineClient client(endpoint_at(server, EngineKind::sglang), http);
  const ScoreResult r = client.score(fixture_span());
  ASSERT_EQ(r.tokens.size(), 3u);
  const double expected[3] = {-2.718442440032959, -0.05470518395304680, -5.406250476837158};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r.tokens[i].target, fixture_span().span[i]);
    ASSERT_TRUE(r.tokens[i].target_logprob.has_value());
    EXPECT_DOUBLE_EQ(*r.tokens[i].target_logprob, expected[i]);
    EXPECT_DOUBLE_EQ(*direct.tokens[i].target_logprob, expected[i]);
    ASSERT_EQ(r.tokens[i].top.size(), 3u);
  }
  EXPECT_EQ(r.tokens[0].top[0].id, 2533);
  EXPECT_EQ(r.tokens[2].top[1].id, 323);
  EXPECT_EQ(r.cached_prompt_tokens, 0);
}

// Issue 39 items 3 and 6: /server_info (not the deprecated alias), its kv_cache_dtype "auto" read
// as the model's dtype, the context length it leaves null learnt from /v1/models, and the
// scheduler's input limit.
TEST(EngineFixtures, SglangDiscoveryReadsServerInfoAndLearnsTheContext) {
  FakeServer server(serving({"sglang/server_info.http", "sglang/model_info.http", "sglang/models.http"}));
  HttpClient http(HttpClientOptions{});
  EngineClient client(endpoint_at(server, EngineKind::automatic), http);
  const EngineInfo& info = client.discover();
  EXPECT_EQ(info.kind, EngineKind::sglang);
  EXPECT_EQ(info.version, "0.5.23");
  EXPECT_EQ(info.model, "Qwen/Qwen2.5-7B-Instruct");
  EXPECT_EQ(info.kv_cache_dtype, "auto");
  EXPECT_EQ(info.model_dtype, "");
  EXPECT_EQ(reported_kv_label(info), "auto: " + std::string(engine_traits(EngineKind::sglang).auto_means));
  EXPECT_EQ(info.context_length, 32768);
  EXPECT_EQ(info.max_input_tokens, 32762);
  EXPECT_TRUE(info.notes.empty()) << info.notes.front();
  EXPECT_TRUE(asked(server, "GET /server_info"));
  EXPECT_TRUE(asked(server, "GET /model_info"));
  EXPECT_FALSE(asked(server, "GET /get_server_info")) << "the deprecated alias logs a warning per call";
  EXPECT_FALSE(asked(server, "GET /get_model_info"));
}

// An older SGLang serves only the deprecated names: discovery falls back to them, and says what
// the server's --preferred-sampling-params set that kvgate does not pin.
TEST(EngineFixtures, SglangDiscoveryFallsBackToTheOlderPaths) {
  FakeServer server(serving({"sglang/get_server_info.http", "sglang/get_model_info.http", "sglang/models.http"}));
  HttpClient http(HttpClientOptions{});
  EngineClient client(endpoint_at(server, EngineKind::sglang), http);
  const EngineInfo& info = client.discover();
  EXPECT_EQ(info.version, "0.5.23");
  EXPECT_EQ(reported_kv_label(info), "auto: the model's dtype, bfloat16");
  EXPECT_EQ(info.context_length, 32768);
  ASSERT_EQ(info.notes.size(), 1u);
  EXPECT_NE(info.notes[0].find("set stop, which kvgate's greedy requests do not pin"), std::string::npos) << info.notes[0];
  EXPECT_TRUE(asked(server, "GET /server_info"));
  EXPECT_TRUE(asked(server, "GET /get_server_info"));
}

// Issue 39 items 2 and 4: the greedy request pins SGLang's sampling and asks no logprobs; the
// stream's cumulative text and output_ids (two tokens in one chunk) give every id.
TEST(EngineFixtures, SglangGreedyStream) {
  FakeServer server(serving({"sglang/server_info.http", "sglang/model_info.http", "sglang/models.http",
                             "sglang/generate_stream.http"}));
  HttpClient http(HttpClientOptions{});
  EngineClient client(endpoint_at(server, EngineKind::sglang), http);
  GenerateRequest g;
  g.prompt_tokens = {1, 504, 3458, 314, 260};
  g.max_tokens = 4;
  const GenerationResult r = client.generate(g);
  ASSERT_EQ(r.completion.tokens.size(), 4u);
  const int32_t ids[4] = {12095, 374, 279, 6722};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(r.completion.tokens[i].id, ids[i]);
  EXPECT_EQ(r.completion.text, " Paris is the capital");
  EXPECT_EQ(r.completion.finish_reason, "length");
  EXPECT_EQ(r.completion.cached_prompt_tokens(), 3);
  EXPECT_EQ(r.token_ms.size(), 4u);
}

// ---- vLLM 0.34.0 ----

// Issue 39 item 3: vLLM reports its cache dtype in /metrics (vllm:cache_config_info), and "auto"
// there is the model's dtype, which vLLM does not name.
TEST(EngineFixtures, VllmDiscoveryReadsTheCacheDtypeFromMetrics) {
  FakeServer server(serving({"vllm/version.http", "vllm/models.http", "vllm/metrics.http"}));
  HttpClient http(HttpClientOptions{});
  EngineClient client(endpoint_at(server, EngineKind::automatic), http);
  const EngineInfo& info = client.discover();
  EXPECT_EQ(info.kind, EngineKind::vllm);
  EXPECT_EQ(info.version, "0.34.0");
  EXPECT_EQ(info.model, "Qwen/Qwen2.5-7B-Instruct");
  EXPECT_EQ(info.context_length, 32768);
  EXPECT_EQ(info.kv_cache_dtype, "auto");
  EXPECT_EQ(reported_kv_label(info), "auto: the model's dtype (vLLM does not report which)");
  EXPECT_TRUE(info.notes.empty());
  EXPECT_EQ(json::parse(info.raw)["/metrics"]["vllm:cache_config_info"]["block_size"], "16");
}

// Issue 39 items 2, 4 and 5: the greedy stream pins every sampling field generation_config.json
// could set, asks no logprobs (ids by return_token_ids, two in one chunk), and a default server's
// usage has no cached tokens: unknown, not zero. With --enable-prompt-tokens-details it has them.
TEST(EngineFixtures, VllmGreedyStreamWithAndWithoutPromptTokensDetails) {
  for (const char* stream : {"vllm/generate_stream.http", "vllm/generate_stream_details.http"}) {
    SCOPED_TRACE(stream);
    FakeServer server(serving({"vllm/version.http", "vllm/models.http", "vllm/metrics.http", stream}));
    HttpClient http(HttpClientOptions{});
    EngineClient client(endpoint_at(server, EngineKind::vllm), http);
    GenerateRequest g;
    g.prompt_tokens = {1, 504, 3458, 314, 260};
    g.max_tokens = 4;
    const GenerationResult r = client.generate(g);
    ASSERT_EQ(r.completion.tokens.size(), 4u);
    const int32_t ids[4] = {12095, 374, 279, 6722};
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(r.completion.tokens[i].id, ids[i]);
    EXPECT_EQ(r.completion.text, " Paris is the capital");
    EXPECT_EQ(r.completion.usage.prompt_tokens, 5);
    if (std::string(stream).find("details") != std::string::npos) EXPECT_EQ(r.completion.cached_prompt_tokens(), 3);
    else EXPECT_FALSE(r.completion.cached_prompt_tokens().has_value());
  }
}

TEST(EngineFixtures, VllmScoresPromptLogprobsWithTrueRanks) {
  FakeServer server(serving({"vllm/version.http", "vllm/models.http", "vllm/metrics.http", "vllm/score.http"}));
  HttpClient http(HttpClientOptions{});
  EngineClient client(endpoint_at(server, EngineKind::vllm), http);
  const ScoreResult r = client.score(fixture_span());
  ASSERT_EQ(r.tokens.size(), 3u);
  EXPECT_DOUBLE_EQ(*r.tokens[0].target_logprob, -2.718442440032959);
  EXPECT_DOUBLE_EQ(*r.tokens[2].target_logprob, -5.406250476837158);
  for (const ScoredToken& t : r.tokens) EXPECT_EQ(t.top.size(), 3u) << "ranks 1..3 only, the target's true rank apart";
  EXPECT_EQ(r.tokens[2].top[0].id, 216);
  EXPECT_FALSE(r.cached_prompt_tokens.has_value());
}

// ---- llama.cpp b11434 (captured from the real server) ----

const std::vector<std::string> kLlamaDiscovery = {"llama-server/props.http", "llama-server/models.http",
                                                  "llama-server/tokenize.http"};

std::vector<std::string> with(std::vector<std::string> names, std::initializer_list<const char*> more) {
  for (const char* m : more) names.emplace_back(m);
  return names;
}

// An emoji over several byte tokens: the stream withholds the tokens that end inside it and
// names only the completing token's id, so it carries fewer tokens than it generated; the whole
// answer (what the harness asks for then) lists every id. Both requests pinned, no n_probs.
TEST(EngineFixtures, LlamaServerWithholdsPartialUtf8TokensAndTheWholeAnswerListsThem) {
  FakeServer server(serving(with(kLlamaDiscovery, {"llama-server/generate_stream.http", "llama-server/generate.http"})));
  HttpClient http(HttpClientOptions{});
  EngineClient client(endpoint_at(server, EngineKind::automatic), http);
  const EngineInfo& info = client.discover();
  EXPECT_EQ(info.kind, EngineKind::llama_server);
  EXPECT_NE(info.version.find("b11434"), std::string::npos);
  EXPECT_EQ(info.context_length, 4096);
  EXPECT_EQ(info.plain_token, 30);
  EXPECT_EQ(info.kv_cache_dtype, "");
  GenerateRequest g;
  g.prompt_tokens = {504, 649, 33777, 327, 5587, 314};
  g.max_tokens = 8;
  const GenerationResult streamed = client.generate(g);
  EXPECT_EQ(streamed.completion.usage.completion_tokens, 8);
  ASSERT_EQ(streamed.completion.tokens.size(), 3u) << "two emoji of three byte tokens each arrive as one token each";
  EXPECT_EQ(streamed.completion.tokens[1].id, 231);
  g.stream = false;
  const GenerationResult whole = client.generate(g);
  ASSERT_EQ(whole.completion.tokens.size(), 8u);
  EXPECT_EQ(whole.completion.tokens[0].id, 476);
  EXPECT_EQ(whole.completion.tokens[3].id, 231);
  EXPECT_EQ(whole.completion.text.substr(0, streamed.completion.text.size()), streamed.completion.text);
}

// The scoring steps: prompt = context + span[0, i), the plain token forced by logit_bias, n_probs
// of the raw logits; each step's cache_n counts toward the cached tokens.
TEST(EngineFixtures, LlamaServerScoresOneStepPerSpanToken) {
  FakeServer server(serving(with(kLlamaDiscovery, {"llama-server/score_step0.http", "llama-server/score_step1.http"})));
  HttpClient http(HttpClientOptions{});
  EngineClient client(endpoint_at(server, EngineKind::llama_server), http);
  client.discover();
  ScoreRequest req;
  req.context = {504, 649, 33777, 327, 5587};
  req.span = {314, 476};
  req.top_logprobs = 3;
  const ScoreResult r = client.score(req);
  ASSERT_EQ(r.tokens.size(), 2u);
  for (const ScoredToken& t : r.tokens) EXPECT_EQ(t.top.size(), 3u);
  ASSERT_TRUE(r.tokens[1].target_logprob.has_value()) << "476 is step 1's argmax";
  EXPECT_DOUBLE_EQ(*r.tokens[1].target_logprob, -1.5143976211547852);
  EXPECT_EQ(r.tokens[1].top[0].id, 476);
  ASSERT_TRUE(r.cached_prompt_tokens.has_value());
  EXPECT_GE(*r.cached_prompt_tokens, 5);
}

// ---- the synthesised fake against the fixtures ----

bool keyed_by_token_id(const json& obj) {
  if (!obj.is_object() || obj.empty()) return false;
  for (const auto& [key, value] : obj.items())
    if (key.empty() || key.find_first_not_of("0123456789") != std::string::npos) return false;
  return true;
}

// Every key the synthesised body has, the engine's has too, with a value of the same JSON kind;
// a null the fake sends may stand for any value the engine leaves unset, never the other way
// round (the engine's null where the fake has a number is what hid SGLang's unscored row).
// Arrays are compared element by element as far as both go, dicts keyed by token id value by
// value against the engine's first.
void expect_same_shape(const json& fake, const json& real, const std::string& where) {
  auto kind = [](const json& j) {
    return j.is_number() ? std::string("number") : std::string(j.type_name());
  };
  if (fake.is_null()) return;
  ASSERT_EQ(kind(fake), kind(real)) << where << ": fake " << fake.dump().substr(0, 80) << " vs engine "
                                    << real.dump().substr(0, 80);
  if (keyed_by_token_id(fake) && keyed_by_token_id(real)) {
    for (const auto& [key, value] : fake.items()) expect_same_shape(value, real.begin().value(), where + "." + key);
  } else if (fake.is_object()) {
    for (const auto& [key, value] : fake.items()) {
      ASSERT_TRUE(real.contains(key)) << where << ": the fake sends " << key << ", the engine does not";
      expect_same_shape(value, real[key], where + "." + key);
    }
  } else if (fake.is_array()) {
    for (size_t i = 0; i < std::min(fake.size(), real.size()); ++i)
      expect_same_shape(fake[i], real[i], where + "[" + std::to_string(i) + "]");
  }
}

// The fake's answer to a fixture's request, as the body a non-streamed answer has or the list of
// SSE payloads of a stream.
std::string fake_answer(Personality who, const Fixture& f) {
  FakeServerOptions o;
  o.personality = who;
  FakeServer server(o);
  HttpRequest r;
  r.endpoint = "fake";
  r.method = f.method;
  r.url = server.url() + f.path;
  if (!f.request.is_null()) r.body = f.request.dump();
  return fetch(r, RetryPolicy{1, {}, {}});
}

TEST(FakeLayout, SynthesisedBodiesHaveTheFixturesShape) {
  const std::pair<Personality, const char*> engines[] = {
      {Personality::vllm, "vllm"}, {Personality::sglang, "sglang"}, {Personality::llama_server, "llama-server"}};
  int compared = 0;
  for (const auto& [who, dir] : engines)
    for (const Fixture& f : kvgate::testing::engine_fixtures(dir)) {
      SCOPED_TRACE(f.file);
      if (f.content_type.rfind("text/plain", 0) == 0) continue;  // /metrics: checked by discovery tests
      const std::string fake = fake_answer(who, f);
      if (f.content_type == "text/event-stream") {
        const std::vector<std::string> a = kvgate::testing::sse_payloads(fake), b = kvgate::testing::sse_payloads(f.body);
        ASSERT_GE(a.size(), 2u);
        ASSERT_GE(b.size(), 2u);
        EXPECT_EQ(a.back() == "[DONE]", b.back() == "[DONE]") << "a stream ends the engine's way";
        const size_t last_a = a.back() == "[DONE]" ? a.size() - 2 : a.size() - 1;
        const size_t last_b = b.back() == "[DONE]" ? b.size() - 2 : b.size() - 1;
        expect_same_shape(json::parse(a.front()), json::parse(b.front()), "first chunk");
        expect_same_shape(json::parse(a[last_a]), json::parse(b[last_b]), "last chunk");
      } else {
        expect_same_shape(json::parse(fake), json::parse(f.body), "body");
      }
      ++compared;
    }
  EXPECT_GE(compared, 18);
}

}  // namespace
}  // namespace kvgate::serving
