#pragma once
// An eval item as the runner sees it: rendered with the model's chat template (or taken as raw
// text), cut into segments at its scored spans and tokenized once, so every config, in-process
// or behind an endpoint, gets exactly the same token ids.
#include <cstdint>
#include <string>
#include <vector>

#include "evalsets/item.h"
#include "harness/eval/eval_plan.h"
#include "harness/inference.h"
#include "results/store.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"

namespace kvgate::harness {

// A piece of an item's rendered token stream; scored pieces are compared token by token.
struct Segment {
  std::vector<int32_t> tokens;
  int target = -1;            // index into the item's scored targets, -1 = context only
  bool final_answer = false;  // the item's last target: its greedy text is checked against the gold answer
  std::string text;
};

// Renders an item with the model's chat template (or takes its raw text) and cuts it into
// segments at the scored spans. Tokenization happens per segment.
std::vector<Segment> segment_item(const evalsets::EvalItem& item, const runtime::Model& model,
                                  const runtime::Tokenizer& tokenizer);

// An item rendered and tokenized, ready to run: every item of a plan is prepared before any
// model work, so an item that cannot run stops the run before it starts.
struct PreparedItem {
  const evalsets::EvalItem* item = nullptr;
  std::vector<Segment> segments;
  int64_t tokens = 0;  // over all segments
};

// Renders and tokenizes every item the plan selects (EvalPlan::selected: --limit, then the
// shard) with `lm` (the reference's model; the plan's models share one tokenizer). Input error
// (exit 2), naming the workload, the item, its token count and the limit, when an item with its
// greedy answers would not fit in a model's trained context (GGUF context_length, the smallest
// of `models`); nothing has run yet then.
std::vector<PreparedItem> prepare_items(const EvalPlan& plan, const LoadedModel& lm,
                                        const std::vector<const runtime::Model*>& models, int max_new_tokens);

// The item's identity row in the store.
results::ItemInfo item_info(const EvalPlan& plan, const evalsets::EvalItem& item);

}  // namespace kvgate::harness
