#pragma once
// The one per-config summary of a run: what `kvgate eval` prints, `kvgate runs show` lists, the
// report tabulates and the gate's absolute and latency checks compare. Pure functions on plain
// numbers; the harness maps stored rows (or the runner's own values) into these structs.
//
// Definitions (docs/gates.md "Absolute metrics", docs/schema.md):
//   mean KLD, same top-1  token-weighted over items: Σ mean_i · n_i / Σ n_i, over the items that
//                         measured both (n_i > 0, both finite);
//   KLD p99               the 99th percentile over items of each item's 99th-percentile token
//                         KLD, over items with scored tokens (the tail a few bad items make);
//   KLD max               the largest item maximum;
//   gold accuracy         gold exact-match rate over the items with a gold answer;
//   divergence rate       fraction of the items with a greedy answer whose answer differs from
//                         the reference config's;
//   first-token EOS rate  fraction of the turns with a greedy answer whose first token ended
//                         generation (an empty answer);
//   first-token differs   fraction of those turns whose first token differs from the reference
//   rate                  config's first token (answer_divergence == 0);
//   TTFT, TPOT            percentiles over turns; a turn that emitted one token has no TPOT
//                         (the store holds 0 there), so it is left out of the TPOT percentiles.
// Percentiles are scoring/stats.h's. Sums run in the order the items are given: callers pass
// them in item-key order (the store's order), so every consumer of the same rows gets the same
// bits.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvgate::scoring {

// One item under one config. NaN / nullopt: not measured.
struct ItemScores {
  int64_t scored_tokens = 0;
  double kld_mean = 0, kld_max = 0, kld_p99 = 0, same_top1 = 0;
  std::optional<bool> exact_match_gold;
  std::optional<bool> diverged;  // greedy answer differs from the reference config's; nullopt: not generated
  // First-token checks (issue 32), over the item's turns that have a greedy answer: those whose
  // first token ended generation (an empty answer: EOS or end-of-turn at once) and those whose
  // first token differs from the reference config's first token.
  int64_t answered_turns = 0, first_token_eos = 0, first_token_differs = 0;
};

// NaN where no item measured the quantity.
struct ItemAggregate {
  int64_t items = 0;
  int64_t scored_tokens = 0;  // over every item, measured or not
  double kld_mean = 0, same_top1 = 0, kld_p99 = 0, kld_max = 0;
  double gold_accuracy = 0;  // gold exact-match rate over the items with a gold answer
  int64_t gold_items = 0;    // items with a gold answer
  int64_t gold_correct = 0;  // of those, answered correctly
  double divergence_rate = 0;
  // Turn-weighted over the turns with a greedy answer; NaN without one.
  int64_t answered_turns = 0;
  double first_token_eos_rate = 0, first_token_differs_rate = 0;
};

// Accumulates items one at a time, for callers that group rows as they read them.
class ItemAggregator {
 public:
  void add(const ItemScores& item);
  ItemAggregate result() const;

 private:
  int64_t items_ = 0, scored_tokens_ = 0;
  double kld_sum_ = 0, top1_sum_ = 0, weighted_tokens_ = 0;
  double correct_ = 0, answered_ = 0, diverged_ = 0, generated_ = 0;
  int64_t answered_turns_ = 0, first_token_eos_ = 0, first_token_differs_ = 0;
  double kld_max_ = 0;
  bool has_max_ = false;
  std::vector<double> p99s_;
};

ItemAggregate aggregate_items(std::span<const ItemScores> items);

// Whether gold accuracy can say anything about a config: only when the reference config itself
// answers enough of the gold questions. A model that cannot do the task scores ~0 under every
// config, and "no accuracy lost" would then read as a finding when it is the model's limit. The
// one rule, used by every table, report and gate check that shows or compares gold accuracy:
// the reference must answer at least kGoldMinCorrect questions and at least kGoldMinFraction
// of those it was asked.
inline constexpr int64_t kGoldMinCorrect = 5;
inline constexpr double kGoldMinFraction = 0.20;

struct GoldSignal {
  int64_t reference_correct = 0, reference_answered = 0;
  bool informative() const;
  // "n/a (reference 0/10)" where not informative; "" where it is (show the number).
  std::string unavailable() const;
  // One line for a reader: why the column reads n/a ("" where informative or nothing was asked).
  std::string note() const;
};

GoldSignal gold_signal(int64_t reference_correct, int64_t reference_answered);
GoldSignal gold_signal(const ItemAggregate& reference);

// One scored turn's latency, ms. NaN (or a TPOT <= 0) where not measured. The *_cpu_ms pair is
// the same spans in CPU time of the work (core/cpu_time.h): what the gate compares between runs
// made under different load (docs/gates.md, "How latency is gated").
struct TurnLatency {
  double ttft_ms = 0, tpot_ms = 0;
  double ttft_cpu_ms = 0, tpot_cpu_ms = 0;
};

struct LatencyAggregate {
  size_t ttft_turns = 0, tpot_turns = 0;  // turns that measured each
  double ttft_p50 = 0, ttft_p95 = 0, ttft_p99 = 0;
  double tpot_p50 = 0, tpot_p95 = 0, tpot_p99 = 0;  // NaN without measured turns
};

LatencyAggregate aggregate_latency(std::span<const TurnLatency> turns);

// Drift over the turns of multi-turn sessions: per turn index, the mean over sessions of that
// turn's mean KLD. `turn_kld` holds one config's turns; turns with a non-finite KLD are skipped.
struct SessionTurn {
  int64_t turn_index = 0;
  double kld_mean = 0;
};
std::map<int64_t, double> drift_over_turns(std::span<const SessionTurn> turn_kld);

// The per-turn table of multi-turn sessions (`kvgate replay`, `runs show`): per turn index, the
// mean over sessions of each of that turn's numbers, each over the sessions that measured it
// (a non-finite value is not measured, nor a TPOT <= 0: a one-token answer has none). NaN where
// no session measured it. kld_mean is drift_over_turns's, bit for bit.
struct SessionTurnScores {
  int64_t turn_index = 0;
  double context_tokens = 0, kld_mean = 0, same_top1 = 0, ttft_ms = 0, tpot_ms = 0;
};
struct TurnMeans {
  size_t sessions = 0;  // sessions that reached this turn
  double context_tokens = 0, kld_mean = 0, same_top1 = 0, ttft_ms = 0, tpot_ms = 0;
};
std::map<int64_t, TurnMeans> means_over_sessions(std::span<const SessionTurnScores> turns);

}  // namespace kvgate::scoring
