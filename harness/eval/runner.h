#pragma once
// The main job, one loop for every source: each eval item (or replayed session) goes through
// the reference config and each candidate config, teacher-forced over its scored spans, with a
// greedy answer per scored span, and every number lands in the results store one item per
// transaction. A config's numbers come from its ConfigSource (sources.h): the model in-process
// (full logits) or a serving endpoint (top-k lists; engine mode); the loop scores both the same
// way, with the same accumulator (item_scoring.h).
//
// Per item, all configs advance through the item's segments together, each in its own
// sequence (the prefix stays cached, as in a serving engine, so a multi-turn session is
// prefilled turn by turn). Only one segment's reference distributions are held at a time.
//
// Failures (engine mode). An item that fails on an endpoint is recorded as failed (nothing of
// it is written) and stays to do; a connection failure stops the run at once (the server is
// gone), other failures (a stall, a bad response) let the run go on to the next item. Either
// way run_eval then throws serving::EndpointError (exit 3) naming the endpoint, and
// `--resume RUN` finishes the run.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/eval/cross_check.h"
#include "harness/eval/endpoints.h"
#include "harness/eval/eval_plan.h"
#include "harness/eval/run_recorder.h"
#include "harness/inference.h"
#include "runtime/backend.h"
#include "scoring/aggregate.h"

namespace kvgate::harness {

struct EvalOptions {
  int threads = 0;          // CPU workers of the backend the caller makes
  std::string backend = "cpu";
  int max_new_tokens = 32;  // greedy tokens per scored span (fewer if the span is shorter)
};

// The printed summary of one config over the items this invocation ran (a resumed run's
// earlier items are in the database; `kvgate runs show` summarizes all of them), by
// scoring/aggregate.h's definitions: the same numbers `runs show`, the report and the gate
// compute from the stored rows.
struct ConfigSummaryRow {
  std::string spec;
  bool reference = false;
  double bits_per_element = 0;
  double kv_bytes_per_token = 0;
  scoring::ItemAggregate quality;
  scoring::LatencyAggregate latency;
  std::string endpoint;  // engine mode: the endpoint serving this config ("" = in-process)
  int top_k = 0;         // engine mode: KLD and Δp are top-k estimates from k logprobs (0 = full)
};

struct EvalResult {
  int64_t run_id = 0;
  int64_t items_total = 0, items_run = 0, items_skipped = 0;
  std::vector<ConfigSummaryRow> configs;  // in the plan's order: reference first
  std::vector<CrossCheck> cross_checks;   // engine mode: in-process configs beside the endpoints they emulate
  double seconds = 0;
};

// One model of the plan (EvalPlan::models), loaded, and the backend its in-process configs run
// on (null when endpoints serve every config). The models of one plan share one tokenizer
// (check_same_tokenizer): items are rendered and tokenized once, with the first (the
// reference's) model.
struct RunModel {
  const LoadedModel* lm = nullptr;
  runtime::Backend* backend = nullptr;
  results::ConfigModel identity;  // what the store records for its in-process configs
};

// Runs the plan: each in-process config on its model's backend (`models` in the order of
// plan.models), each endpoint config through `endpoints` (connected by connect_endpoints; empty
// when the plan has none, and then a plan with endpoints runs one model). Prepares every item
// (prepare_items; with endpoints, check_engine_context too), opens the run through `recorder`,
// runs each item through every config and records it, then marks the run complete (or
// interrupted when --limit left items out, or failed on an error). Items a resumed run already
// holds are skipped.
EvalResult run_eval(const EvalPlan& plan, const std::vector<RunModel>& models, Endpoints& endpoints,
                    RunRecorder& recorder, const EvalOptions& options,
                    const std::function<void(const std::string&)>& progress);

}  // namespace kvgate::harness
