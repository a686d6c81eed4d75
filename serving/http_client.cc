#include "serving/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace kvgate::serving {

namespace {

constexpr size_t kErrorBodyCap = 4096;

void global_init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw_environment_error("libcurl: global initialization failed");
  });
}

std::string one_line(std::string_view text, size_t cap) {
  std::string out;
  for (char c : text.substr(0, cap)) out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  if (text.size() > cap) out += "...";
  return out;
}

bool retryable_status(long status) { return status == 429 || status >= 500; }

// Curl errors that mean the URL itself can never work; everything else that happens before a
// response byte was consumed is treated as a transient connection failure.
bool permanent_curl_error(CURLcode code) {
  return code == CURLE_URL_MALFORMAT || code == CURLE_UNSUPPORTED_PROTOCOL || code == CURLE_NOT_BUILT_IN ||
         code == CURLE_OUT_OF_MEMORY || code == CURLE_BAD_FUNCTION_ARGUMENT;
}

int64_t ms_between(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

}  // namespace

std::string failure_name(Failure f) {
  switch (f) {
    case Failure::none: return "ok";
    case Failure::connect: return "connect";
    case Failure::http_status: return "http_status";
    case Failure::timeout: return "timeout";
    case Failure::stall: return "stall";
    case Failure::broken: return "broken";
    case Failure::consumer: return "consumer";
  }
  return "unknown";
}

std::chrono::milliseconds backoff_delay(const RetryPolicy& policy, int retry, Rng& rng,
                                        std::chrono::milliseconds retry_after) {
  const double base = static_cast<double>(policy.base_delay.count());
  const double cap = static_cast<double>(policy.max_delay.count());
  const double exp = std::min(cap, base * std::ldexp(1.0, std::clamp(retry - 1, 0, 30)));
  double delay = exp * (0.5 + 0.5 * rng.uniform());
  if (retry_after.count() >= 0) delay = std::max(delay, std::min(cap, static_cast<double>(retry_after.count())));
  return std::chrono::milliseconds(static_cast<int64_t>(delay));
}

struct HttpClient::Transfer {
  enum class State { waiting, active, done };
  TransferId id = 0;
  HttpRequest request;
  TransferHandlers handlers;
  HttpOutcome outcome;
  State state = State::waiting;
  SteadyClock::time_point due;  // earliest start while waiting (retry delay)
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  char curl_error[CURL_ERROR_SIZE] = {0};
  // Per attempt:
  SteadyClock::time_point attempt_start, last_body_byte;
  bool body_in_attempt = false;
  std::chrono::milliseconds retry_after{-1};
  std::string consumer_error;

  std::string where() const { return "endpoint '" + request.endpoint + "' (" + redact_url(request.url) + ")"; }

  static size_t on_write(char* ptr, size_t size, size_t nmemb, void* userdata) {
    auto* t = static_cast<Transfer*>(userdata);
    const size_t n = size * nmemb;
    long status = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status >= 300) {
      // Kept for the message only; the consumer never sees a failed attempt's body, which is
      // what makes retrying it safe.
      if (t->outcome.error_body.size() < kErrorBodyCap)
        t->outcome.error_body.append(ptr, std::min(n, kErrorBodyCap - t->outcome.error_body.size()));
      return n;
    }
    const auto now = SteadyClock::now();
    if (t->outcome.body_bytes == 0) t->outcome.first_byte = now;
    t->body_in_attempt = true;
    t->last_body_byte = now;
    t->outcome.body_bytes += n;
    if (!t->handlers.on_body) return n;
    // An exception must not unwind through libcurl's C frames: keep its text, abort the transfer.
    try {
      t->handlers.on_body(std::string_view(ptr, n), now);
    } catch (const std::exception& e) {
      t->consumer_error = e.what();
      return 0;
    } catch (...) {
      t->consumer_error = "the response consumer failed";
      return 0;
    }
    return n;
  }

  static size_t on_header(char* buffer, size_t size, size_t nitems, void* userdata) {
    auto* t = static_cast<Transfer*>(userdata);
    const size_t n = size * nitems;
    std::string_view line(buffer, n);
    if (line.rfind("HTTP/", 0) == 0) {
      t->retry_after = std::chrono::milliseconds(-1);  // a new status line (after 100 Continue)
      return n;
    }
    constexpr std::string_view kRetryAfter = "retry-after:";
    if (line.size() > kRetryAfter.size()) {
      bool match = true;
      for (size_t i = 0; i < kRetryAfter.size() && match; ++i)
        match = std::tolower(static_cast<unsigned char>(line[i])) == kRetryAfter[i];
      if (match) {
        // Only the delta-seconds form; an HTTP date is ignored and the backoff applies.
        std::string_view v = line.substr(kRetryAfter.size());
        while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
        int64_t seconds = 0;
        size_t digits = 0;
        while (digits < v.size() && digits < 9 && std::isdigit(static_cast<unsigned char>(v[digits])))
          seconds = seconds * 10 + (v[digits++] - '0');
        if (digits > 0) t->retry_after = std::chrono::milliseconds(seconds * 1000);
      }
    }
    return n;
  }
};

