#include "tests/serving/fake_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace kvgate::testing {

namespace {

using nlohmann::json;

constexpr double kTopMass = 0.9;  // the listed entries' share; the rest is spread thinly
constexpr double kTailLogprob = -9.0;

bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 404: return "Not Found";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    default: return "Status";
  }
}

bool send_whole(int fd, int status, const std::string& content_type, const std::string& body,
                const std::string& extra_headers = "") {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\nContent-Type: " + content_type +
                     "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n";
  return send_all(fd, head + body);
}

bool send_stream_head(int fd) {
  return send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n");
}

bool send_chunk(int fd, const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return send_all(fd, std::string(size) + data + "\r\n");
}

std::string sse(const json& j) { return "data: " + j.dump() + "\n\n"; }

std::vector<int32_t> prompt_ids(const json& prompt) {
  std::vector<int32_t> ids;
  if (prompt.is_array()) {
    for (const json& t : prompt)
      if (t.is_number_integer()) ids.push_back(t.get<int32_t>());
  } else if (prompt.is_string()) {
    for (unsigned char c : prompt.get<std::string>()) ids.push_back(c);
  }
  return ids;
}

struct Generated {
  int32_t id;
  std::string text;
  double logprob;
  FakeTop top;
};

std::vector<Generated> generate(const FakeServerOptions& o, std::vector<int32_t> prefix, int n, int k) {
  std::vector<Generated> out;
  for (int i = 0; i < n; ++i) {
    const size_t c = static_cast<size_t>(i) % o.tokens.size();
    Generated g;
    g.id = o.first_token_id + static_cast<int32_t>(c);
    g.text = o.tokens[c];
    g.top = fake_distribution(prefix, k);
    g.logprob = g.top.logprob_of(g.id);
    prefix.push_back(g.id);
    out.push_back(std::move(g));
  }
  return out;
}

// --- vLLM / OpenAI /v1/completions -------------------------------------------------------

json vllm_prompt_logprobs(const std::vector<int32_t>& prompt, int k) {
  json out = json::array();
  out.push_back(nullptr);
  for (size_t i = 1; i < prompt.size(); ++i) {
    const std::vector<int32_t> prefix(prompt.begin(), prompt.begin() + static_cast<long>(i));
    const FakeTop d = fake_distribution(prefix, k);
    json entry = json::object();
    int rank = 1;
    for (const auto& [id, lp] : d.top) entry[std::to_string(id)] = {{"logprob", lp}, {"rank", rank++}, {"decoded_token", "t"}};
    const std::string target = std::to_string(prompt[i]);
    if (!entry.contains(target)) entry[target] = {{"logprob", d.logprob_of(prompt[i])}, {"rank", 9999}, {"decoded_token", "t"}};
    out.push_back(entry);
  }
  return out;
}

