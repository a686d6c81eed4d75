#pragma once
// A small OpenAI-compatible HTTP/1.1 server on 127.0.0.1 (ephemeral port, one thread per
// connection, keep-alive) for the serving tests and benchmark. It speaks the three dialects
// kvgate's adapters send — /v1/completions (vLLM), /completion (llama-server), /generate
// (SGLang) — plus their discovery paths, streams canned tokens, and on request misbehaves in
// the ways a real server or network does (Fault).
//
// Two ways to answer. With FakeServerOptions::fixtures it serves recorded exchanges
// (tests/serving/fixtures.h: complete bodies written from the engines' released code) and
// nothing else: a request that matches no fixture's request exactly is refused, so a test
// against fixtures also pins what kvgate sends. Otherwise it synthesises answers in the layouts
// of those fixtures (FakeLayout.SynthesisedBodiesHaveTheFixturesShape checks it): SGLang's
// unscored first input row and default /server_info (context_length null, kv_cache_dtype
// "auto"), vLLM's usage without prompt_tokens_details unless the server has the flag,
// llama-server's withheld partial UTF-8 tokens, /tokenize and logit_bias. Every distribution it
// reports comes from fake_distribution(), a deterministic function of the token prefix, so a
// test can check that each dialect's encoding decodes to the same numbers.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/serving/fixtures.h"

namespace kvgate::testing {

enum class Personality { vllm, sglang, llama_server, openai };

enum class Fault {
  none,
  garbage_body,          // 200, then bytes that are neither SSE nor JSON
  invalid_json_chunk,    // two good chunks, then a chunk whose JSON is cut short
  stall_mid_stream,      // two good chunks, then silence (until the client gives up)
  close_mid_stream,      // two good chunks, then the socket closes inside the chunked body
  truncated_stream,      // two good chunks, then a clean end of body without [DONE]/finish
  status_429,            // 429 with Retry-After: 0 and a JSON error body
  status_500,            // 500 with a JSON error body
  slow_headers,          // waits slow_headers_ms before answering normally
  close_before_response,  // reads the request, closes without a byte
  hold,                  // sends nothing until release_held() (in-flight measurement)
};

struct RecordedRequest {
  std::string method, path, body;
  std::map<std::string, std::string> headers;  // lower-case names
};

struct FakeServerOptions {
  Personality personality = Personality::vllm;
  std::vector<std::string> tokens = {"The", " answer", " is", " 42", ".", " It", " was", " always", " 42", "."};
  int32_t first_token_id = 1000;  // canned token i has id first_token_id + i (mod size)
  int slow_headers_ms = 500;
  int stall_ms = 30'000;  // how long stall_mid_stream stays silent at most
  int token_interval_us = 0;  // pause between streamed tokens
  int tokens_per_write = 1;   // SSE events per socket write (the benchmark batches)
  std::string model = "fake-model";
  // The KV cache dtype SGLang's /server_info and vLLM's /metrics report ("" = vLLM without the
  // cache_config_info gauge); both engines default to "auto".
  std::string kv_cache_dtype = "auto";
  std::string model_dtype = "auto";  // SGLang's /server_info dtype
  int64_t context_length = 4096;     // what the engine serves (/v1/models, /props, SGLang's scheduler)
  // SGLang's /server_info context_length: null unless the server was started with it.
  std::optional<int64_t> context_length_arg;
  bool vllm_prompt_tokens_details = false;  // vLLM's --enable-prompt-tokens-details
  bool sglang_deprecated_paths_only = false;  // an older SGLang: /get_server_info, /get_model_info
  // Fixture mode: these exchanges and nothing else.
  std::vector<Fixture> fixtures;
  // false: discovery requests (GETs, POST /tokenize) are always answered normally and take no
  // scripted fault, so a fault reaches generation and scoring only.
  bool fault_get_requests = true;
};

// The distribution the fake reports after `prefix`: `k` ids best first with logprobs, plus
// the logprob of any id not among them (tail), so a test can predict every answer.
struct FakeTop {
  std::vector<std::pair<int32_t, double>> top;  // best first
  double logprob_of(int32_t id) const;
};
FakeTop fake_distribution(const std::vector<int32_t>& prefix, int k);

class FakeServer {
 public:
  explicit FakeServer(FakeServerOptions options = {});
  ~FakeServer();
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Faults for the next requests, in arrival order (one per request); then default_fault.
  void script(std::vector<Fault> faults);
  void set_default_fault(Fault fault);

  void release_held();
  int held_now() const { return held_now_.load(); }
  int max_held() const { return max_held_.load(); }

  int connections_accepted() const { return connections_.load(); }
  int requests_served() const { return requests_.load(); }
  std::vector<RecordedRequest> requests() const;

 private:
  void accept_loop();
  void serve_connection(int fd);
  bool handle(int fd, const RecordedRequest& request);  // false: close the connection
  bool serve_fixture(int fd, const RecordedRequest& request, Fault fault);
  bool stream_events(int fd, const std::vector<std::string>& events, Fault fault);
  Fault next_fault();
  bool wait_or_stop(int ms);  // false when stopping

  FakeServerOptions options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> workers_;
  std::set<int> open_fds_;
  std::deque<Fault> script_;
  Fault default_fault_ = Fault::none;
  bool released_ = false;
  std::vector<RecordedRequest> log_;
  std::vector<int32_t> llama_slot_;  // the last /completion prompt, for cache_n
  std::atomic<int> connections_{0}, requests_{0}, held_now_{0}, max_held_{0};
};

}  // namespace kvgate::testing
