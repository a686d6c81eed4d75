#include "serving/endpoint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "core/error.h"

namespace kvgate::serving {
namespace {

// The message and exit code of the error `f` throws.
std::pair<std::string, int> failure(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.what(), e.exit_code()};
  }
  return {"", 0};
}

void expect_input_error(const std::function<void()>& f, const std::string& needle) {
  const auto [message, code] = failure(f);
  EXPECT_EQ(code, 2) << message;
  EXPECT_NE(message.find(needle), std::string::npos) << "message: " << message << "\nexpected to contain: " << needle;
}

TEST(EndpointFlag, ParsesPairsAndNormalizesUrls) {
  const auto eps = parse_endpoint_flag("f16=http://a:8000/v1/,fp8=https://b.example/serve,q8_0/q4_0=http://10.0.0.1:9");
  ASSERT_EQ(eps.size(), 3u);
  EXPECT_EQ(eps[0].name, "f16");
  EXPECT_EQ(eps[0].url, "http://a:8000");
  EXPECT_EQ(eps[1].url, "https://b.example/serve");
  EXPECT_EQ(eps[2].name, "q8_0/q4_0");
  EXPECT_EQ(eps[2].kind, EngineKind::automatic);
  EXPECT_EQ(eps[2].max_inflight, 64);
}

TEST(EndpointFlag, RejectsMalformedPairs) {
  expect_input_error([] { parse_endpoint_flag("http://a:8000"); }, "--endpoint: \"http://a:8000\": expected NAME=URL");
  expect_input_error([] { parse_endpoint_flag("a=ftp://x"); }, "URL must start with http:// or https://");
  expect_input_error([] { parse_endpoint_flag("a=http://"); }, "has no host");
  expect_input_error([] { parse_endpoint_flag("a=http://x,a=http://y"); }, "\"a\" is given twice");
  expect_input_error([] { parse_endpoint_flag("=http://x"); }, "name must be");
  expect_input_error([] { parse_endpoint_flag("a b=http://x"); }, "name must be");
  expect_input_error([] { parse_endpoint_flag("a=http://x,"); }, "expected NAME=URL");
  expect_input_error([] { parse_endpoint_flag("a=http://x/v1?key=1"); }, "query");
}