std::vector<std::string> completions_events(const FakeServerOptions& o, const json& req, bool& whole, std::string& body) {
  const std::vector<int32_t> prompt = prompt_ids(req.value("prompt", json()));
  if (req.contains("prompt_logprobs")) {
    whole = true;
    json r = {{"id", "cmpl-score"}, {"object", "text_completion"}, {"model", o.model}};
    r["choices"] = json::array({{{"index", 0}, {"text", o.tokens[0]}, {"finish_reason", "length"},
                                 {"prompt_logprobs", vllm_prompt_logprobs(prompt, req["prompt_logprobs"].get<int>())}}});
    r["usage"] = {{"prompt_tokens", prompt.size()}, {"total_tokens", prompt.size() + 1}, {"completion_tokens", 1}};
    if (o.vllm_prompt_tokens_details) r["usage"]["prompt_tokens_details"] = {{"cached_tokens", 0}};
    body = r.dump();
    return {};
  }
  const int n = req.value("max_tokens", 16);
  const int k = req.contains("logprobs") && req["logprobs"].is_number_integer() ? req["logprobs"].get<int>() : 0;
  const bool ids_as_text = req.value("return_tokens_as_token_ids", false);
  const bool token_ids = req.value("return_token_ids", false);
  const std::vector<Generated> gen = generate(o, prompt, n, k);
  auto logprobs_of = [&](const std::vector<const Generated*>& gs) -> json {
    if (k == 0) return nullptr;
    json lp = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
    for (const Generated* g : gs) {
      lp["tokens"].push_back(ids_as_text ? "token_id:" + std::to_string(g->id) : g->text);
      lp["token_logprobs"].push_back(g->logprob);
      json top = json::object();
      for (const auto& [id, l] : g->top.top) top[ids_as_text ? "token_id:" + std::to_string(id) : "tok" + std::to_string(id)] = l;
      lp["top_logprobs"].push_back(top);
      lp["text_offset"].push_back(0);
    }
    return lp;
  };
  // usage.prompt_tokens_details only with --enable-prompt-tokens-details (completion/serving.py:576-579).
  json usage = {{"prompt_tokens", prompt.size()}, {"total_tokens", prompt.size() + n}, {"completion_tokens", n}};
  if (o.vllm_prompt_tokens_details) usage["prompt_tokens_details"] = {{"cached_tokens", 0}};
  if (!req.value("stream", false)) {
    whole = true;
    std::string text;
    std::vector<const Generated*> all;
    for (const auto& g : gen) {
      text += g.text;
      all.push_back(&g);
    }
    json c = {{"index", 0}, {"text", text}, {"logprobs", logprobs_of(all)}, {"finish_reason", "length"}};
    if (token_ids) {
      c["token_ids"] = json::array();
      for (const auto& g : gen) c["token_ids"].push_back(g.id);
    }
    body = json{{"id", "cmpl-1"}, {"object", "text_completion"}, {"model", o.model}, {"choices", json::array({c})}, {"usage", usage}}.dump();
    return {};
  }
  std::vector<std::string> events;
  for (size_t i = 0; i < gen.size(); ++i) {
    json c = {{"index", 0}, {"text", gen[i].text}, {"logprobs", logprobs_of({&gen[i]})},
              {"finish_reason", i + 1 == gen.size() ? json("length") : json(nullptr)}, {"stop_reason", nullptr}};
    if (token_ids) {
      // The first chunk of a stream carries the prompt's ids too (completion/serving.py:447-449).
      c["prompt_token_ids"] = i == 0 ? json(prompt) : json(nullptr);
      c["token_ids"] = json::array({gen[i].id});
    }
    events.push_back(sse({{"id", "cmpl-1"}, {"object", "text_completion"}, {"model", o.model}, {"choices", json::array({c})}}));
  }
  if (req.contains("stream_options") && req["stream_options"].value("include_usage", false))
    events.push_back(sse({{"id", "cmpl-1"}, {"object", "text_completion"}, {"model", o.model}, {"choices", json::array()}, {"usage", usage}}));
  events.push_back("data: [DONE]\n\n");
  return events;
}

// --- llama-server /completion ------------------------------------------------------------

json llama_probs(int32_t id, const std::string& text, double lp, const FakeTop& top) {
  json entry = {{"id", id}, {"token", text}, {"bytes", json::array()}, {"logprob", lp}, {"top_logprobs", json::array()}};
  for (const auto& [tid, tlp] : top.top)
    entry["top_logprobs"].push_back({{"id", tid}, {"token", "t"}, {"bytes", json::array()}, {"logprob", tlp}});
  return entry;
}

// The length of the longest prefix of `text` that ends on a whole UTF-8 character (llama-server's
// validate_utf8 in tools/server/server-common.cpp).
size_t whole_utf8(const std::string& text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) != 0x80) {  // the lead byte of the last character
      const size_t need = (c & 0x80) == 0 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
      return back < need ? n - back : n;
    }
  }
  return n;
}

