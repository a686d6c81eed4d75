#pragma once
// The results store's rows as scoring's inputs: scoring never sees the store, so every command
// that summarizes stored rows (runs show, report, gate) maps them here, the one way.
#include "results/store.h"
#include "scoring/aggregate.h"

namespace kvgate::harness {

inline scoring::ItemScores item_scores(const results::ItemMetrics& m) {
  scoring::ItemScores s;
  s.scored_tokens = m.scored_tokens;
  s.kld_mean = m.kld_mean;
  s.kld_max = m.kld_max;
  s.kld_p99 = m.kld_p99;
  s.same_top1 = m.same_top1;
  s.exact_match_gold = m.exact_match_gold;
  // A greedy answer was generated exactly when its length is stored.
  if (m.generated_tokens) s.diverged = m.first_divergence.has_value();
  return s;
}

inline scoring::TurnLatency turn_latency(const results::TurnMetrics& t) { return {t.ttft_ms, t.tpot_ms}; }

}  // namespace kvgate::harness
