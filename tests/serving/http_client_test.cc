// The HTTP client against the fake server's faults: what is retried, what fails, and that every
// failure names the endpoint and ends within the configured timeouts (never a hang). Timeouts
// and backoff are kept small so the whole file runs in a few seconds.
#include "serving/http_client.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/error.h"
#include "tests/serving/fake_server.h"

namespace kvgate::serving {
namespace {

using kvgate::testing::FakeServer;
using kvgate::testing::FakeServerOptions;
using kvgate::testing::Fault;
using std::chrono::milliseconds;

HttpClientOptions fast_options() {
  HttpClientOptions o;
  o.retry.max_attempts = 3;
  o.retry.base_delay = milliseconds(5);
  o.retry.max_delay = milliseconds(20);
  o.seed = 42;
  return o;
}

HttpRequest stream_request(const FakeServer& server, int max_tokens = 4) {
  HttpRequest r;
  r.endpoint = "fp8";
  r.url = server.url() + "/v1/completions";
  r.body = R"({"prompt":[1,2,3],"max_tokens":)" + std::to_string(max_tokens) + R"(,"stream":true})";
  r.timeouts.connect = milliseconds(1000);
  r.timeouts.total = milliseconds(3000);
  r.timeouts.stall = milliseconds(300);
  return r;
}

struct Result {
  HttpOutcome outcome;
  std::string body;
};

Result run_one(HttpClient& client, const HttpRequest& request) {
  auto result = std::make_shared<Result>();
  client.submit(request, {[result](std::string_view b, SteadyClock::time_point) { result->body.append(b); },
                          [result](const HttpOutcome& o) { result->outcome = o; }});
  client.run();
  return *result;
}

void expect_names_endpoint(const HttpOutcome& o, const FakeServer& server) {
  EXPECT_NE(o.message.find("endpoint 'fp8' (" + server.url() + "/v1/completions): "), std::string::npos) << o.message;
}

TEST(HttpClient, StreamsABodyAndReusesTheConnection) {
  FakeServer server;
  HttpClient client(fast_options());
  for (int i = 0; i < 5; ++i) {
    const Result r = run_one(client, stream_request(server));
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.message;
    EXPECT_EQ(r.outcome.status, 200);
    EXPECT_EQ(r.outcome.attempts, 1);
    EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos);
    EXPECT_EQ(r.outcome.body_bytes, r.body.size());
    EXPECT_LE(r.outcome.submitted, r.outcome.first_byte);
    EXPECT_LE(r.outcome.first_byte, r.outcome.finished);
  }
  EXPECT_EQ(server.connections_accepted(), 1);  // keep-alive: five requests, one connection
  EXPECT_EQ(client.connections_opened(), 1);
}

TEST(HttpClient, RetriesRateLimitsServerErrorsAndEarlyCloses) {
  for (Fault fault : {Fault::status_429, Fault::status_500, Fault::close_before_response}) {
    FakeServer server;
    server.script({fault, fault});
    HttpClient client(fast_options());
    const Result r = run_one(client, stream_request(server));
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.message;
    EXPECT_EQ(r.outcome.attempts, 3);
    EXPECT_NE(r.body.find("[DONE]"), std::string::npos);
    EXPECT_EQ(r.body.find("rate limited"), std::string::npos);  // a failed attempt's body never reaches the consumer
  }
}

TEST(HttpClient, GivesUpAfterMaxAttemptsNamingEndpointAndStatus) {
  FakeServer server;
  server.set_default_fault(Fault::status_500);
  HttpClient client(fast_options());
  const Result r = run_one(client, stream_request(server));
  ASSERT_FALSE(r.outcome.ok());
  EXPECT_EQ(r.outcome.failure, Failure::http_status);
  EXPECT_EQ(r.outcome.attempts, 3);
  expect_names_endpoint(r.outcome, server);
  EXPECT_NE(r.outcome.message.find("HTTP 500 (after 3 attempts): {\"error\":{\"message\":\"engine overloaded\""), std::string::npos)
      << r.outcome.message;
  EXPECT_TRUE(r.body.empty());
}

TEST(HttpClient, ClientErrorsAreNotRetried) {
  FakeServer server;
  HttpClient client(fast_options());
  HttpRequest r = stream_request(server);
  r.url = server.url() + "/no/such/path";
  const Result res = run_one(client, r);
  EXPECT_EQ(res.outcome.failure, Failure::http_status);
  EXPECT_EQ(res.outcome.status, 404);
  EXPECT_EQ(res.outcome.attempts, 1);
}

TEST(HttpClient, ConnectionRefusedFailsAfterRetries) {
  int port;
  {
    FakeServer gone;
    port = gone.port();
  }  // the port is closed now
  HttpClient client(fast_options());
  HttpRequest r;
  r.endpoint = "fp8";
  r.method = "GET";
  r.url = "http://127.0.0.1:" + std::to_string(port) + "/v1/models";
  r.timeouts.connect = milliseconds(500);
  const Result res = run_one(client, r);
  EXPECT_EQ(res.outcome.failure, Failure::connect);
  EXPECT_EQ(res.outcome.attempts, 3);
  EXPECT_NE(res.outcome.message.find("endpoint 'fp8' (http://127.0.0.1:" + std::to_string(port) + "/v1/models): no response"),
            std::string::npos)
      << res.outcome.message;
}

TEST(HttpClient, SlowHeadersWithinTheTotalTimeoutSucceed) {
  FakeServerOptions o;
  o.slow_headers_ms = 200;
  FakeServer server(o);
  server.script({Fault::slow_headers});
  HttpClient client(fast_options());
  const Result r = run_one(client, stream_request(server));  // stall 300 ms applies only once the body started
  ASSERT_TRUE(r.outcome.ok()) << r.outcome.message;
  EXPECT_EQ(r.outcome.attempts, 1);
}

TEST(HttpClient, SlowHeadersBeyondTheTotalTimeoutFailWithoutRetry) {
  FakeServerOptions o;
  o.slow_headers_ms = 5000;
  FakeServer server(o);
  server.set_default_fault(Fault::slow_headers);
  HttpClient client(fast_options());
  HttpRequest req = stream_request(server);
  req.timeouts.total = milliseconds(250);
  const auto t0 = SteadyClock::now();
  const Result r = run_one(client, req);
  EXPECT_LT(SteadyClock::now() - t0, milliseconds(4000));  // bounded by the timeout, not the server
  EXPECT_EQ(r.outcome.failure, Failure::timeout);
  EXPECT_EQ(r.outcome.attempts, 1);
  expect_names_endpoint(r.outcome, server);
  EXPECT_NE(r.outcome.message.find("total timeout 250 ms, waiting for the response"), std::string::npos) << r.outcome.message;
}

TEST(HttpClient, StallMidStreamFailsOnceTheBodyStarted) {
  FakeServer server;
  server.script({Fault::stall_mid_stream});
  HttpClient client(fast_options());
  const Result r = run_one(client, stream_request(server, 8));
  EXPECT_EQ(r.outcome.failure, Failure::stall);
  EXPECT_EQ(r.outcome.attempts, 1);  // bytes were consumed: no silent retry
  EXPECT_GT(r.outcome.body_bytes, 0u);
  expect_names_endpoint(r.outcome, server);
  EXPECT_NE(r.outcome.message.find("stall timeout 300 ms"), std::string::npos) << r.outcome.message;
}

TEST(HttpClient, CloseMidStreamIsABrokenRequestNotARetry) {
  FakeServer server;
  server.script({Fault::close_mid_stream});
  HttpClient client(fast_options());
  const Result r = run_one(client, stream_request(server, 8));
  EXPECT_EQ(r.outcome.failure, Failure::broken);
  EXPECT_EQ(r.outcome.attempts, 1);
  expect_names_endpoint(r.outcome, server);
  EXPECT_NE(r.outcome.message.find("bytes of the response had been consumed"), std::string::npos) << r.outcome.message;
  EXPECT_EQ(server.requests_served(), 1);
}

TEST(HttpClient, ConsumerRejectionFailsTheTransfer) {
  FakeServer server;
  server.script({Fault::garbage_body});
  HttpClient client(fast_options());
  HttpOutcome outcome;
  client.submit(stream_request(server), {[](std::string_view b, SteadyClock::time_point) {
                                           if (b.find("<html>") != std::string_view::npos) throw Error(ErrorKind::input, "not an event stream");
                                         },
                                         [&](const HttpOutcome& o) { outcome = o; }});
  client.run();
  EXPECT_EQ(outcome.failure, Failure::consumer);
  expect_names_endpoint(outcome, server);
  EXPECT_NE(outcome.message.find("invalid response after"), std::string::npos) << outcome.message;
  EXPECT_NE(outcome.message.find("not an event stream"), std::string::npos) << outcome.message;
}

TEST(HttpClient, QueueLimitBoundsTransfersOnTheWire) {
  FakeServer server;
  server.set_default_fault(Fault::hold);
  HttpClient client(fast_options());
  client.set_queue_limit("fp8", 3);
  int done = 0;
  for (int i = 0; i < 10; ++i) {
    HttpRequest r = stream_request(server);
    r.queue = "fp8";
    r.timeouts.total = milliseconds(5000);
    client.submit(r, {nullptr, [&](const HttpOutcome& o) { done += o.ok() ? 1 : 0; }});
  }
  const auto deadline = SteadyClock::now() + milliseconds(3000);
  while (server.held_now() < 3 && SteadyClock::now() < deadline) client.poll(milliseconds(10));
  EXPECT_EQ(client.active(), 3u);
  for (int i = 0; i < 10; ++i) client.poll(milliseconds(5));
  EXPECT_EQ(server.max_held(), 3);
  server.set_default_fault(Fault::none);
  server.release_held();
  client.run();
  EXPECT_EQ(done, 10);
  EXPECT_EQ(client.max_active_seen(), 3u);
}

TEST(HttpClient, HeadersAreSentButNeverPrinted) {
  FakeServer server;
  server.set_default_fault(Fault::status_500);
  HttpClient client(fast_options());
  HttpRequest r = stream_request(server);
  r.headers = {"Authorization: Bearer sk-very-secret", "X-Team: eval"};
  const Result res = run_one(client, r);
  ASSERT_FALSE(res.outcome.ok());
  EXPECT_EQ(res.outcome.message.find("sk-very-secret"), std::string::npos);
  const auto requests = server.requests();
  ASSERT_FALSE(requests.empty());
  EXPECT_EQ(requests[0].headers.at("authorization"), "Bearer sk-very-secret");
  EXPECT_EQ(requests[0].headers.at("x-team"), "eval");
  EXPECT_EQ(requests[0].headers.at("content-type"), "application/json");
}

TEST(HttpClient, FetchThrowsAnEnvironmentError) {
  FakeServer server;
  HttpRequest r = stream_request(server);
  r.method = "GET";
  r.url = server.url() + "/v1/models";
  EXPECT_NE(fetch(r).find("fake-model"), std::string::npos);
  r.url = server.url() + "/missing";
  try {
    fetch(r);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 3);
    EXPECT_NE(std::string(e.what()).find("HTTP 404"), std::string::npos);
  }
}

TEST(Backoff, ExponentialCappedJitteredAndSeeded) {
  RetryPolicy p;
  p.base_delay = milliseconds(100);
  p.max_delay = milliseconds(1000);
  Rng a(7), b(7);
  for (int retry = 1; retry <= 8; ++retry) {
    const auto d = backoff_delay(p, retry, a);
    EXPECT_EQ(d, backoff_delay(p, retry, b));  // same seed, same delays
    const double full = std::min(1000.0, 100.0 * (1 << (retry - 1)));
    EXPECT_GE(d.count(), static_cast<int64_t>(full * 0.5) - 1);
    EXPECT_LT(d.count(), static_cast<int64_t>(full));
  }
  Rng c(1);
  EXPECT_EQ(backoff_delay(p, 1, c, milliseconds(700)).count(), 700);   // Retry-After raises it
  EXPECT_EQ(backoff_delay(p, 1, c, milliseconds(9000)).count(), 1000);  // ... up to the cap
}

}  // namespace
}  // namespace kvgate::serving