std::vector<std::string> llama_events(const FakeServerOptions& o, const json& req, int64_t cache_n, bool& whole, std::string& body) {
  const std::vector<int32_t> prompt = prompt_ids(req.value("prompt", json()));
  const int n = req.value("n_predict", 16);
  const int k = req.value("n_probs", 0);
  std::vector<Generated> gen = generate(o, prompt, n, k);
  // A logit bias of +100 or more makes its token the one sampled (kvgate's plain token); the
  // probabilities stay those of the raw logits.
  if (req.contains("logit_bias") && req["logit_bias"].is_array() && !gen.empty())
    for (const json& b : req["logit_bias"])
      if (b.is_array() && b.size() == 2 && b[0].is_number_integer() && b[1].is_number() && b[1].get<double>() >= 100) {
        gen[0].id = b[0].get<int32_t>();
        gen[0].text = ".";
        gen[0].logprob = gen[0].top.logprob_of(gen[0].id);
      }
  const json timings = {{"cache_n", cache_n}, {"prompt_n", static_cast<int64_t>(prompt.size()) - cache_n}, {"prompt_ms", 1.5},
                        {"predicted_n", n}, {"predicted_ms", 2.5}};
  // A token whose text leaves the answer inside a UTF-8 character is held back with its
  // probabilities; the token that completes the character carries the text of both under its
  // own id alone (process_token in tools/server/server-context.cpp:1966-2012).
  struct Sent {
    size_t token;  // index into gen
    std::string text;
  };
  std::vector<Sent> sent;
  std::string generated;
  size_t n_sent_text = 0;
  for (size_t i = 0; i < gen.size(); ++i) {
    generated += gen[i].text;
    if (whole_utf8(generated) < generated.size()) continue;
    sent.push_back({i, generated.substr(n_sent_text)});
    n_sent_text = generated.size();
  }
  if (!req.value("stream", false)) {
    whole = true;
    json r = {{"index", 0}, {"content", generated}, {"tokens", json::array()}, {"id_slot", 0}, {"stop", true},
              {"model", o.model}, {"tokens_predicted", n}, {"tokens_evaluated", prompt.size()}, {"stop_type", "limit"},
              {"timings", timings}};
    if (req.value("return_tokens", false))
      for (const auto& g : gen) r["tokens"].push_back(g.id);
    if (k > 0) {
      json probs = json::array();
      for (const Sent& s : sent) probs.push_back(llama_probs(gen[s.token].id, s.text, gen[s.token].logprob, gen[s.token].top));
      r["completion_probabilities"] = probs;
    }
    body = r.dump();
    return {};
  }
  std::vector<std::string> events;
  for (const Sent& s : sent) {
    const Generated& g = gen[s.token];
    json c = {{"index", 0}, {"content", s.text}, {"tokens", json::array({g.id})}, {"stop", false}, {"id_slot", 0},
              {"tokens_predicted", s.token + 1}, {"tokens_evaluated", prompt.size()}};
    if (k > 0) c["completion_probabilities"] = json::array({llama_probs(g.id, s.text, g.logprob, g.top)});
    events.push_back(sse(c));
  }
  events.push_back(sse({{"index", 0}, {"content", ""}, {"tokens", json::array()}, {"id_slot", 0}, {"stop", true},
                        {"model", o.model}, {"tokens_predicted", n}, {"tokens_evaluated", prompt.size()},
                        {"stop_type", "limit"}, {"timings", timings}}));
  return events;
}

// --- SGLang /generate --------------------------------------------------------------------

json triple(double lp, int32_t id) { return json::array({lp, id, nullptr}); }

json top_triples(const FakeTop& t) {
  json a = json::array();
  for (const auto& [id, lp] : t.top) a.push_back(triple(lp, id));
  return a;
}

