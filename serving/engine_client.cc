#include "serving/engine_client.h"

#include <algorithm>
#include <memory>

#include "serving/engine_traits.h"

namespace kvgate::serving {

namespace {

double ms_since(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// Discovery answers are small and come from an idle path of the server; a long wait there
// means the server is not what the config says, not that it is busy.
constexpr std::chrono::milliseconds kDiscoveryTimeout{15'000};

struct PendingGeneration {
  explicit PendingGeneration(ResponseFormat format, bool streamed) : stream(format), whole(format), streamed(streamed) {}
  CompletionStream stream;
  CompletionParser whole;
  bool streamed;
  std::string body;  // non-streamed responses, parsed at the end
};

}  // namespace

EngineClient::EngineClient(EndpointConfig endpoint, HttpClient& http)
    : endpoint_(std::move(endpoint)),
      http_(http),
      headers_(request_headers(endpoint_)),
      kind_(endpoint_.kind),
      model_(endpoint_.model) {
  http_.set_queue_limit(endpoint_.name, endpoint_.max_inflight);
}

std::string EngineClient::where() const { return "endpoint '" + endpoint_.name + "' (" + redact_url(endpoint_.url) + ")"; }

HttpRequest EngineClient::http_request(const EngineRequest& r) const {
  HttpRequest h;
  h.endpoint = endpoint_.name;
  h.method = r.method;
  h.url = endpoint_.url + r.path;
  h.headers = headers_;
  h.body = r.body;
  h.timeouts = endpoint_.timeouts;
  h.queue = endpoint_.name;
  return h;
}

HttpRequest EngineClient::get_request(const std::string& path) const {
  EngineRequest r;
  r.method = "GET";
  r.path = path;
  HttpRequest h = http_request(r);
  h.timeouts.total = std::min(h.timeouts.total, kDiscoveryTimeout);
  return h;
}

std::pair<HttpOutcome, std::string> EngineClient::exchange(const HttpRequest& request) {
  auto body = std::make_shared<std::string>();
  auto outcome = std::make_shared<HttpOutcome>();
  const auto id = http_.submit(request, {[body](std::string_view bytes, SteadyClock::time_point) { body->append(bytes); },
                                         [outcome](const HttpOutcome& o) { *outcome = o; }});
  http_.run_until_done(id);
  return {*outcome, std::move(*body)};
}

const EngineInfo& EngineClient::discover() {
  if (kind_ == EngineKind::automatic) {
    // Each engine has one path nobody else serves; a 404 there just means "not this one".
    for (const std::string& path : probe_paths()) {
      auto [outcome, body] = exchange(get_request(path));
      if (outcome.ok()) {
        if (const auto kind = kind_from_probe(path, body)) {
          kind_ = *kind;
          break;
        }
      } else if (outcome.failure != Failure::http_status) {
        throw EndpointError(outcome.failure, outcome.message + " (while discovering the engine)");
      }
    }
    if (kind_ == EngineKind::automatic) kind_ = EngineKind::openai;
  }
  std::vector<std::pair<std::string, std::string>> answers;
  for (const DiscoveryPath& d : engine_traits(kind_).discovery) {
    for (std::string_view path : {d.path, d.fallback}) {
      if (path.empty()) break;
      auto [outcome, body] = exchange(get_request(std::string(path)));
      if (outcome.ok()) {
        answers.emplace_back(path, std::move(body));
        break;
      }
      if (outcome.failure != Failure::http_status)
        throw EndpointError(outcome.failure, outcome.message + " (while discovering the engine)");
    }
  }
  try {
    info_ = parse_discovery(kind_, answers);
  } catch (const std::exception& e) {
    throw EndpointError(Failure::consumer, where() + ": " + e.what());
  }
  if (kind_ == EngineKind::llama_server) {
    // A server without /tokenize still scores, except at steps whose argmax is a partial UTF-8 byte.
    HttpRequest tokenize = get_request("/tokenize");
    tokenize.method = "POST";
    tokenize.body = plain_token_request();
    auto [outcome, body] = exchange(tokenize);
    if (outcome.ok()) info_->plain_token = parse_plain_token(body);
    else if (outcome.failure != Failure::http_status)
      throw EndpointError(outcome.failure, outcome.message + " (while discovering the engine)");
  }
  if (model_.empty()) model_ = info_->model;
  return *info_;
}

void EngineClient::ensure_ready() {
  if (!info_ && (kind_ == EngineKind::automatic || (model_.empty() && kind_ != EngineKind::llama_server))) discover();
}

HttpClient::TransferId EngineClient::submit_generate(const GenerateRequest& request,
                                                     std::function<void(GenerationOutcome)> done) {
  if (kind_ == EngineKind::automatic)
    throw_internal_error(where() + ": submit_generate before discover() resolved the engine kind");
  const EngineRequest er = build_generate(kind_, model_, request);
  auto pending = std::make_shared<PendingGeneration>(er.format, er.stream);
  TransferHandlers handlers;
  handlers.on_body = [pending](std::string_view bytes, SteadyClock::time_point received) {
    if (pending->streamed) pending->stream.feed(bytes, received);
    else pending->body.append(bytes);
  };
  handlers.on_done = [pending, done = std::move(done), where = where()](const HttpOutcome& o) {
    GenerationOutcome g;
    g.result.http = o;
    if (!o.ok()) {
      g.failure = o.failure;
      g.error = o.message;
      done(std::move(g));
      return;
    }
    try {
      if (pending->streamed) {
        g.result.completion = pending->stream.finish();
      } else {
        pending->whole.on_response(pending->body, o.finished);
        g.result.completion = pending->whole.finish();
      }
      g.result.token_ms.reserve(g.result.completion.tokens.size());
      for (const StreamedToken& t : g.result.completion.tokens) g.result.token_ms.push_back(ms_since(o.submitted, t.received));
      g.ok = true;
    } catch (const std::exception& e) {
      g.failure = Failure::consumer;
      g.error = where + ": invalid response: " + e.what();
    }
    done(std::move(g));
  };
  return http_.submit(http_request(er), std::move(handlers));
}

GenerationResult EngineClient::generate(const GenerateRequest& request) {
  ensure_ready();
  auto outcome = std::make_shared<GenerationOutcome>();
  const auto id = submit_generate(request, [outcome](GenerationOutcome g) { *outcome = std::move(g); });
  http_.run_until_done(id);
  if (!outcome->ok) throw EndpointError(outcome->failure, outcome->error);
  return std::move(outcome->result);
}

ScoreResult EngineClient::score(const ScoreRequest& given) {
  ensure_ready();
  ScoreRequest request = given;
  if (!request.plain_token && info_) request.plain_token = info_->plain_token;
  const std::vector<EngineRequest> requests = build_score(kind_, model_, request);
  std::vector<std::string> bodies;
  bodies.reserve(requests.size());
  // In order, one at a time: llama-server's steps rely on the previous prompt still being in
  // the slot's cache.
  for (const EngineRequest& er : requests) {
    auto [outcome, body] = exchange(http_request(er));
    if (!outcome.ok()) throw EndpointError(outcome.failure, outcome.message);
    bodies.push_back(std::move(body));
  }
  try {
    return parse_score(kind_, request, bodies);
  } catch (const EndpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw EndpointError(Failure::consumer, where() + ": invalid scoring response: " + e.what());
  }
}

}  // namespace kvgate::serving
