#pragma once
// Engine mode's endpoints for a plan (docs/engine-mode.md): one client per endpoint config,
// discovered before anything is written, and what the run records about each.
#include <cstdint>
#include <memory>
#include <vector>

#include "harness/eval/eval_plan.h"
#include "harness/eval/items.h"
#include "results/store.h"
#include "serving/engine_client.h"
#include "serving/http_client.h"

namespace kvgate::harness {

// The live endpoints of a plan: one client per endpoint config, discovered.
struct Endpoints {
  std::unique_ptr<serving::HttpClient> http;
  std::vector<std::unique_ptr<serving::EngineClient>> clients;  // per config of the plan; null for in-process
};

// Discovers every endpoint of the plan (exit 3 naming one that cannot be reached), settles
// each endpoint's KV config (settle_endpoint_kv) and, when the run scores spans, checks that
// the reference endpoint can.
Endpoints connect_endpoints(EvalPlan& plan, uint64_t seed, bool scores_spans = true);

// What the run records about config `config`'s endpoint (after discovery).
results::ConfigEndpoint endpoint_record(const PlannedConfig& config, const serving::EngineClient& client);

// Items must fit each engine's context as they fit the model's (prepare_items checked that):
// input error naming the item and the endpoint otherwise.
void check_engine_context(const EvalPlan& plan, const std::vector<PreparedItem>& prepared, const Endpoints& endpoints,
                          int max_new_tokens);

}  // namespace kvgate::harness