std::vector<std::string> sglang_events(const FakeServerOptions& o, const json& req, bool& whole, std::string& body) {
  const std::vector<int32_t> prompt = prompt_ids(req.contains("input_ids") ? req["input_ids"] : req.value("text", json()));
  const json sp = req.value("sampling_params", json::object());
  const int n = sp.value("max_new_tokens", 128);
  const bool logprobs = req.value("return_logprob", false);
  const int k = logprobs ? req.value("top_logprobs_num", 0) : 0;
  const std::vector<Generated> gen = generate(o, prompt, n, k);
  // managers/tokenizer_manager.py:2506-2512, 2553-2558, 2840-2937.
  auto meta = [&](size_t produced, bool last) {
    json m = {{"id", "sgl-1"}, {"finish_reason", last ? json{{"type", "length"}, {"length", n}} : json(nullptr)},
              {"prompt_tokens", prompt.size()}, {"weight_version", "default"}, {"num_retractions", 0}};
    if (logprobs) {
      m["input_token_logprobs"] = json::array();
      m["output_token_logprobs"] = json::array();
      m["output_token_logprobs_length"] = produced;
      for (size_t i = 0; i < produced; ++i) m["output_token_logprobs"].push_back(triple(gen[i].logprob, gen[i].id));
      // -1 (or none): the output tokens only; otherwise the row at logprob_start_len is never
      // scored: [None] + the logprobs of the later positions, ids from logprob_start_len on
      // (scheduler_components/logprob_result_processor.py:26-84).
      const int64_t start = req.value("logprob_start_len", -1);
      if (start >= 0)
        for (size_t p = static_cast<size_t>(start); p < prompt.size(); ++p) {
          if (p == static_cast<size_t>(start)) {
            m["input_token_logprobs"].push_back(json::array({nullptr, prompt[p], nullptr}));
            continue;
          }
          const FakeTop d = fake_distribution(std::vector<int32_t>(prompt.begin(), prompt.begin() + static_cast<long>(p)), k);
          m["input_token_logprobs"].push_back(triple(d.logprob_of(prompt[p]), prompt[p]));
        }
      if (k > 0) {
        m["input_top_logprobs"] = json::array();
        if (start >= 0)
          for (size_t p = static_cast<size_t>(start); p < prompt.size(); ++p)
            m["input_top_logprobs"].push_back(
                p == static_cast<size_t>(start)
                    ? json(nullptr)
                    : top_triples(fake_distribution(std::vector<int32_t>(prompt.begin(), prompt.begin() + static_cast<long>(p)), k)));
        m["output_top_logprobs"] = json::array();
        for (size_t i = 0; i < produced; ++i) m["output_top_logprobs"].push_back(top_triples(gen[i].top));
      }
    }
    m["reasoning_tokens"] = 0;
    m["completion_tokens"] = produced;
    m["cached_tokens"] = 0;
    return m;
  };
  auto ids_until = [&](size_t produced) {
    json a = json::array();
    for (size_t i = 0; i < produced; ++i) a.push_back(gen[i].id);
    return a;
  };
  std::string text;
  if (!req.value("stream", false)) {
    whole = true;
    for (const auto& g : gen) text += g.text;
    body = json{{"text", text}, {"output_ids", ids_until(gen.size())}, {"meta_info", meta(gen.size(), true)}}.dump();
    return {};
  }
  std::vector<std::string> events;
  for (size_t i = 0; i < gen.size(); ++i) {
    text += gen[i].text;  // cumulative, SGLang's default
    events.push_back(sse({{"text", text}, {"output_ids", ids_until(i + 1)}, {"meta_info", meta(i + 1, i + 1 == gen.size())}}));
  }
  events.push_back("data: [DONE]\n\n");
  return events;
}

}  // namespace

double FakeTop::logprob_of(int32_t id) const {
  for (const auto& [tid, lp] : top)
    if (tid == id) return lp;
  return kTailLogprob;
}

FakeTop fake_distribution(const std::vector<int32_t>& prefix, int k) {
  uint64_t h = 1469598103934665603ull ^ prefix.size();
  for (int32_t t : prefix) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  FakeTop out;
  if (k <= 0) return out;
  const double decay = 0.3 + static_cast<double>(h % 7) * 0.1;  // flatter or peakier per prefix
  double sum = 0;
  for (int j = 0; j < k; ++j) sum += std::exp(-decay * j);
  for (int j = 0; j < k; ++j) {
    const int32_t id = static_cast<int32_t>((h >> 8) % 40000 + static_cast<uint64_t>(j) * 97) % 49152;
    out.top.emplace_back(id, std::log(kTopMass * std::exp(-decay * j) / sum));
  }
  return out;
}

