#include "harness/eval/item_scoring.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <utility>

#include "core/percentile.h"
#include "results/stored_run.h"
#include "scoring/latency.h"
#include "scoring/sequence.h"
#include "scoring/stats.h"

namespace kvgate::harness {

void ItemAccumulator::add_position(const scoring::PositionComparison& cmp, scoring::TokenClass cls, int64_t position,
                                   double& turn_kld, int64_t& turn_same) {
  turn_buckets[static_cast<size_t>(scoring::position_bucket(position))].add(cmp.kld, cmp.delta_p, cmp.same_top1);
  kld.push_back(cmp.kld);
  delta_p.push_back(cmp.delta_p);
  nll.push_back(cmp.nll_q);
  nll_ref.push_back(cmp.nll_ref);
  same_top1 += cmp.same_top1;
  turn_kld += cmp.kld;
  turn_same += cmp.same_top1;
  results::TokenClassMetrics& tc = classes[cls];
  tc.token_class = std::string(scoring::token_class_name(cls));
  tc.scored_tokens += 1;
  tc.kld_sum += cmp.kld;
  tc.delta_p_sum += cmp.delta_p;
  tc.same_top1 += cmp.same_top1;
}

void ItemAccumulator::add_greedy(const std::vector<int32_t>& reference, const std::vector<int32_t>& greedy,
                                 std::string text) {
  const auto div = scoring::first_divergence(reference, greedy);
  turn_answer = std::move(text);
  turn_answer_tokens = static_cast<int64_t>(greedy.size());
  turn_answer_divergence = div ? std::optional<int64_t>(static_cast<int64_t>(*div)) : std::nullopt;
  if (div && !diverged_anywhere) {
    diverged_anywhere = true;
    first_divergence = static_cast<int64_t>(*div);
  }
}

void ItemAccumulator::add_turn(results::TurnMetrics turn, double turn_kld, int64_t turn_same, bool scored) {
  const double n = static_cast<double>(turn.scored_tokens);
  turn.kld_mean = scored ? turn_kld / n : std::nan("");
  turn.same_top1 = scored ? static_cast<double>(turn_same) / n : std::nan("");
  const scoring::LatencyBreakdown lat = scoring::derive_latency(latency.back().token_times_ms);
  turn.ttft_ms = lat.ttft;
  // A one-token answer has no TPOT; the store keeps 0 there (scoring/aggregate.h skips it).
  turn.tpot_ms = std::isnan(lat.tpot) ? 0.0 : lat.tpot;
  if (!turn_token_cpu_ms.empty()) {
    const scoring::LatencyBreakdown cpu = scoring::derive_latency(turn_token_cpu_ms);
    turn.ttft_cpu_ms = cpu.ttft;
    turn.tpot_cpu_ms = cpu.tpot;  // NaN for a one-token answer: not measured
    turn_token_cpu_ms.clear();
  }
  turn.answer = std::exchange(turn_answer, std::nullopt);
  turn.answer_tokens = std::exchange(turn_answer_tokens, std::nullopt);
  turn.answer_divergence = std::exchange(turn_answer_divergence, std::nullopt);
  for (int b = 0; b < scoring::kPositionBuckets; ++b) {
    scoring::PositionSums& s = turn_buckets[static_cast<size_t>(b)];
    if (s.tokens == 0) continue;
    positions.push_back({0, turn.turn_index, scoring::kPositionBucketStart[static_cast<size_t>(b)],
                         scoring::position_bucket_end(b), s.tokens, s.kld_sum, s.delta_p_sum, s.same_top1});
    s = {};
  }
  results::add_first_tokens(first_tokens, turn);
  turns.push_back(turn);
}

ConfigItemRecord ItemAccumulator::record() {
  ConfigItemRecord r;
  results::ItemMetrics& m = r.metrics;
  m.scored_tokens = static_cast<int64_t>(kld.size());
  if (!kld.empty()) {
    m.kld_mean = scoring::mean_stderr(kld).mean;
    m.kld_max = *std::max_element(kld.begin(), kld.end());
    m.kld_p99 = percentile(kld, 0.99);
    m.delta_p_mean = scoring::mean_stderr(delta_p).mean;
    double sq = 0;
    for (double d : delta_p) sq += d * d;
    m.delta_p_rms = std::sqrt(sq / static_cast<double>(delta_p.size()));
    m.same_top1 = static_cast<double>(same_top1) / static_cast<double>(kld.size());
    m.nll_mean = scoring::mean_stderr(nll).mean;
    m.nll_ref_mean = scoring::mean_stderr(nll_ref).mean;
  }
  m.generated_tokens = static_cast<int64_t>(final_greedy.size());
  m.first_divergence = first_divergence;
  m.exact_match_ref = !diverged_anywhere;
  m.exact_match_gold = gold_match;
  m.answered_turns = first_tokens.answered_turns;
  m.first_token_eos = first_tokens.first_token_eos;
  m.first_token_differs = first_tokens.first_token_differs;
  r.turns = std::move(turns);
  r.positions = std::move(positions);
  for (const auto& [cls, tc] : classes) r.token_classes.push_back(tc);
  r.latency = std::move(latency);
  return r;
}

bool matches_gold(std::string generated, std::string gold) {
  auto trim = [](std::string& s) {
    const char* ws = " \t\r\n";
    s.erase(0, s.find_first_not_of(ws));
    const size_t last = s.find_last_not_of(ws);
    s.erase(last == std::string::npos ? 0 : last + 1);
  };
  trim(generated);
  trim(gold);
  if (gold.empty() || generated.compare(0, gold.size(), gold) != 0) return false;
  if (generated.size() == gold.size()) return true;
  const unsigned char next = static_cast<unsigned char>(generated[gold.size()]);
  return !(std::isalnum(next) != 0);
}

}  // namespace kvgate::harness
