#pragma once
// A small OpenAI-compatible HTTP/1.1 server on 127.0.0.1 (ephemeral port, one thread per
// connection, keep-alive) for the serving tests and benchmark. It speaks the three dialects
// kvgate's adapters send — /v1/completions (vLLM), /completion (llama-server), /generate
// (SGLang) — plus their discovery paths, streams canned tokens, and on request misbehaves in
// the ways a real server or network does (Fault).
//
// Every distribution it reports comes from fake_distribution(), a deterministic function of
// the token prefix, so a test can check that each dialect's encoding decodes to the same
// numbers.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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
  std::string kv_cache_dtype = "fp8_e4m3";  // reported by the SGLang personality
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
