#pragma once
// HTTP/1.1 over libcurl's multi interface: one thread drives every transfer (an eval keeps a
// few, a load replay hundreds on the wire), connections are kept alive and reused per host,
// and each response body is handed to its consumer as the bytes arrive.
//
// Failure policy. A 429, a 5xx or a connection failure is retried with exponential backoff and
// seeded jitter, but only while nothing of the response has reached the consumer: a retry is
// then indistinguishable from a slow first attempt. Once the consumer has seen a byte, any
// failure (stall, close, bad chunk) fails the request; a silent retry would splice two
// different answers. Total and stall timeouts are never retried: the engine may still be
// working, and repeating the request would add load exactly when it is overloaded.
//
// Every failure message names the endpoint ("endpoint 'NAME' (URL): problem"); request
// headers, which may carry an API key, never appear in a message.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"
#include "serving/endpoint.h"

namespace kvgate::serving {

using SteadyClock = std::chrono::steady_clock;

struct RetryPolicy {
  int max_attempts = 4;  // including the first; 1 = never retry
  std::chrono::milliseconds base_delay{250};
  std::chrono::milliseconds max_delay{8'000};
};

// The delay before retry number `retry` (1 = first retry): min(max, base * 2^(retry-1)), scaled
// by a uniform factor in [0.5, 1) from `rng` so that clients that failed together do not come
// back together. A Retry-After the server sent (seconds, >= 0) raises it, capped at max_delay.
std::chrono::milliseconds backoff_delay(const RetryPolicy& policy, int retry, Rng& rng,
                                        std::chrono::milliseconds retry_after = std::chrono::milliseconds(-1));

struct HttpRequest {
  std::string endpoint;  // endpoint name, for messages
  std::string method = "POST";  // "GET" or "POST"
  std::string url;              // absolute
  std::vector<std::string> headers;  // "Name: value"; never printed
  std::string body;                  // POST only
  Timeouts timeouts;
  std::string queue;  // transfers of one queue share its concurrency limit (set_queue_limit)
};

enum class Failure {
  none,
  connect,      // no connection, or it broke before any response byte (retryable)
  http_status,  // a non-2xx status (429 and 5xx retryable)
  timeout,      // the total timeout elapsed
  stall,        // the body started and then went silent for the stall timeout
  broken,       // the connection failed after part of the body was consumed
  consumer,     // the consumer rejected the body (invalid chunk, ...)
};
std::string failure_name(Failure f);

struct HttpOutcome {
  Failure failure = Failure::none;
  bool ok() const { return failure == Failure::none; }
  long status = 0;   // HTTP status of the last attempt (0 when none arrived)
  int attempts = 0;
  std::string message;     // "endpoint 'NAME' (URL): problem"; empty when ok
  std::string error_body;  // first bytes of a non-2xx body, for the message
  size_t body_bytes = 0;   // bytes handed to the consumer
  SteadyClock::time_point submitted;  // submit() was called
  SteadyClock::time_point started;    // the last attempt went on the wire
  SteadyClock::time_point first_byte;  // its first body byte (== finished when there was none)
  SteadyClock::time_point finished;
};

// How a transfer's response reaches its owner. on_body receives the bytes of a 2xx body in
// order; it may throw (kvgate::Error or std::exception) to reject them, which fails the
// transfer as Failure::consumer with the exception's text. on_done is called exactly once.
struct TransferHandlers {
  std::function<void(std::string_view bytes, SteadyClock::time_point received)> on_body;
  std::function<void(const HttpOutcome&)> on_done;
};

struct HttpClientOptions {
  RetryPolicy retry;
  uint64_t seed = 0;            // jitter stream; same seed, same delays
  long max_connections = 1024;  // kept-alive connections cached across all hosts
  std::string user_agent = "kvgate";
};

class HttpClient {
 public:
  explicit HttpClient(HttpClientOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // A queue's limit on transfers on the wire at once (default: unlimited). Transfers beyond it
  // wait in submission order; the wait counts toward their total timeout only once started.
  void set_queue_limit(const std::string& queue, int limit);

  using TransferId = uint64_t;
  TransferId submit(HttpRequest request, TransferHandlers handlers);

  // Drives all transfers for at most `max_wait` (returns earlier once something completes or
  // a timer fires); returns how many are not done yet. Handlers run on this thread, inside
  // poll, and may call submit() but not poll()/run() (nor EngineClient's blocking calls).
  size_t poll(std::chrono::milliseconds max_wait);
  // poll() until every transfer is done.
  void run();
  // poll() until transfer `id` is done (others keep progressing meanwhile).
  void run_until_done(TransferId id);

  size_t active() const;     // transfers on the wire
  size_t unfinished() const;  // on the wire, queued or waiting for a retry
  size_t max_active_seen() const { return max_active_seen_; }
  // Connections opened over the client's lifetime (reused ones count once).
  long connections_opened() const { return connections_opened_; }

 private:
  struct Transfer;
  void start_ready();
  void start_attempt(Transfer& t);
  void finish_attempt(Transfer& t, int curl_code);
  void complete(Transfer& t, Failure failure, std::string problem);
  void enforce_timers(SteadyClock::time_point now);
  std::chrono::milliseconds next_timer_wait(SteadyClock::time_point now, std::chrono::milliseconds cap) const;
  void detach(Transfer& t);

  HttpClientOptions options_;
  Rng rng_;
  void* multi_ = nullptr;  // CURLM*
  std::map<TransferId, std::unique_ptr<Transfer>> transfers_;
  std::map<std::string, int> queue_limit_;
  std::map<std::string, int> queue_active_;
  std::deque<TransferId> waiting_;  // submitted or due for retry, in order
  TransferId next_id_ = 1;
  size_t active_ = 0;
  size_t max_active_seen_ = 0;
  uint64_t completed_ = 0;
  long connections_opened_ = 0;
};

// One blocking request on a private client: the body as a string. Throws kvgate::Error
// (environment, exit 3) with the outcome's message when the request fails.
std::string fetch(const HttpRequest& request, const RetryPolicy& retry = {}, uint64_t seed = 0);

}  // namespace kvgate::serving
