#pragma once
// The main job: every eval item (or replayed session) goes through the reference KV config and
// each candidate config, teacher-forced over its scored spans, with a short greedy answer per
// scored span, and every number lands in the results store one item per transaction.
//
// Per item, all configs advance through the item's token segments together, each in its own
// paged cache (the prefix stays cached, as in a serving engine, so a multi-turn session is
// prefilled turn by turn). Only one segment's reference logits are held at a time.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "evalsets/item.h"
#include "harness/eval/eval_plan.h"
#include "harness/inference.h"
#include "harness/eval/run_recorder.h"
#include "runtime/backend.h"
#include "scoring/aggregate.h"

namespace kvgate::harness {

// A piece of an item's rendered token stream; scored pieces are compared token by token.
struct Segment {
  std::vector<int32_t> tokens;
  int target = -1;        // index into the item's scored targets, -1 = context only
  bool final_answer = false;  // the item's last target: its greedy text is checked against the gold answer
  std::string text;
};

// Renders an item with the model's chat template (or takes its raw text) and cuts it into
// segments at the scored spans. Tokenization happens per segment, so every config sees exactly
// the same token ids.
std::vector<Segment> segment_item(const evalsets::EvalItem& item, const runtime::Model& model,
                                  const runtime::Tokenizer& tokenizer);

// An item rendered and tokenized, ready to run: every item of a plan is prepared before any
// model work, so an item that cannot run stops the run before it starts.
struct PreparedItem {
  const evalsets::EvalItem* item = nullptr;
  std::vector<Segment> segments;
  int64_t tokens = 0;  // over all segments
};

struct EvalOptions {
  int threads = 0;          // CPU workers of the engine the caller makes
  std::string backend = "cpu";
  int max_new_tokens = 32;  // greedy tokens per scored span (fewer if the span is shorter)
};

// The printed summary, over the items this invocation ran (a resumed run's earlier items are
// in the database; `kvgate runs show` summarizes all of them), by scoring/aggregate.h's
// definitions: the same numbers `runs show`, the report and the gate compute from the stored rows.
struct ConfigSummaryRow {
  std::string spec;
  bool reference = false;
  double bits_per_element = 0;
  double kv_bytes_per_token = 0;
  int64_t scored_tokens = 0;
  double kld_mean = 0, kld_p99 = 0, top1 = 0;
  double answer_accuracy = 0;  // gold exact-match rate over items with a gold answer (NaN if none)
  int64_t answered_items = 0;
  double ttft_p50_ms = 0, tpot_p50_ms = 0;
  std::string endpoint;  // engine mode: the endpoint serving this config ("" = in-process)
  int top_k = 0;         // engine mode: KLD and Δp are top-k estimates from k logprobs (0 = full)
};

// Per config, the items run now, for the summary.
struct ConfigTotals {
  std::map<std::string, scoring::ItemScores> items;  // by item key: the store's order
  std::vector<scoring::TurnLatency> turns;
  void add(const std::string& item_key, const ConfigItemRecord& record);
};
ConfigSummaryRow summary_row(const PlannedConfig& config, const ConfigTotals& totals, const kernels::KvShape& shape);

// The item's identity row in the store.
results::ItemInfo item_info(const EvalPlan& plan, const evalsets::EvalItem& item);

// A greedy answer probed on a fork of `seq` (its first `context_tokens` tokens), starting from
// `last_row`'s logits: up to max_new tokens, stopping before EOS, each with its emission time
// (ms, `pending_prefill_ms` plus the time since the probe began).
struct GreedyProbe {
  std::vector<int32_t> tokens;
  std::vector<double> token_times_ms;
};
GreedyProbe greedy_probe(runtime::Backend& engine, runtime::BackendSequence& seq, int64_t context_tokens,
                         const std::vector<float>& last_row, int max_new, std::optional<int32_t> eos,
                         double pending_prefill_ms);

struct EvalResult {
  int64_t run_id = 0;
  int64_t items_total = 0, items_run = 0, items_skipped = 0;
  std::vector<ConfigSummaryRow> configs;  // in the plan's order: reference first
  double seconds = 0;
};

// One model of the plan (EvalPlan::models), loaded, and the engine its configs run on. The
// models of one plan share one tokenizer (check_same_tokenizer): items are rendered and
// tokenized once, with the first (the reference's) model.
struct RunModel {
  const LoadedModel* lm = nullptr;
  runtime::Backend* engine = nullptr;
  results::ConfigModel identity;  // what the store records for its configs
};

// Renders and tokenizes every item the plan selects (EvalPlan::selected: --limit, then the
// shard). Input error (exit 2), naming the
// workload, the item, its token count and the limit, when an item with its greedy answers would
// not fit in a model's trained context (GGUF context_length, the smallest of `models`); nothing
// has run yet then.
std::vector<PreparedItem> prepare_items(const EvalPlan& plan, const std::vector<RunModel>& models,
                                        const EvalOptions& options);

// Runs the plan, each config on its model's engine (`models` in the order of plan.models):
// prepares every item (see prepare_items), opens the run through `recorder`, runs each item
// through every config and records it, then marks the run complete (or interrupted when --limit
// left items out, or failed on an error). Items a resumed run already holds are skipped.
EvalResult run_eval(const EvalPlan& plan, const std::vector<RunModel>& models, RunRecorder& recorder,
                    const EvalOptions& options, const std::function<void(const std::string&)>& progress);

}  // namespace kvgate::harness