FakeServer::FakeServer(FakeServerOptions options) : options_(std::move(options)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listen_fd_ < 0) throw std::runtime_error("fake server: socket() failed");
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listen_fd_, 1024) != 0)
    throw std::runtime_error("fake server: bind/listen on 127.0.0.1 failed");
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

FakeServer::~FakeServer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    released_ = true;
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  cv_.notify_all();
  acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers.swap(workers_);
  }
  for (auto& w : workers) w.join();
}

void FakeServer::script(std::vector<Fault> faults) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Fault f : faults) script_.push_back(f);
}

void FakeServer::set_default_fault(Fault fault) {
  std::lock_guard<std::mutex> lock(mu_);
  default_fault_ = fault;
}

void FakeServer::release_held() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
  }
  cv_.notify_all();
}

std::vector<RecordedRequest> FakeServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

Fault FakeServer::next_fault() {
  std::lock_guard<std::mutex> lock(mu_);
  if (script_.empty()) return default_fault_;
  const Fault f = script_.front();
  script_.pop_front();
  return f;
}

bool FakeServer::wait_or_stop(int ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stop_.load(); });
  return !stop_;
}

void FakeServer::accept_loop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ++connections_;
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) {
      ::close(fd);
      break;
    }
    open_fds_.insert(fd);
    workers_.emplace_back([this, fd] { serve_connection(fd); });
  }
}

void FakeServer::serve_connection(int fd) {
  std::string buf;
  char tmp[65536];
  bool keep = true;
  while (keep && !stop_) {
    size_t header_end;
    while ((header_end = buf.find("\r\n\r\n")) == std::string::npos) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) == 0) {
        if (stop_) break;
        continue;
      }
      const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
      if (n <= 0) {
        keep = false;
        break;
      }
      buf.append(tmp, static_cast<size_t>(n));
    }
    if (!keep || stop_ || header_end == std::string::npos) break;
    RecordedRequest req;
    const std::string head = buf.substr(0, header_end);
    buf.erase(0, header_end + 4);
    const size_t line_end = head.find("\r\n");
    const std::string request_line = head.substr(0, line_end);
    const size_t sp1 = request_line.find(' '), sp2 = request_line.rfind(' ');
    req.method = request_line.substr(0, sp1);
    req.path = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      const std::string line = head.substr(pos, e - pos);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        req.headers[name] = value;
      }
      pos = e + 2;
    }
    const size_t length = req.headers.count("content-length") ? std::stoul(req.headers["content-length"]) : 0;
    while (buf.size() < length) {
      const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
      if (n <= 0) {
        keep = false;
        break;
      }
      buf.append(tmp, static_cast<size_t>(n));
    }
    if (!keep) break;
    req.body = buf.substr(0, length);
    buf.erase(0, length);
    ++requests_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      log_.push_back(req);
    }
    keep = handle(fd, req);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_fds_.erase(fd);
  }
  ::close(fd);
}

bool FakeServer::serve_fixture(int fd, const RecordedRequest& request, Fault fault) {
  json body = nullptr;
  if (!request.body.empty()) body = json::parse(request.body, nullptr, false);
  for (const Fixture& f : options_.fixtures) {
    if (f.method != request.method || f.path != request.path || f.request != body) continue;
    if (f.content_type != "text/event-stream") return send_whole(fd, f.status, f.content_type, f.body);
    // One SSE event per chunk, as the engines flush them.
    std::vector<std::string> events;
    for (size_t at = 0; at < f.body.size();) {
      const size_t end = f.body.find("\n\n", at);
      const size_t stop = end == std::string::npos ? f.body.size() : end + 2;
      events.push_back(f.body.substr(at, stop - at));
      at = stop;
    }
    return stream_events(fd, events, fault);
  }
  if (request.method == "GET") return send_whole(fd, 404, "application/json", R"({"detail":"Not Found"})");
  // What the engine's schema check would do with a body no fixture describes: refuse it, saying
  // which request it was, so the test's failure shows what kvgate sent.
  return send_whole(fd, 400, "application/json",
                    json{{"error", {{"message", "no fixture matches " + request.method + " " + request.path + " " +
                                                    request.body.substr(0, 400)}}}}
                        .dump());
}

