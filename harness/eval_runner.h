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
#include <string>
#include <vector>

#include "evalsets/item.h"
#include "harness/inference.h"
#include "kernels/kv_config.h"
#include "results/store.h"
#include "runtime/engine.h"

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

struct EvalOptions {
  int threads = 0;          // CPU workers of the engine the caller makes
  std::string backend = "cpu";
  int max_new_tokens = 32;  // greedy tokens per scored span (fewer if the span is shorter)
  int limit = 0;            // items to run (0 = all)
};

// The printed summary, over the items this invocation ran (a resumed run's earlier items are
// in the database; `kvgate runs show` summarizes all of them). kld_p99 is the 99th percentile,
// over items, of each item's 99th-percentile token KLD: the tail that a few bad items make.
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
};

struct EvalResult {
  int64_t run_id = 0;
  int64_t items_total = 0, items_run = 0, items_skipped = 0;
  std::vector<ConfigSummaryRow> configs;  // reference first
  double seconds = 0;
};

// Runs `items` into run `run_id` (already begun, configs attached in order ref, candidates) on
// `engine`. Items whose every config is already stored (a resumed run) are skipped.
EvalResult run_eval(results::Store& store, int64_t run_id, const LoadedModel& lm, runtime::Engine& engine,
                    const std::vector<evalsets::EvalItem>& items,
                    const std::string& evalset_hash, const kernels::KvConfig& ref,
                    const std::vector<kernels::KvConfig>& candidates, const std::vector<int64_t>& config_ids,
                    const EvalOptions& options, const std::function<void(const std::string&)>& progress);

}  // namespace kvgate::harness
