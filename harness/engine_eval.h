#pragma once
// Engine mode for `kvgate eval` and `kvgate replay` of items (docs/engine-mode.md): the same
// prepared items go to serving endpoints (one per KV config) and, in a cross-check, through
// in-process configs too, and are scored into the same rows as an in-process run.
//
// Per scored span of an item, every config gives (a) a greedy answer, streamed and timed per
// token, with top-k logprobs, and (b) the top k logprobs of each span position teacher-forced
// (vLLM prompt_logprobs, SGLang input logprobs, llama-server one cached step per token; an
// in-process config's own logits cut to their top k). KLD and Δp come from scoring/topk_kld.h
// on both sides, the reference's list against each config's.
//
// Failures. An item that fails on an endpoint is recorded as failed (nothing of it is
// written) and stays to do; a connection failure stops the run at once (the server is gone),
// other failures (a stall, a bad response) let the run go on to the next item. Either way the
// command then exits 3 naming the endpoint, and `--resume RUN` finishes the run.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/eval/eval_plan.h"
#include "harness/eval_runner.h"
#include "harness/eval/run_recorder.h"
#include "serving/engine_client.h"

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

// What the run records about config `index`'s endpoint (after discovery).
results::ConfigEndpoint endpoint_record(const PlannedConfig& config, const serving::EngineClient& client);

// A cross-check pair: an in-process config and an endpoint running the same KV config, compared
// position by position (top-k estimator on both sides) and answer by answer.
struct CrossCheck {
  std::string emulation, engine;  // their specs
  int64_t positions = 0;
  double kld_mean = 0;     // mean KLD_topk(emulation ‖ engine)
  double kld_max = 0;
  double same_top1 = 0;    // fraction of positions whose top-1 agrees
  int64_t answers = 0;     // greedy answers compared
  double same_answer = 0;  // fraction of greedy answers identical token for token
};

struct EngineEvalResult {
  EvalResult eval;
  std::vector<CrossCheck> cross_checks;
};

// Runs the plan (it has endpoints, and so one model: no weights axis) like run_eval: `model`'s
// engine runs its in-process configs (null when it has none), and its tokenizer renders the
// items for every config. Throws serving::EndpointError (exit 3) after recording failed items.
EngineEvalResult run_engine_eval(const EvalPlan& plan, const RunModel& model, Endpoints& endpoints,
                                 RunRecorder& recorder, const EvalOptions& options,
                                 const std::function<void(const std::string&)>& progress);

}  // namespace kvgate::harness