bool FakeServer::handle(int fd, const RecordedRequest& request) {
  const bool discovery = request.method == "GET" || request.path == "/tokenize";
  const Fault fault = discovery && !options_.fault_get_requests ? Fault::none : next_fault();
  switch (fault) {
    case Fault::close_before_response: return false;
    case Fault::status_429:
      return send_whole(fd, 429, "application/json", R"({"error":{"message":"rate limited","code":429}})", "Retry-After: 0\r\n");
    case Fault::status_500:
      return send_whole(fd, 500, "application/json", R"({"error":{"message":"engine overloaded","code":500}})");
    case Fault::slow_headers:
      if (!wait_or_stop(options_.slow_headers_ms)) return false;
      break;
    case Fault::hold: {
      const int now = ++held_now_;
      int seen = max_held_.load();
      while (now > seen && !max_held_.compare_exchange_weak(seen, now)) {}
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return released_ || stop_.load(); });
      lock.unlock();
      --held_now_;
      if (stop_) return false;
      break;
    }
    case Fault::garbage_body:
      return send_whole(fd, 200, "text/event-stream", "<html><body>502 Bad Gateway</body></html>\n\x01\x02\x03");
    default: break;
  }

  const std::string& p = request.path;
  if (!options_.fixtures.empty()) return serve_fixture(fd, request, fault);
  if (request.method == "GET") {
    json r;
    const Personality who = options_.personality;
    const bool sglang_new = who == Personality::sglang && !options_.sglang_deprecated_paths_only;
    if (p == "/v1/models") {
      // vLLM and SGLang say the context here; llama-server says it in /props.
      json card = {{"id", options_.model}, {"object", "model"}};
      if (who != Personality::llama_server) card["max_model_len"] = options_.context_length;
      r = {{"object", "list"}, {"data", json::array({card})}};
    } else if (p == "/version" && who == Personality::vllm) {
      r = {{"version", "0.0.0-fake"}};
    } else if (p == "/metrics" && who == Personality::vllm) {
      // v1/metrics/loggers.py:1114-1135: CacheConfig's fields as the labels of a gauge at 1.
      std::string text = "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                         "# TYPE vllm:num_requests_running gauge\n"
                         "vllm:num_requests_running{engine=\"0\",model_name=\"" + options_.model + "\"} 0.0\n";
      if (!options_.kv_cache_dtype.empty())
        text += "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
                "# TYPE vllm:cache_config_info gauge\n"
                "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"" + options_.kv_cache_dtype +
                "\",enable_prefix_caching=\"True\",engine=\"0\",gpu_memory_utilization=\"0.9\"} 1.0\n";
      return send_whole(fd, 200, "text/plain; version=0.0.4; charset=utf-8", text);
    } else if (p == "/props" && who == Personality::llama_server) {
      r = {{"build_info", "b0-fake"}, {"model_alias", options_.model}, {"model_path", "/models/fake.gguf"},
           {"total_slots", 1}, {"default_generation_settings", {{"n_ctx", options_.context_length}}}};
    } else if ((p == "/get_server_info" || (p == "/server_info" && sglang_new)) && who == Personality::sglang) {
      // utils/common.py:3584-3593: the resolved server args plus the scheduler's info.
      r = {{"version", "0.0.0-fake"}, {"kv_cache_dtype", options_.kv_cache_dtype}, {"dtype", options_.model_dtype},
           {"model_path", options_.model}, {"served_model_name", options_.model},
           {"context_length", options_.context_length_arg ? json(*options_.context_length_arg) : json(nullptr)},
           {"max_req_input_len", options_.context_length - 6}, {"max_total_num_tokens", 100000}};
    } else if ((p == "/get_model_info" || (p == "/model_info" && sglang_new)) && who == Personality::sglang) {
      r = {{"model_path", options_.model}, {"served_model_name", options_.model}, {"is_generation", true},
           {"preferred_sampling_params", nullptr}};
    } else {
      return send_whole(fd, 404, "application/json", R"({"detail":"Not Found"})");
    }
    return send_whole(fd, 200, "application/json", r.dump());
  }
  if (p == "/tokenize" && options_.personality == Personality::llama_server) {
    // The bytes of the content as ids, as the other synthesised prompts are.
    const json body = json::parse(request.body, nullptr, false);
    json tokens = json::array();
    if (body.is_object() && body.contains("content")) tokens = prompt_ids(body["content"]);
    return send_whole(fd, 200, "application/json", json{{"tokens", tokens}}.dump());
  }

  json req;
  try {
    req = json::parse(request.body);
  } catch (const json::parse_error&) {
    return send_whole(fd, 400, "application/json", R"({"error":{"message":"body is not JSON"}})");
  }
  bool whole = false;
  std::string body;
  std::vector<std::string> events;
  if (p == "/v1/completions") {
    events = completions_events(options_, req, whole, body);
  } else if (p == "/completion") {
    // A one-slot prompt cache: the common prefix with the previous prompt counts as cached.
    const std::vector<int32_t> prompt = prompt_ids(req.value("prompt", json()));
    int64_t cache_n = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (req.value("cache_prompt", false))
        while (static_cast<size_t>(cache_n) < std::min(llama_slot_.size(), prompt.size()) &&
               llama_slot_[cache_n] == prompt[cache_n])
          ++cache_n;
      llama_slot_ = prompt;
    }
    events = llama_events(options_, req, cache_n, whole, body);
  } else if (p == "/generate") {
    events = sglang_events(options_, req, whole, body);
  } else {
    return send_whole(fd, 404, "application/json", R"({"detail":"Not Found"})");
  }

  const bool stream_fault = fault == Fault::invalid_json_chunk || fault == Fault::stall_mid_stream ||
                            fault == Fault::close_mid_stream || fault == Fault::truncated_stream;
  if (whole) {
    if (!stream_fault) return send_whole(fd, 200, "application/json", body);
    // The same faults on a non-streamed body: half of it, then the fault.
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n";
    if (fault == Fault::invalid_json_chunk) return send_whole(fd, 200, "application/json", body.substr(0, body.size() / 2));
    if (!send_all(fd, head + body.substr(0, body.size() / 2))) return false;
    if (fault == Fault::stall_mid_stream) wait_or_stop(options_.stall_ms);
    return false;
  }
  return stream_events(fd, events, fault);
}

