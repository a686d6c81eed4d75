#pragma once
// The results store's rows as scoring's inputs: scoring never sees the store, so every command
// that summarizes stored rows (runs show, report, gate) maps them here, the one way.
#include <vector>

#include "results/store.h"
#include "results/stored_run.h"
#include "scoring/aggregate.h"
#include "scoring/position_buckets.h"

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
  s.answered_turns = m.answered_turns;
  s.first_token_eos = m.first_token_eos;
  s.first_token_differs = m.first_token_differs;
  return s;
}

// A stored position row's sums, as scoring adds them up.
inline scoring::PositionSums position_sums(const results::PositionMetrics& p) {
  return {p.scored_tokens, p.kld_sum, p.delta_p_sum, p.same_top1};
}

// A stored run's position rows as scoring's, configs named by spec (a row of a config the run
// does not list is left out: StoredRun::spec_of names such ids apart).
inline std::vector<scoring::PositionRow> position_rows(const results::StoredRun& run) {
  std::vector<scoring::PositionRow> out;
  for (const results::RunPositionMetrics& r : run.positions) {
    if (!run.config(r.position.config_id)) continue;
    out.push_back({r.item_key, run.spec_of(r.position.config_id), scoring::position_bucket(r.position.position_from),
                   position_sums(r.position)});
  }
  return out;
}

inline scoring::TurnLatency turn_latency(const results::TurnMetrics& t) {
  return {t.ttft_ms, t.tpot_ms, t.ttft_cpu_ms, t.tpot_cpu_ms};
}

}  // namespace kvgate::harness
