#pragma once
// One serving endpoint as the harness sees it: discover what it runs, generate greedily
// (streamed, timed per token, top-k logprobs where asked), score a span teacher-forced, or submit many
// generations at once for load replay. Requests go through a shared HttpClient, so several
// endpoints (one per KV config) and hundreds of requests share one driving thread.
//
// Failures are EndpointError (a kvgate::Error of kind environment, exit 3) whose message names
// the endpoint and URL; the harness records the item as failed and moves on (resumable).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "serving/adapters.h"
#include "serving/completion.h"
#include "serving/endpoint.h"
#include "serving/http_client.h"

namespace kvgate::serving {

class EndpointError : public Error {
 public:
  EndpointError(Failure failure, std::string message) : Error(ErrorKind::environment, std::move(message)), failure_(failure) {}
  Failure failure() const { return failure_; }

 private:
  Failure failure_;
};

struct GenerationResult {
  Completion completion;
  HttpOutcome http;  // attempts and the submitted/started/first byte/finished times
  // Each generated token's arrival in ms since submission (scoring::derive_latency's input:
  // TTFT is token_ms[0], TPOT and inter-token gaps follow).
  std::vector<double> token_ms;
};

// Either a result or the failure, for the asynchronous path.
struct GenerationOutcome {
  bool ok = false;
  Failure failure = Failure::none;
  std::string error;  // names the endpoint
  GenerationResult result;
};

class EngineClient {
 public:
  // `http` must outlive the client; the endpoint's max_inflight becomes its queue limit (the
  // client's retry policy applies). Resolves the API key now: a missing variable throws here.
  EngineClient(EndpointConfig endpoint, HttpClient& http);

  const EndpointConfig& endpoint() const { return endpoint_; }
  // The resolved kind (after discover() when the config said auto).
  EngineKind kind() const { return kind_; }
  // The model field sent: the configured one, else what discovery found.
  const std::string& model() const { return model_; }

  // Probes the engine kind when it is `auto`, then reads version, model, context and KV dtype
  // (each discovery path, or its older spelling where the path answers 404). Called
  // by generate/score on first use when needed; call it first to record the engine in a run.
  const EngineInfo& discover();
  const std::optional<EngineInfo>& info() const { return info_; }

  // Blocking; other transfers on the shared client progress meanwhile.
  GenerationResult generate(const GenerateRequest& request);
  ScoreResult score(const ScoreRequest& request);  // llama-server: the discovered plain token unless given

  // Non-blocking: `done` runs on the polling thread when the generation ends. discover() must
  // have run (the kind must be known) — a load replay discovers every endpoint up front.
  HttpClient::TransferId submit_generate(const GenerateRequest& request, std::function<void(GenerationOutcome)> done);

 private:
  void ensure_ready();
  HttpRequest http_request(const EngineRequest& request) const;
  HttpRequest get_request(const std::string& path) const;
  // One blocking exchange: the outcome and the whole body.
  std::pair<HttpOutcome, std::string> exchange(const HttpRequest& request);
  std::string where() const;

  EndpointConfig endpoint_;
  HttpClient& http_;
  std::vector<std::string> headers_;  // resolved once, API key included; never printed
  EngineKind kind_;
  std::string model_;
  std::optional<EngineInfo> info_;
};

}  // namespace kvgate::serving