HttpClient::HttpClient(HttpClientOptions options) : options_(std::move(options)), rng_(options_.seed) {
  global_init_once();
  multi_ = curl_multi_init();
  if (multi_ == nullptr) throw_environment_error("libcurl: cannot create a multi handle");
  curl_multi_setopt(static_cast<CURLM*>(multi_), CURLMOPT_MAXCONNECTS, options_.max_connections);
}

HttpClient::~HttpClient() {
  for (auto& [id, t] : transfers_)
    if (t->easy != nullptr) detach(*t);
  curl_multi_cleanup(static_cast<CURLM*>(multi_));
}

void HttpClient::set_queue_limit(const std::string& queue, int limit) {
  KVGATE_CHECK(limit >= 1, "queue limit must be at least 1");
  queue_limit_[queue] = limit;
}

HttpClient::TransferId HttpClient::submit(HttpRequest request, TransferHandlers handlers) {
  if (request.method != "GET" && request.method != "POST")
    throw_internal_error("HttpClient: unsupported method " + request.method);
  auto t = std::make_unique<Transfer>();
  t->id = next_id_++;
  t->request = std::move(request);
  t->handlers = std::move(handlers);
  t->outcome.submitted = SteadyClock::now();
  t->due = t->outcome.submitted;
  waiting_.push_back(t->id);
  const TransferId id = t->id;
  transfers_.emplace(id, std::move(t));
  return id;
}

size_t HttpClient::active() const { return active_; }

size_t HttpClient::unfinished() const { return transfers_.size(); }

void HttpClient::start_ready() {
  const auto now = SteadyClock::now();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Transfer& t = *transfers_.at(*it);
    const auto limit = queue_limit_.find(t.request.queue);
    const bool full = limit != queue_limit_.end() && queue_active_[t.request.queue] >= limit->second;
    if (t.due <= now && !full) {
      it = waiting_.erase(it);
      start_attempt(t);
    } else {
      ++it;
    }
  }
}

void HttpClient::start_attempt(Transfer& t) {
  CURL* e = curl_easy_init();
  if (e == nullptr) throw_environment_error("libcurl: cannot create an easy handle");
  t.easy = e;
  t.state = Transfer::State::active;
  t.outcome.attempts += 1;
  t.outcome.status = 0;
  t.outcome.error_body.clear();
  t.attempt_start = SteadyClock::now();
  t.outcome.started = t.attempt_start;
  t.body_in_attempt = false;
  t.retry_after = std::chrono::milliseconds(-1);
  t.curl_error[0] = '\0';

  curl_slist* list = nullptr;
  for (const std::string& h : t.request.headers) list = curl_slist_append(list, h.c_str());
  if (t.request.method == "POST") list = curl_slist_append(list, "Content-Type: application/json");
  // libcurl would otherwise wait up to a second for "100 Continue" before sending a large body.
  list = curl_slist_append(list, "Expect:");
  t.header_list = list;

  curl_easy_setopt(e, CURLOPT_URL, t.request.url.c_str());
  curl_easy_setopt(e, CURLOPT_PRIVATE, &t);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Transfer::on_write);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Transfer::on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t.curl_error);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_USERAGENT, options_.user_agent.c_str());
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(t.request.timeouts.connect.count()));
  // The total and stall limits are enforced by this client's own timers (enforce_timers), which
  // know whether the body has started; curl's timeout is only a backstop a little later.
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(t.request.timeouts.total.count() + 2000));
  if (t.request.method == "POST") {
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, t.request.body.data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t.request.body.size()));
  } else {
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  }
  if (curl_multi_add_handle(static_cast<CURLM*>(multi_), e) != CURLM_OK)
    throw_environment_error("libcurl: cannot add a transfer to the multi handle");
  ++active_;
  ++queue_active_[t.request.queue];
  max_active_seen_ = std::max(max_active_seen_, active_);
}

