// Engine-mode client throughput (docs/perf.md, "Engine-mode HTTP client"): the serving client
// must not be the bottleneck of an eval or a load replay. Three measurements, each reported
// against the goal of issue 13:
//   parse      SSE + JSON parsing of canned vLLM chunks from memory, one thread: tokens per
//              CPU-second (goal >= 5,000 streamed tokens/s on one core).
//   stream     the same over HTTP from a local fake server (tests/serving/fake_server.h) with
//              several requests at once: tokens per CPU-second of the client thread (the
//              thread that drives libcurl and parses), and wall-clock tokens/s.
//   inflight   requests held open by the server: the most the client kept on the wire at once
//              (goal >= 200).
// Usage: serving_bench [--tokens N] [--requests N] [--concurrency N] [--inflight N] [--top-k K]
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "serving/completion.h"
#include "serving/engine_client.h"
#include "tests/serving/fake_server.h"

namespace {

using kvgate::serving::SteadyClock;
namespace serving = kvgate::serving;
namespace fake = kvgate::testing;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double seconds_since(SteadyClock::time_point t0) { return std::chrono::duration<double>(SteadyClock::now() - t0).count(); }

struct Options {
  int tokens = 256;       // per request
  int requests = 64;
  int concurrency = 8;
  int inflight = 256;
  int top_k = 20;
};

// One vLLM-style chunk with k alternatives, as the fake server writes it.
std::string vllm_chunk(int i, int k) {
  nlohmann::json top = nlohmann::json::object();
  for (int j = 0; j < k; ++j) top["token_id:" + std::to_string(1000 + j * 7 + i % 13)] = -0.5 - j * 0.25;
  nlohmann::json c = {{"index", 0}, {"text", " tok"}, {"finish_reason", nullptr}, {"token_ids", {1000 + i}}};
  if (k > 0)
    c["logprobs"] = {{"tokens", {"token_id:" + std::to_string(1000 + i)}},
                     {"token_logprobs", {-0.5}},
                     {"top_logprobs", {top}},
                     {"text_offset", {0}}};
  return "data: " + nlohmann::json{{"id", "cmpl-1"}, {"object", "text_completion"}, {"model", "m"}, {"choices", {c}}}.dump() + "\n\n";
}

void bench_parse(const Options& o) {
  for (int k : {0, o.top_k}) {
    std::string stream;
    const int n = 20000;
    for (int i = 0; i < n; ++i) stream += vllm_chunk(i, k);
    stream += "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
    const double cpu0 = thread_cpu_seconds();
    const auto t0 = SteadyClock::now();
    serving::CompletionStream s(serving::ResponseFormat::openai_completions);
    // Fed in TCP-sized pieces that split chunks anywhere, as a socket delivers them.
    for (size_t at = 0; at < stream.size(); at += 1448) s.feed(std::string_view(stream).substr(at, 1448), SteadyClock::now());
    const size_t tokens = s.finish().tokens.size();
    const double cpu = thread_cpu_seconds() - cpu0, wall = seconds_since(t0);
    std::printf("parse     top-%-2d  %6zu tokens  %7.1f MB  cpu %6.3f s  %9.0f tokens/cpu-s  (%.0fx the 5,000 goal)  wall %.3f s\n", k,
                tokens, stream.size() / 1e6, cpu, tokens / cpu, tokens / cpu / 5000.0, wall);
  }
}

void bench_stream(const Options& o) {
  for (int k : {0, o.top_k}) {
    fake::FakeServerOptions so;
    so.personality = fake::Personality::vllm;
    fake::FakeServer server(so);
    serving::HttpClient http;
    serving::EndpointConfig e;
    e.name = "bench";
    e.url = server.url();
    e.kind = serving::EngineKind::vllm;
    e.model = "fake-model";
    e.max_inflight = o.concurrency;
    serving::EngineClient client(e, http);
    int ok = 0;
    size_t tokens = 0;
    const double cpu0 = thread_cpu_seconds();
    const auto t0 = SteadyClock::now();
    for (int i = 0; i < o.requests; ++i) {
      serving::GenerateRequest g;
      g.prompt_tokens = {1, 2, 3, i};
      g.max_tokens = o.tokens;
      g.top_logprobs = k;
      client.submit_generate(g, [&](serving::GenerationOutcome r) {
        if (!r.ok) std::fprintf(stderr, "request failed: %s\n", r.error.c_str());
        ok += r.ok ? 1 : 0;
        tokens += r.result.completion.tokens.size();
      });
    }
    http.run();
    const double cpu = thread_cpu_seconds() - cpu0, wall = seconds_since(t0);
    std::printf("stream    top-%-2d  %6zu tokens  %d/%d ok, %d at once  client cpu %6.3f s  %9.0f tokens/cpu-s  (%.0fx goal)  "
                "wall %.3f s  %8.0f tokens/s\n",
                k, tokens, ok, o.requests, o.concurrency, cpu, tokens / cpu, tokens / cpu / 5000.0, wall, tokens / wall);
  }
}

void bench_inflight(const Options& o) {
  fake::FakeServer server;
  server.set_default_fault(fake::Fault::hold);
  serving::HttpClient http;
  serving::EndpointConfig e;
  e.name = "bench";
  e.url = server.url();
  e.kind = serving::EngineKind::vllm;
  e.model = "fake-model";
  e.max_inflight = o.inflight;
  e.timeouts.total = std::chrono::milliseconds(60'000);
  serving::EngineClient client(e, http);
  int ok = 0;
  const auto t0 = SteadyClock::now();
  for (int i = 0; i < o.inflight; ++i) {
    serving::GenerateRequest g;
    g.prompt_tokens = {1, i};
    g.max_tokens = 4;
    client.submit_generate(g, [&](serving::GenerationOutcome r) { ok += r.ok ? 1 : 0; });
  }
  while (server.held_now() < o.inflight && seconds_since(t0) < 30) http.poll(std::chrono::milliseconds(10));
  const double ramp = seconds_since(t0);
  const size_t on_wire = http.active();
  const int held = server.held_now();
  server.set_default_fault(fake::Fault::none);
  server.release_held();
  http.run();
  std::printf("inflight  %d submitted: %zu on the wire at once (server held %d, max %d), %.2f s to reach it; %d/%d ok after "
              "release; %ld connections  (%.2fx the 200 goal)\n",
              o.inflight, on_wire, held, server.max_held(), ramp, ok, o.inflight, http.connections_opened(),
              server.max_held() / 200.0);
}

int arg(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.tokens = arg(argc, argv, "--tokens", o.tokens);
  o.requests = arg(argc, argv, "--requests", o.requests);
  o.concurrency = arg(argc, argv, "--concurrency", o.concurrency);
  o.inflight = arg(argc, argv, "--inflight", o.inflight);
  o.top_k = arg(argc, argv, "--top-k", o.top_k);
  try {
    bench_parse(o);
    bench_stream(o);
    bench_inflight(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "serving_bench: %s\n", e.what());
    return 3;
  }
  return 0;
}
