#pragma once
// What one config's pass over one item accumulates — per-position comparisons with the
// reference, per-turn rows, greedy answers, latency — and the record it leaves in the store.
// The in-process runner (full logits) and engine mode (top-k lists from a serving engine) feed
// the same accumulator, so both land in the same rows with the same definitions.
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/eval/run_recorder.h"
#include "results/store.h"
#include "scoring/position_buckets.h"
#include "scoring/token_class.h"
#include "scoring/token_metrics.h"

namespace kvgate::harness {

struct ItemAccumulator {
  std::vector<double> kld, delta_p, nll, nll_ref;
  int64_t same_top1 = 0;
  std::map<scoring::TokenClass, results::TokenClassMetrics> classes;  // config_id set by the recorder
  std::vector<results::TurnMetrics> turns;
  std::vector<results::LatencySamples> latency;
  // The current turn's answer's work CPU time per token (Answer::token_cpu_ms; empty from an
  // endpoint), turned into the turn's CPU TTFT and TPOT by add_turn.
  std::vector<double> turn_token_cpu_ms;
  std::vector<int32_t> final_greedy;
  std::optional<int64_t> first_divergence;
  bool diverged_anywhere = false;
  std::optional<bool> gold_match;
  // The current turn's answer (add_greedy), moved onto its row by add_turn.
  std::optional<std::string> turn_answer;
  std::optional<int64_t> turn_answer_tokens, turn_answer_divergence;
  // The current turn's sums per position bucket, moved into `positions` by add_turn.
  std::array<scoring::PositionSums, scoring::kPositionBuckets> turn_buckets{};
  std::vector<results::PositionMetrics> positions;
  results::ItemMetrics first_tokens;  // only its first-token counts, summed by add_turn

  // One scored token at absolute position `position` of the item (the tokens before it);
  // `turn_kld` and `turn_same` collect the current turn's sums.
  void add_position(const scoring::PositionComparison& cmp, scoring::TokenClass cls, int64_t position, double& turn_kld,
                    int64_t& turn_same);
  // One greedy answer probed after a scored span, compared with the reference config's; `text`
  // is the answer as a person reads it, kept on the turn's row by the next add_turn.
  void add_greedy(const std::vector<int32_t>& reference, const std::vector<int32_t>& greedy, std::string text);
  // The turn's row from its sums and the greedy answer's latency (the last latency sample);
  // scored = false: the config could not score the span (its KLD and top-1 are not measured).
  void add_turn(results::TurnMetrics turn, double turn_kld, int64_t turn_same, bool scored = true);
  // Metrics of an item without scored positions are left at 0; engine mode marks a config
  // that could not score as not measured (NaN) itself.
  ConfigItemRecord record();
};

// Gold answers are short facts: a greedy answer matches when, after trimming, it equals the
// gold text or starts with it followed by something that is not a letter or digit.
bool matches_gold(std::string generated, std::string gold);

}  // namespace kvgate::harness