void HttpClient::detach(Transfer& t) {
  if (t.easy == nullptr) return;
  long connects = 0;
  if (curl_easy_getinfo(t.easy, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK) connections_opened_ += connects;
  long status = 0;
  if (curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK) t.outcome.status = status;
  curl_multi_remove_handle(static_cast<CURLM*>(multi_), t.easy);
  curl_easy_cleanup(t.easy);
  curl_slist_free_all(t.header_list);
  t.easy = nullptr;
  t.header_list = nullptr;
  if (t.state == Transfer::State::active) {
    --active_;
    --queue_active_[t.request.queue];
  }
}

void HttpClient::complete(Transfer& t, Failure failure, std::string problem) {
  detach(t);
  t.state = Transfer::State::done;
  t.outcome.failure = failure;
  t.outcome.finished = SteadyClock::now();
  ++completed_;
  if (t.outcome.body_bytes == 0) t.outcome.first_byte = t.outcome.finished;
  if (failure != Failure::none) t.outcome.message = t.where() + ": " + problem;
  // The transfer leaves the table before its handler runs, so the handler may submit freely.
  std::unique_ptr<Transfer> owned = std::move(transfers_.at(t.id));
  transfers_.erase(owned->id);
  if (owned->handlers.on_done) owned->handlers.on_done(owned->outcome);
}

void HttpClient::finish_attempt(Transfer& t, int curl_code_int) {
  const auto code = static_cast<CURLcode>(curl_code_int);
  const std::string curl_text = t.curl_error[0] != '\0' ? std::string(t.curl_error) : std::string(curl_easy_strerror(code));
  detach(t);
  t.state = Transfer::State::waiting;  // until decided below
  const long status = t.outcome.status;
  const int attempts = t.outcome.attempts;
  const bool may_retry = t.outcome.body_bytes == 0 && attempts < options_.retry.max_attempts;
  auto retry = [&] {
    t.due = SteadyClock::now() + backoff_delay(options_.retry, attempts, rng_, t.retry_after);
    waiting_.push_back(t.id);
  };
  const std::string tries = attempts == 1 ? "" : " (after " + std::to_string(attempts) + " attempts)";

  if (!t.consumer_error.empty()) {
    complete(t, Failure::consumer, "invalid response after " + std::to_string(t.outcome.body_bytes) +
                                        " bytes: " + one_line(t.consumer_error, 400));
    return;
  }
  if (code == CURLE_OK && status >= 200 && status < 300) {
    complete(t, Failure::none, "");
    return;
  }
  if (status != 0 && (status < 200 || status >= 300)) {
    // A failed status is decided by the status, whether or not its body arrived whole.
    if (retryable_status(status) && may_retry) return retry();
    std::string problem = "HTTP " + std::to_string(status) + tries;
    if (!t.outcome.error_body.empty()) problem += ": " + one_line(t.outcome.error_body, 300);
    complete(t, Failure::http_status, problem);
    return;
  }
  if (t.outcome.body_bytes > 0) {
    complete(t, Failure::broken, "the connection failed after " + std::to_string(t.outcome.body_bytes) +
                                     " bytes of the response had been consumed: " + curl_text);
    return;
  }
  if (!permanent_curl_error(code) && may_retry) return retry();
  complete(t, Failure::connect, (status == 0 ? "no response: " : "the response ended before its body: ") + curl_text + tries);
}

void HttpClient::enforce_timers(SteadyClock::time_point now) {
  std::vector<TransferId> expired;
  for (const auto& [id, t] : transfers_) {
    if (t->state != Transfer::State::active) continue;
    if (now - t->attempt_start >= t->request.timeouts.total) expired.push_back(id);
    else if (t->body_in_attempt && now - t->last_body_byte >= t->request.timeouts.stall) expired.push_back(id);
  }
  for (TransferId id : expired) {
    Transfer& t = *transfers_.at(id);
    if (now - t.attempt_start >= t.request.timeouts.total) {
      const std::string phase = t.body_in_attempt ? std::to_string(t.outcome.body_bytes) + " bytes received"
                                                  : "waiting for the response";
      complete(t, Failure::timeout, "timed out after " + std::to_string(ms_between(t.attempt_start, now)) +
                                        " ms (total timeout " + std::to_string(t.request.timeouts.total.count()) +
                                        " ms, " + phase + ")");
    } else {
      complete(t, Failure::stall, "the stream stalled: no data for " + std::to_string(ms_between(t.last_body_byte, now)) +
                                      " ms (stall timeout " + std::to_string(t.request.timeouts.stall.count()) +
                                      " ms) after " + std::to_string(t.outcome.body_bytes) + " bytes");
    }
  }
}

std::chrono::milliseconds HttpClient::next_timer_wait(SteadyClock::time_point now, std::chrono::milliseconds cap) const {
  auto earliest = now + cap;
  for (const auto& [id, t] : transfers_) {
    if (t->state == Transfer::State::active) {
      earliest = std::min(earliest, t->attempt_start + t->request.timeouts.total);
      if (t->body_in_attempt) earliest = std::min(earliest, t->last_body_byte + t->request.timeouts.stall);
    } else if (t->state == Transfer::State::waiting) {
      const auto limit = queue_limit_.find(t->request.queue);
      const auto active = queue_active_.find(t->request.queue);
      const bool full = limit != queue_limit_.end() && active != queue_active_.end() && active->second >= limit->second;
      if (!full) earliest = std::min(earliest, t->due);
    }
  }
  // Rounded up so a timer is never polled for a hair early and then spun on.
  const auto wait = std::chrono::ceil<std::chrono::milliseconds>(earliest - now);
  return std::max(std::chrono::milliseconds(0), wait);
}

size_t HttpClient::poll(std::chrono::milliseconds max_wait) {
  auto* multi = static_cast<CURLM*>(multi_);
  auto drain = [&] {
    int running = 0;
    curl_multi_perform(multi, &running);
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &t);
      finish_attempt(*t, static_cast<int>(msg->data.result));
    }
  };
  const uint64_t completed_before = completed_;
  start_ready();
  drain();
  // Something finished already: return to the caller, whose handler may be waiting on it,
  // rather than sleep for the rest of max_wait.
  if (completed_ == completed_before) {
    const auto wait = next_timer_wait(SteadyClock::now(), max_wait);
    if (wait.count() > 0) curl_multi_poll(multi, nullptr, 0, static_cast<int>(wait.count()), nullptr);
    drain();
  }
  enforce_timers(SteadyClock::now());
  start_ready();
  return unfinished();
}

void HttpClient::run() {
  while (unfinished() > 0) poll(std::chrono::milliseconds(1000));
}

void HttpClient::run_until_done(TransferId id) {
  while (transfers_.count(id) != 0) poll(std::chrono::milliseconds(1000));
}

std::string fetch(const HttpRequest& request, const RetryPolicy& retry, uint64_t seed) {
  HttpClientOptions options;
  options.retry = retry;
  options.seed = seed;
  HttpClient client(options);
  std::string body;
  HttpOutcome outcome;
  client.submit(request, {[&](std::string_view bytes, SteadyClock::time_point) { body.append(bytes); },
                          [&](const HttpOutcome& o) { outcome = o; }});
  client.run();
  if (!outcome.ok()) throw_environment_error(outcome.message);
  return body;
}

}  // namespace kvgate::serving
