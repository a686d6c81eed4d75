#pragma once
// Load replay (docs/engine-mode.md, "Load replay"): a shape trace sent to serving endpoints at
// its arrival times, open loop, with prompts synthesised to the traced lengths and prefix
// sharing, measured per request from the stream.
//
// Prompts. A request's prompt is its blocks' tokens in order: a block named by a trace id is a
// fixed token sequence drawn from that id alone (same id, same tokens, in every request and on
// every endpoint), so requests that share a chain of block ids share that prefix token for
// token, exactly as the trace says; the last block is cut to the traced length. A request
// without block ids gets tokens of its own. Tokens come from the model's ordinary vocabulary
// (no control or special tokens), deterministically from the seed.
//
// Timing. Each endpoint replays the whole trace in turn (one config at a time, so two servers
// sharing a machine do not load each other). A request is submitted at its arrival time
// (scaled by --time-scale) whatever the engine is doing — open loop — and its times are
// measured from that arrival; at most --max-inflight requests are on the wire to one endpoint,
// the rest wait in the client's queue (and that wait counts).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "results/store.h"
#include "runtime/tokenizer.h"
#include "serving/engine_client.h"
#include "workloads/trace.h"

namespace kvgate::harness {

// Every request's prompt tokens, in trace order.
std::vector<std::vector<int32_t>> synthesize_prompts(const workloads::Trace& trace, const runtime::Tokenizer& tokenizer,
                                                     uint64_t seed);

struct LoadReplayRun {
  double time_scale = 1.0;
  int max_inflight = 0;        // 0: the endpoint's own max_inflight
  int64_t max_output_tokens = 0;  // caps each request's traced output length (0 = none)
};

// Replays the trace against one endpoint; one row per request (config_id left 0). Request
// failures are rows too (the engine failed under this load); `progress` gets done/total.
std::vector<results::LoadRequest> replay_load(serving::EngineClient& client, serving::HttpClient& http,
                                              const workloads::Trace& trace,
                                              const std::vector<std::vector<int32_t>>& prompts, const LoadReplayRun& run,
                                              const std::function<void(size_t done, size_t total)>& progress);

}  // namespace kvgate::harness
