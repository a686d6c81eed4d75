// EngineClient against the fake server in each engine's dialect: discovery, greedy generation
// with top-k logprobs, teacher-forced span scoring (which must decode to the same numbers in
// every dialect), and the faults surfacing as EndpointError naming the endpoint (exit 3).
#include "serving/engine_client.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/serving/fake_server.h"

namespace kvgate::serving {
namespace {

using kvgate::testing::fake_distribution;
using kvgate::testing::FakeServer;
using kvgate::testing::FakeServerOptions;
using kvgate::testing::Fault;
using kvgate::testing::Personality;
using std::chrono::milliseconds;

HttpClientOptions fast_options() {
  HttpClientOptions o;
  o.retry.max_attempts = 3;
  o.retry.base_delay = milliseconds(5);
  o.retry.max_delay = milliseconds(20);
  return o;
}

EndpointConfig endpoint_for(const FakeServer& server, EngineKind kind = EngineKind::automatic) {
  EndpointConfig e;
  e.name = "q4_0";
  e.url = server.url();
  e.kind = kind;
  e.timeouts.connect = milliseconds(1000);
  e.timeouts.total = milliseconds(5000);
  e.timeouts.stall = milliseconds(300);
  return e;
}

struct Case {
  Personality personality;
  EngineKind kind;
};

const Case kScoringEngines[] = {{Personality::vllm, EngineKind::vllm},
                                {Personality::sglang, EngineKind::sglang},
                                {Personality::llama_server, EngineKind::llama_server}};

TEST(EngineClient, DiscoversEachEngineKind) {
  const Case cases[] = {{Personality::vllm, EngineKind::vllm},
                        {Personality::sglang, EngineKind::sglang},
                        {Personality::llama_server, EngineKind::llama_server},
                        {Personality::openai, EngineKind::openai}};
  for (const Case& c : cases) {
    FakeServerOptions o;
    o.personality = c.personality;
    FakeServer server(o);
    HttpClient http(fast_options());
    EngineClient client(endpoint_for(server), http);
    const EngineInfo& info = client.discover();
    EXPECT_EQ(client.kind(), c.kind) << engine_kind_name(c.kind);
    EXPECT_EQ(info.kind, c.kind);
    EXPECT_EQ(client.model(), "fake-model");
    // Both engines' default; llama-server and the plain API do not say.
    EXPECT_EQ(info.kv_cache_dtype, c.kind == EngineKind::sglang || c.kind == EngineKind::vllm ? "auto" : "");
    const char* version = c.kind == EngineKind::llama_server ? "b0-fake" : c.kind == EngineKind::openai ? "" : "0.0.0-fake";
    EXPECT_EQ(info.version, version);
    EXPECT_EQ(info.context_length, 4096);
  }
}

TEST(EngineClient, GeneratesWithTopLogprobsInEveryDialect) {
  const Case cases[] = {{Personality::vllm, EngineKind::vllm},
                        {Personality::sglang, EngineKind::sglang},
                        {Personality::llama_server, EngineKind::llama_server},
                        {Personality::openai, EngineKind::openai}};
  for (const Case& c : cases) {
    SCOPED_TRACE(engine_kind_name(c.kind));
    FakeServerOptions o;
    o.personality = c.personality;
    FakeServer server(o);
    HttpClient http(fast_options());
    EngineClient client(endpoint_for(server, c.kind), http);
    GenerateRequest g;
    g.prompt_tokens = {5, 6, 7};
    g.max_tokens = 6;
    g.top_logprobs = 5;
    const GenerationResult r = client.generate(g);
    const Completion& out = r.completion;
    ASSERT_EQ(out.tokens.size(), 6u);
    EXPECT_EQ(out.text, "The answer is 42. It");
    EXPECT_EQ(out.finish_reason, "length");
    std::vector<int32_t> prefix = g.prompt_tokens;
    for (size_t i = 0; i < out.tokens.size(); ++i) {
      const auto expected = fake_distribution(prefix, 5);
      ASSERT_EQ(out.tokens[i].top.size(), 5u);
      for (size_t j = 0; j < 5; ++j) {
        if (c.kind != EngineKind::openai) {
          EXPECT_EQ(out.tokens[i].top[j].id, expected.top[j].first);
        }
        EXPECT_NEAR(out.tokens[i].top[j].logprob, expected.top[j].second, 1e-12);
      }
      if (c.kind != EngineKind::openai) {
        EXPECT_EQ(out.tokens[i].id, 1000 + static_cast<int32_t>(i));
      }
      prefix.push_back(1000 + static_cast<int32_t>(i));
    }
    ASSERT_EQ(r.token_ms.size(), 6u);
    EXPECT_GE(r.token_ms.front(), 0.0);
    for (size_t i = 1; i < r.token_ms.size(); ++i) EXPECT_LE(r.token_ms[i - 1], r.token_ms[i]);
    EXPECT_EQ(out.usage.prompt_tokens, 3);
    // The engine was sent kvgate's token ids, not text.
    const auto sent = nlohmann::json::parse(server.requests().back().body);
    EXPECT_EQ(sent.contains("input_ids") ? sent["input_ids"] : sent["prompt"], nlohmann::json::array({5, 6, 7}));
  }
}

TEST(EngineClient, ScoringDecodesToTheSameNumbersInEveryDialect) {
  ScoreRequest req;
  req.context = {3, 1, 4, 1, 5};
  req.span = {9, 2, 6};
  req.top_logprobs = 4;
  for (const Case& c : kScoringEngines) {
    SCOPED_TRACE(engine_kind_name(c.kind));
    FakeServerOptions o;
    o.personality = c.personality;
    FakeServer server(o);
    HttpClient http(fast_options());
    EngineClient client(endpoint_for(server, c.kind), http);
    const ScoreResult r = client.score(req);
    ASSERT_EQ(r.tokens.size(), 3u);
    std::vector<int32_t> prefix = req.context;
    for (size_t i = 0; i < 3; ++i) {
      const auto expected = fake_distribution(prefix, 4);
      EXPECT_EQ(r.tokens[i].target, req.span[i]);
      ASSERT_EQ(r.tokens[i].top.size(), 4u);
      for (size_t j = 0; j < 4; ++j) {
        EXPECT_EQ(r.tokens[i].top[j].id, expected.top[j].first);
        EXPECT_NEAR(r.tokens[i].top[j].logprob, expected.top[j].second, 1e-12);
      }
      if (c.kind == EngineKind::llama_server) {
        EXPECT_FALSE(r.tokens[i].target_logprob.has_value());  // the target is outside the fake's top 4
      } else {
        ASSERT_TRUE(r.tokens[i].target_logprob.has_value());
        EXPECT_NEAR(*r.tokens[i].target_logprob, expected.logprob_of(req.span[i]), 1e-12);
      }
      prefix.push_back(req.span[i]);
    }
    int posts = 0;
    for (const auto& sent : server.requests()) posts += sent.method == "POST" ? 1 : 0;
    if (c.kind == EngineKind::llama_server) {
      EXPECT_EQ(posts, 3);  // one step per span token
      EXPECT_EQ(r.cached_prompt_tokens, 5 + 6);  // steps 2 and 3 reuse the slot's prefix
    } else {
      EXPECT_EQ(posts, 1);
    }
  }
}

TEST(EngineClient, StreamFaultsAreEndpointErrorsExitThree) {
  const std::pair<Fault, std::string> faults[] = {{Fault::invalid_json_chunk, "is not valid JSON"},
                                                  {Fault::truncated_stream, "without a terminal marker"},
                                                  {Fault::garbage_body, "without a terminal marker"},
                                                  {Fault::stall_mid_stream, "the stream stalled"},
                                                  {Fault::close_mid_stream, "had been consumed"}};
  for (const auto& [fault, needle] : faults) {
    FakeServer server;
    HttpClient http(fast_options());
    EngineClient client(endpoint_for(server, EngineKind::vllm), http);
    client.discover();
    server.script({fault});
    GenerateRequest g;
    g.prompt_tokens = {1};
    g.max_tokens = 8;
    try {
      client.generate(g);
      ADD_FAILURE() << "no error for fault " << static_cast<int>(fault);
    } catch (const EndpointError& e) {
      EXPECT_EQ(e.exit_code(), 3);
      const std::string m = e.what();
      EXPECT_NE(m.find("endpoint 'q4_0' (" + server.url()), std::string::npos) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << m;
    }
    // The next request on the same client works: a failure poisons nothing.
    EXPECT_EQ(client.generate(g).completion.tokens.size(), 8u);
  }
}

TEST(EngineClient, ScoringFailuresNameTheEndpoint) {
  FakeServerOptions o;
  o.personality = Personality::llama_server;
  FakeServer server(o);
  HttpClient http(fast_options());
  EngineClient client(endpoint_for(server, EngineKind::llama_server), http);
  server.set_default_fault(Fault::status_500);
  ScoreRequest req;
  req.context = {1};
  req.span = {2};
  try {
    client.score(req);
    FAIL() << "no error";
  } catch (const EndpointError& e) {
    EXPECT_EQ(e.failure(), Failure::http_status);
    EXPECT_NE(std::string(e.what()).find("endpoint 'q4_0' (" + server.url() + "/completion): HTTP 500"), std::string::npos)
        << e.what();
  }
  server.set_default_fault(Fault::none);
  EndpointConfig generic = endpoint_for(server, EngineKind::openai);
  EngineClient openai(generic, http);
  EXPECT_THROW(openai.score(req), Error);  // usage: the OpenAI API cannot score a span
}

TEST(EngineClient, ManyConcurrentGenerationsShareOneThread) {
  FakeServer server;
  HttpClient http(fast_options());
  EndpointConfig e = endpoint_for(server, EngineKind::vllm);
  e.max_inflight = 16;
  EngineClient client(e, http);
  client.discover();
  int ok = 0, tokens = 0;
  for (int i = 0; i < 40; ++i) {
    GenerateRequest g;
    g.prompt_tokens = {i + 1, 2};
    g.max_tokens = 5;
    client.submit_generate(g, [&](GenerationOutcome o) {
      ok += o.ok ? 1 : 0;
      tokens += static_cast<int>(o.result.completion.tokens.size());
    });
  }
  http.run();
  EXPECT_EQ(ok, 40);
  EXPECT_EQ(tokens, 200);
  EXPECT_LE(http.max_active_seen(), 16u);
}

TEST(EngineClient, MissingApiKeyIsAnEnvironmentErrorAtConstruction) {
  FakeServer server;
  HttpClient http(fast_options());
  EndpointConfig e = endpoint_for(server, EngineKind::vllm);
  e.api_key_env = "KVGATE_TEST_UNSET_KEY";
  ::unsetenv("KVGATE_TEST_UNSET_KEY");
  try {
    EngineClient client(e, http);
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_EQ(err.exit_code(), 3);
  }
  ::setenv("KVGATE_TEST_UNSET_KEY", "k-123", 1);
  EngineClient client(e, http);
  client.discover();
  EXPECT_EQ(server.requests().back().headers.at("authorization"), "Bearer k-123");
  ::unsetenv("KVGATE_TEST_UNSET_KEY");
}

}  // namespace
}  // namespace kvgate::serving
