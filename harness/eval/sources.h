#pragma once
// Where one config's numbers come from, for the one eval loop (runner.h): an in-process source
// runs the model on a runtime::Backend with its KV cache in the config's format and gives full
// logits; an endpoint source asks a serving engine (engine mode, docs/engine-mode.md) and gives
// top-k logprob lists. The loop drives every config's source through an item's segments in the
// same order and scores what they give against the reference config's, so a scoring change is
// made once for both.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/eval/eval_plan.h"
#include "harness/eval/items.h"
#include "harness/inference.h"
#include "runtime/backend.h"
#include "scoring/topk_kld.h"
#include "serving/engine_client.h"

namespace kvgate::harness {

// One position's top-k list, owning its entries.
struct TopList {
  std::vector<scoring::TopLogprob> top;
  std::optional<double> target_logprob;
  scoring::TopKDistribution view() const { return {top, target_logprob}; }
};

// A greedy answer to a scored span's context: its tokens (without the token that ended it) and
// each token's emission time, ms after the turn's new tokens began (TTFT includes the new
// context's prefill), as the config produced it.
struct Answer {
  std::vector<int32_t> tokens;
  std::vector<double> token_ms;
  // In-process: the work's CPU time at each token, ms from the turn's start (GreedyTokens); empty
  // for an endpoint, whose CPU is the server's.
  std::vector<double> token_cpu_ms;
  std::string text;  // decoded (an endpoint that streams text only: what it sent)
  std::optional<int64_t> prompt_tokens, cached_tokens;  // endpoint usage, when reported
};

// The teacher-forced distributions of a scored span of n tokens. Full: `rows` holds
// [n + 1][vocab] logits, row j predicting token j of the span (row n, what follows it). Top-k:
// `lists` holds n lists. Neither: the config cannot score spans (an endpoint that returns no
// prompt logprobs).
struct SpanDistributions {
  std::vector<float> rows;
  std::vector<TopList> lists;
  bool top_k = false;
  bool scored() const { return top_k ? !lists.empty() : !rows.empty(); }
};

class ConfigSource {
 public:
  virtual ~ConfigSource() = default;
  // A new item of `tokens` tokens (all segments) is about to start.
  virtual void begin_item(int64_t item_tokens, int max_new_tokens) = 0;
  // Context tokens join the sequence (in-process: prefilled now and timed into the next
  // answer's TTFT; an endpoint: sent with the next request).
  virtual void add_context(const std::vector<int32_t>& tokens) = 0;
  // The greedy answer after everything added so far; the sequence itself does not change.
  virtual Answer answer(int max_new) = 0;
  // The span teacher-forced: its distributions into `out`; the span then joins the sequence.
  virtual void score_span(const std::vector<int32_t>& span, SpanDistributions& out) = 0;
  // The endpoint behind the source; null for in-process.
  virtual serving::EngineClient* client() { return nullptr; }
};

// In-process: `backend` runs the config's KV format. top_k > 0 (a run with endpoints): the
// logits are cut to their top k so that both sides of each comparison use the same estimator.
std::unique_ptr<ConfigSource> make_in_process_source(runtime::Backend& backend, const PlannedConfig& config,
                                                     const LoadedModel& lm);

// Engine mode: `client` serves the config; `lm`'s tokenizer decodes its answers.
std::unique_ptr<ConfigSource> make_endpoint_source(serving::EngineClient& client, const PlannedConfig& config,
                                                   const LoadedModel& lm);

}  // namespace kvgate::harness