bool FakeServer::stream_events(int fd, const std::vector<std::string>& events, Fault fault) {
  const bool stream_fault = fault == Fault::invalid_json_chunk || fault == Fault::stall_mid_stream ||
                            fault == Fault::close_mid_stream || fault == Fault::truncated_stream;
  if (!send_stream_head(fd)) return false;
  const size_t good = stream_fault ? std::min<size_t>(2, events.size()) : events.size();
  const size_t per_write = static_cast<size_t>(std::max(1, options_.tokens_per_write));
  for (size_t i = 0; i < good; i += per_write) {
    std::string batch;
    for (size_t j = i; j < std::min(good, i + per_write); ++j) batch += events[j];
    if (!send_chunk(fd, batch)) return false;
    if (options_.token_interval_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(options_.token_interval_us));
  }
  switch (fault) {
    case Fault::invalid_json_chunk:
      if (!send_chunk(fd, "data: {\"choices\": [{\"text\": \"x\", \"index\"\n\n")) return false;
      for (size_t i = good; i < events.size(); ++i)
        if (!send_chunk(fd, events[i])) return false;
      return send_all(fd, "0\r\n\r\n");
    case Fault::stall_mid_stream:
      wait_or_stop(options_.stall_ms);
      return false;
    case Fault::close_mid_stream:
      send_all(fd, "40\r\ndata: {\"choi");
      return false;
    case Fault::truncated_stream:
      return send_all(fd, "0\r\n\r\n");
    default:
      return send_all(fd, "0\r\n\r\n");
  }
}

}  // namespace kvgate::testing