TEST(EndpointsFile, ReadsEveryField) {
  const auto eps = parse_endpoints_json(R"({"endpoints": [
    {"name": "fp8", "url": "http://b:8000", "model": "meta/llama", "engine": "vllm", "api_key_env": "KEY_VAR",
     "headers": {"X-Team": "eval"}, "timeout_s": 30, "connect_timeout_s": 1.5, "stall_timeout_s": 5,
     "max_inflight": 256, "kv": "fp8_e4m3"},
    {"name": "q4_0", "url": "http://c:8080", "engine": "llama-server"}]})",
                                        "eps.json");
  ASSERT_EQ(eps.size(), 2u);
  const EndpointConfig& a = eps[0];
  EXPECT_EQ(a.model, "meta/llama");
  EXPECT_EQ(a.kind, EngineKind::vllm);
  EXPECT_EQ(a.api_key_env, "KEY_VAR");
  ASSERT_EQ(a.headers.size(), 1u);
  EXPECT_EQ(a.headers[0].second, "eval");
  EXPECT_EQ(a.timeouts.total.count(), 30000);
  EXPECT_EQ(a.timeouts.connect.count(), 1500);
  EXPECT_EQ(a.timeouts.stall.count(), 5000);
  EXPECT_EQ(a.max_inflight, 256);
  EXPECT_EQ(a.kv, "fp8_e4m3");
  EXPECT_EQ(eps[1].kind, EngineKind::llama_server);
  // A bare array is accepted too.
  EXPECT_EQ(parse_endpoints_json(R"([{"name": "x", "url": "http://h"}])", "f").size(), 1u);
}

TEST(EndpointsFile, ErrorsNameTheFileAndField) {
  auto parse = [](const std::string& text) { return [text] { parse_endpoints_json(text, "eps.json"); }; };
  expect_input_error(parse(R"({"endpoints": [{"name": "a", "url": "http://h", "timeot_s": 3}]})"),
                     "eps.json: endpoints[0].timeot_s: unknown field");
  expect_input_error(parse(R"({"endpoints": [{"name": "a"}]})"), "eps.json: endpoints[0].url: missing");
  expect_input_error(parse(R"({"endpoints": [{"name": "a", "url": "h:80"}]})"), "endpoints[0].url: must start with http");
  expect_input_error(parse(R"({"endpoints": [{"name": "a", "url": "http://h", "engine": "tgi"}]})"),
                     "endpoints[0].engine: \"tgi\" is not one of");
  expect_input_error(parse(R"({"endpoints": [{"name": "a", "url": "http://h", "timeout_s": -1}]})"), "endpoints[0].timeout_s: must be > 0");
  expect_input_error(parse(R"({"endpoints": [{"name": "a", "url": "http://h", "timeout_s": "5"}]})"), "timeout_s: must be a number");
  expect_input_error(parse(R"({"endpoints": [{"name": "a", "url": "http://h", "max_inflight": 0}]})"), "endpoints[0].max_inflight");
  expect_input_error(parse(R"({"endpoints": [{"name": "a", "url": "http://h", "headers": {"X": 1}}]})"),
                     "endpoints[0].headers.X: must be a string");
  expect_input_error(parse(R"({"endpoints": [{"name": "a", "url": "http://h", "headers": {"Bad Name": "v"}}]})"),
                     "is not a valid header name");
  expect_input_error(parse(R"({"endpoints": [{"name": "a", "url": "http://h"}, {"name": "a", "url": "http://i"}]})"),
                     "endpoints[1].name: \"a\" is used by an earlier endpoint");
  expect_input_error(parse(R"({"endpoints": []})"), "eps.json: endpoints: must be a non-empty array");
  expect_input_error(parse(R"({"endpoint": []})"), "eps.json: endpoint: unknown top-level field");
  expect_input_error(parse("{\"endpoints\": [}"), "eps.json: at byte");
  expect_input_error([] { load_endpoints_file("/nonexistent/eps.json"); }, "/nonexistent/eps.json");
  // A huge user value is quoted cut, not whole.
  const auto [message, code] = failure([] { parse_endpoint_flag(std::string(100000, 'x')); });
  EXPECT_EQ(code, 2);
  EXPECT_LT(message.size(), 300u) << message.size();
}

TEST(EndpointsFile, LoadsFromDisk) {
  const std::string path = ::testing::TempDir() + "kvgate_endpoints_test.json";
  std::ofstream(path) << R"({"endpoints": [{"name": "f16", "url": "http://127.0.0.1:1/"}]})";
  const auto eps = load_endpoints_file(path);
  ASSERT_EQ(eps.size(), 1u);
  EXPECT_EQ(eps[0].url, "http://127.0.0.1:1");
  std::remove(path.c_str());
}

TEST(RequestHeaders, ApiKeyFromTheEnvironmentNeverInMessages) {
  EndpointConfig e;
  e.name = "fp8";
  e.url = "http://user:pw@h:1";
  e.headers = {{"X-Team", "eval"}};
  e.api_key_env = "KVGATE_TEST_API_KEY_VAR";
  ::unsetenv("KVGATE_TEST_API_KEY_VAR");
  const auto [message, code] = failure([&] { request_headers(e); });
  EXPECT_EQ(code, 3);
  EXPECT_NE(message.find("endpoint 'fp8' (http://***@h:1): environment variable KVGATE_TEST_API_KEY_VAR"), std::string::npos)
      << message;
  ::setenv("KVGATE_TEST_API_KEY_VAR", "sk-secret-123", 1);
  const auto headers = request_headers(e);
  EXPECT_EQ(headers, (std::vector<std::string>{"X-Team: eval", "Authorization: Bearer sk-secret-123"}));
  ::unsetenv("KVGATE_TEST_API_KEY_VAR");
}

TEST(RedactUrl, HidesCredentialsOnly) {
  EXPECT_EQ(redact_url("http://h:80/x"), "http://h:80/x");
  EXPECT_EQ(redact_url("https://u:p@h/x@y"), "https://***@h/x@y");
}

TEST(EngineKindNames, RoundTrip) {
  for (EngineKind k : {EngineKind::automatic, EngineKind::vllm, EngineKind::sglang, EngineKind::llama_server, EngineKind::openai})
    EXPECT_EQ(parse_engine_kind(engine_kind_name(k)), k);
  EXPECT_EQ(parse_engine_kind("llama.cpp"), EngineKind::llama_server);
  EXPECT_FALSE(parse_engine_kind("tgi").has_value());
}

}  // namespace
}  // namespace kvgate::serving
