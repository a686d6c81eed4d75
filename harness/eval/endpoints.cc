#include "harness/eval/endpoints.h"

#include <cstdio>

#include <fmt/format.h>

#include "core/error.h"

namespace kvgate::harness {
namespace {

std::string where(const serving::EndpointConfig& e) {
  return "endpoint '" + e.name + "' (" + serving::redact_url(e.url) + ")";
}

}  // namespace

void check_engine_context(const EvalPlan& plan, const std::vector<PreparedItem>& prepared, const Endpoints& endpoints,
                          int max_new_tokens) {
  for (size_t c = 0; c < plan.configs.size(); ++c) {
    const serving::EngineClient* client = endpoints.clients[c].get();
    if (client == nullptr || !client->info()) continue;
    for (const PreparedItem& p : prepared)
      if (const std::string problem = serving::context_problem(*client->info(), p.tokens, max_new_tokens); !problem.empty())
        throw_input_error(fmt::format("item {} does not fit {}: {}; start the server with a larger context or lower "
                                      "--max-new-tokens",
                                      echo_user_text(p.item->id), where(client->endpoint()), problem));
  }
}


Endpoints connect_endpoints(EvalPlan& plan, uint64_t seed, bool scores_spans) {
  Endpoints out;
  out.http = std::make_unique<serving::HttpClient>(serving::HttpClientOptions{{}, seed});
  out.clients.resize(plan.configs.size());
  for (size_t c = 0; c < plan.configs.size(); ++c) {
    PlannedConfig& config = plan.configs[c];
    if (!config.endpoint) continue;
    auto client = std::make_unique<serving::EngineClient>(*config.endpoint, *out.http);
    const serving::EngineInfo& info = client->discover();
    for (const std::string& note : info.notes)
      std::fprintf(stderr, "kvgate: %s: %s\n", where(*config.endpoint).c_str(), note.c_str());
    settle_endpoint_kv(config, info);
    if (scores_spans && config.role == ConfigRole::reference && client->kind() == serving::EngineKind::openai)
      throw_usage_error(where(config.endpoint.value()) +
                        " speaks the plain OpenAI API, which returns no prompt logprobs: it cannot be the reference "
                        "(give its engine kind in an endpoints file if it is vLLM, SGLang or llama-server)");
    out.clients[c] = std::move(client);
  }
  for (size_t a = 0; a < plan.configs.size(); ++a)
    for (size_t b = a + 1; b < plan.configs.size(); ++b)
      if (plan.configs[a].spec == plan.configs[b].spec)
        throw_usage_error("KV config " + plan.configs[a].spec + " is given twice");
  return out;
}

results::ConfigEndpoint endpoint_record(const PlannedConfig& config, const serving::EngineClient& client) {
  results::ConfigEndpoint e;
  e.name = client.endpoint().name;
  e.url = serving::redact_url(client.endpoint().url);
  e.engine = serving::engine_kind_name(client.kind());
  if (client.info()) {
    e.engine_version = client.info()->version;
    e.kv_reported = serving::reported_kv_label(*client.info());
    e.discovery = client.info()->raw;
  }
  e.model = client.model();
  e.kv = config.kv.canonical();
  e.kv_source = config.kv_source;
  return e;
}

}  // namespace kvgate::harness
