#include "scoring/aggregate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/percentile.h"
#include "scoring/stats.h"

namespace kvgate::scoring {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double percentile_or_nan(const std::vector<double>& values, double fraction) {
  return values.empty() ? kNaN : percentile(values, fraction);
}

}  // namespace

void ItemAggregator::add(const ItemScores& it) {
  ++items_;
  scored_tokens_ += it.scored_tokens;
  if (it.scored_tokens > 0 && std::isfinite(it.kld_mean) && std::isfinite(it.same_top1)) {
    const double n = static_cast<double>(it.scored_tokens);
    kld_sum_ += it.kld_mean * n;
    top1_sum_ += it.same_top1 * n;
    weighted_tokens_ += n;
  }
  if (it.scored_tokens > 0 && std::isfinite(it.kld_p99)) p99s_.push_back(it.kld_p99);
  if (std::isfinite(it.kld_max)) {
    kld_max_ = has_max_ ? std::max(kld_max_, it.kld_max) : it.kld_max;
    has_max_ = true;
  }
  if (it.exact_match_gold) {
    answered_ += 1;
    correct_ += *it.exact_match_gold ? 1 : 0;
  }
  if (it.diverged) {
    generated_ += 1;
    diverged_ += *it.diverged ? 1 : 0;
  }
  answered_turns_ += it.answered_turns;
  first_token_eos_ += it.first_token_eos;
  first_token_differs_ += it.first_token_differs;
}

ItemAggregate ItemAggregator::result() const {
  ItemAggregate a;
  a.items = items_;
  a.scored_tokens = scored_tokens_;
  a.kld_mean = weighted_tokens_ > 0 ? kld_sum_ / weighted_tokens_ : kNaN;
  a.same_top1 = weighted_tokens_ > 0 ? top1_sum_ / weighted_tokens_ : kNaN;
  a.kld_p99 = percentile_or_nan(p99s_, 0.99);
  a.kld_max = has_max_ ? kld_max_ : kNaN;
  a.gold_items = static_cast<int64_t>(answered_);
  a.gold_correct = static_cast<int64_t>(correct_);
  a.gold_accuracy = answered_ > 0 ? correct_ / answered_ : kNaN;
  a.divergence_rate = generated_ > 0 ? diverged_ / generated_ : kNaN;
  a.answered_turns = answered_turns_;
  const double turns = static_cast<double>(answered_turns_);
  a.first_token_eos_rate = answered_turns_ > 0 ? static_cast<double>(first_token_eos_) / turns : kNaN;
  a.first_token_differs_rate = answered_turns_ > 0 ? static_cast<double>(first_token_differs_) / turns : kNaN;
  return a;
}

ItemAggregate aggregate_items(std::span<const ItemScores> items) {
  ItemAggregator agg;
  for (const ItemScores& it : items) agg.add(it);
  return agg.result();
}

GoldSignal gold_signal(int64_t reference_correct, int64_t reference_answered) {
  return {reference_correct, reference_answered};
}

GoldSignal gold_signal(const ItemAggregate& reference) { return gold_signal(reference.gold_correct, reference.gold_items); }

bool GoldSignal::informative() const {
  return reference_answered > 0 && reference_correct >= kGoldMinCorrect &&
         static_cast<double>(reference_correct) >= kGoldMinFraction * static_cast<double>(reference_answered);
}

std::string GoldSignal::unavailable() const {
  if (informative()) return "";
  if (reference_answered == 0) return "n/a (no gold answers)";
  return fmt::format("n/a (reference {}/{})", reference_correct, reference_answered);
}

std::string GoldSignal::note() const {
  if (informative() || reference_answered == 0) return "";
  return fmt::format("gold accuracy n/a: the reference config answers {} of {} gold questions (at least {} and {:.0f} % "
                     "are needed), so the model cannot do these tasks and accuracy cannot show what a KV config loses",
                     reference_correct, reference_answered, kGoldMinCorrect, 100 * kGoldMinFraction);
}

LatencyAggregate aggregate_latency(std::span<const TurnLatency> turns) {
  std::vector<double> ttft, tpot;
  for (const TurnLatency& t : turns) {
    if (std::isfinite(t.ttft_ms)) ttft.push_back(t.ttft_ms);
    if (std::isfinite(t.tpot_ms) && t.tpot_ms > 0) tpot.push_back(t.tpot_ms);
  }
  LatencyAggregate a;
  a.ttft_turns = ttft.size();
  a.tpot_turns = tpot.size();
  a.ttft_p50 = percentile_or_nan(ttft, 0.50);
  a.ttft_p95 = percentile_or_nan(ttft, 0.95);
  a.ttft_p99 = percentile_or_nan(ttft, 0.99);
  a.tpot_p50 = percentile_or_nan(tpot, 0.50);
  a.tpot_p95 = percentile_or_nan(tpot, 0.95);
  a.tpot_p99 = percentile_or_nan(tpot, 0.99);
  return a;
}

std::map<int64_t, double> drift_over_turns(std::span<const SessionTurn> turn_kld) {
  std::vector<SessionTurnScores> turns;
  turns.reserve(turn_kld.size());
  for (const SessionTurn& t : turn_kld) turns.push_back({t.turn_index, kNaN, t.kld_mean, kNaN, kNaN, kNaN});
  std::map<int64_t, double> out;
  for (const auto& [turn, means] : means_over_sessions(turns))
    if (std::isfinite(means.kld_mean)) out[turn] = means.kld_mean;
  return out;
}

std::map<int64_t, TurnMeans> means_over_sessions(std::span<const SessionTurnScores> turns) {
  // Per turn: (sum, count) of each number, summed in the order given so every caller gets the same bits.
  struct Sums {
    size_t sessions = 0;
    std::pair<double, int64_t> context, kld, top1, ttft, tpot;
  };
  auto add = [](std::pair<double, int64_t>& cell, double v, bool measured) {
    if (!measured || !std::isfinite(v)) return;
    cell.first += v;
    cell.second += 1;
  };
  auto mean = [](const std::pair<double, int64_t>& cell) {
    return cell.second > 0 ? cell.first / static_cast<double>(cell.second) : kNaN;
  };
  std::map<int64_t, Sums> sums;
  for (const SessionTurnScores& t : turns) {
    Sums& s = sums[t.turn_index];
    ++s.sessions;
    add(s.context, t.context_tokens, true);
    add(s.kld, t.kld_mean, true);
    add(s.top1, t.same_top1, true);
    add(s.ttft, t.ttft_ms, true);
    add(s.tpot, t.tpot_ms, t.tpot_ms > 0);
  }
  std::map<int64_t, TurnMeans> out;
  for (const auto& [turn, s] : sums)
    out[turn] = {s.sessions, mean(s.context), mean(s.kld), mean(s.top1), mean(s.ttft), mean(s.tpot)};
  return out;
}

}  // namespace kvgate::scoring
