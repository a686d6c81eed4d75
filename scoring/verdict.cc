#include "scoring/verdict.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/digits.h"
#include "scoring/intervals.h"

namespace kvgate::scoring {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::safe: return "safe";
    case Verdict::inconclusive: return "inconclusive";
    case Verdict::unsafe: return "unsafe";
  }
  return "unknown";
}

const char* check_outcome_name(CheckOutcome o) {
  switch (o) {
    case CheckOutcome::within: return "within";
    case CheckOutcome::beyond: return "beyond";
    case CheckOutcome::undecided: return "undecided";
    case CheckOutcome::skipped: return "skipped";
  }
  return "unknown";
}

double VerdictCheck::harm_bound() const { return info().worse() == Worse::higher ? high : low; }

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string value_text(const VerdictMetric& m, double v) {
  if (!std::isfinite(v)) return v > 0 ? "∞" : "n/a";
  switch (m.unit()) {
    case VerdictUnit::points: return fmt::format("{:.1f} points", 100 * v);
    case VerdictUnit::percent: return fmt::format("{:.1f} %", 100 * v);
    case VerdictUnit::number: return fmt::format("{:.3g}", v);
  }
  return "";
}

// "margin of 2.0 points" / "floor of 95.0 %": a lower-is-worse metric's margin is a floor.
std::string margin_text(const VerdictMetric& m, double margin) {
  return std::string(m.worse() == Worse::higher ? "margin of " : "floor of ") + value_text(m, margin);
}

// "about 3,100 items would": how many items of the run's mix would decide a check.
std::string items_phrase(double items) {
  if (std::isnan(items)) return "more items (one item shows no spread) would";
  if (std::isinf(items)) return "no item count is sure to (the estimate sits on the margin) but more items would";
  if (items > 1e7) return "more than 10,000,000 items would";
  return "about " + item_count_text(items) + " items would";
}

std::string scope_text(const VerdictCheck& c) {
  if (c.bucket >= 0) return "at positions " + position_bucket_name(c.bucket);
  return c.domain == "*" ? "overall" : "in " + c.domain;
}

std::string percent_text(double confidence) { return fmt::format("{:.4g} %", 100 * confidence); }

Interval interval_of(const VerdictMetric& m, const std::vector<ItemObservation>& obs, double confidence) {
  if (m.shape == ItemShape::paired_binary) {
    int64_t ref_only = 0, cand_only = 0;
    for (const ItemObservation& o : obs) {
      const bool r = o.reference > 0.5, c = o.sum > 0.5;
      ref_only += r && !c ? 1 : 0;
      cand_only += c && !r ? 1 : 0;
    }
    return paired_difference_interval(ref_only, cand_only, static_cast<int64_t>(obs.size()), confidence);
  }
  std::vector<ItemRatio> ratios;
  ratios.reserve(obs.size());
  for (const ItemObservation& o : obs) ratios.push_back({o.sum, o.weight});
  return clustered_ratio_interval(ratios, m.shape == ItemShape::rate ? RatioKind::rate : RatioKind::mean, confidence);
}

// How far the estimate lies from the margin in units of its standard error: how firmly a check
// is decided (the line names the firmest reason for "unsafe", the closest call for "safe").
double distance(const VerdictCheck& c) {
  const double se = c.spread / std::sqrt(static_cast<double>(std::max<size_t>(c.items, 1)));
  const double gap = std::fabs(c.estimate - c.margin);
  return se > 0 ? gap / se : kInf;
}

struct PendingCheck {
  VerdictCheck check;
  std::vector<ItemObservation> obs;
};

std::string verdict_reason(const ConfigVerdict& v) {
  const size_t decided = v.within + v.beyond + v.undecided;
  if (v.deciding < 0) return "nothing the rollout policy checks was measured for this config";
  const VerdictCheck& c = v.checks[static_cast<size_t>(v.deciding)];
  const VerdictMetric& m = c.info();
  const bool higher = m.worse() == Worse::higher;
  std::string r;
  switch (v.verdict) {
    case Verdict::unsafe:
      r = fmt::format("{} {} {} {} ({}; {} bound, corrected for {} checks)", m.label(), higher ? "at least" : "at most",
                      value_text(m, higher ? c.strict_low : c.strict_high), scope_text(c), margin_text(m, c.margin),
                      percent_text(v.strict_confidence), decided);
      break;
    case Verdict::safe:
      r = fmt::format("every bound inside its margin ({} checks, {} bounds); closest: {} {} {} {} ({})", v.within,
                      percent_text(v.confidence), m.label(), higher ? "<=" : ">=", value_text(m, c.harm_bound()),
                      scope_text(c), margin_text(m, c.margin));
      break;
    case Verdict::inconclusive:
      if (c.toward_harm)
        r = fmt::format("{} {} {} is past its {} but not with confidence; {} show whether it is", m.label(),
                        value_text(m, c.estimate), scope_text(c), margin_text(m, c.margin), items_phrase(v.items_to_decide));
      else
        r = fmt::format("rules out a {} {} {} {} but not {} its {}; {} decide it", m.label(), higher ? "above" : "below",
                        value_text(m, c.harm_bound()), scope_text(c), higher ? "above" : "below",
                        margin_text(m, c.margin), items_phrase(v.items_to_decide));
      r += fmt::format(" ({} of {} checks undecided)", v.undecided, decided);
      break;
  }
  if (v.skipped > 0) {
    for (const VerdictCheck& s : v.checks)
      if (s.outcome == CheckOutcome::skipped) {
        r += fmt::format("; not checked: {} {} ({}){}", s.info().label(), scope_text(s), s.skip_reason,
                         v.skipped > 1 ? fmt::format(" and {} more", v.skipped - 1) : "");
        break;
      }
  }
  return r;
}

}  // namespace

std::string ConfigVerdict::line() const { return shown() + ": " + verdict_name(verdict) + ": " + reason; }

std::vector<ConfigVerdict> config_verdicts(const RolloutPolicy& policy, const GateRun& run, size_t family) {
  family = std::max<size_t>(family, 1);
  static const ItemScores kNoReference;
  std::map<std::string, const ItemScores*> reference;
  for (const GateItem& it : run.items)
    if (run.is_reference(it.config)) reference[it.item_key] = &it.scores;
  std::map<std::pair<std::string, ConfigIndex>, std::map<int, PositionSums>> positions;  // (item, config) -> buckets
  for (const GatePosition& r : run.positions) positions[{r.item_key, r.config}][r.bucket].add(r.sums);
  const double alpha = (1 - policy.confidence) / static_cast<double>(family);

  std::vector<ConfigVerdict> out;
  for (ConfigIndex config = 0; config < run.configs.size(); ++config) {
    if (run.is_reference(config)) continue;
    ConfigVerdict v;
    v.config = run.spec(config);
    v.label = run.configs[config].label;
    std::vector<const GateItem*> items;
    std::set<std::string> domains;
    for (const GateItem& it : run.items)
      if (it.config == config) items.push_back(&it), domains.insert(it.domain);
    v.items = items.size();
    // The workload as a whole, then each domain; one domain is the workload itself.
    std::vector<std::string> scopes;
    if (domains.size() != 1) scopes.push_back("*");
    scopes.insert(scopes.end(), domains.begin(), domains.end());

    std::vector<PendingCheck> pending;
    for (size_t mi = 0; mi < kVerdictMetrics.size(); ++mi) {
      const VerdictMetric& m = kVerdictMetrics[mi];
      for (const std::string& scope : scopes) {
        const std::optional<double> margin = policy.margin(mi, scope);
        if (!margin) continue;
        PendingCheck p;
        p.check.metric = mi;
        p.check.domain = scope;
        p.check.margin = *margin;
        p.check.name = fmt::format("{}[{}]", m.name(), scope);
        for (const GateItem* it : items) {
          if (scope != "*" && it->domain != scope) continue;
          const auto r = reference.find(it->item_key);
          if (const auto o = m.per_item(it->scores, r == reference.end() ? kNoReference : *r->second)) p.obs.push_back(*o);
        }
        if (!p.obs.empty()) pending.push_back(std::move(p));
      }
      const std::optional<double> margin = policy.position_margin(mi);
      if (!margin) continue;
      for (int b = *position_bucket_starting_at(*policy.position_from); b < kPositionBuckets; ++b) {
        PendingCheck p;
        p.check.metric = mi;
        p.check.bucket = b;
        p.check.margin = *margin;
        p.check.name = fmt::format("{}@{}[*]", m.name(), position_bucket_name(b));
        for (const GateItem* it : items) {
          const auto rows = positions.find({it->item_key, config});
          if (rows == positions.end()) continue;
          const auto bucket = rows->second.find(b);
          if (bucket == rows->second.end()) continue;
          if (const auto o = m.per_bucket(bucket->second)) p.obs.push_back(*o);
        }
        if (!p.obs.empty()) pending.push_back(std::move(p));  // a bucket no item reaches has no check
      }
    }

    // Gold accuracy says nothing where the reference itself cannot answer (scoring::gold_signal).
    for (PendingCheck& p : pending) {
      if (p.check.info().shape != ItemShape::paired_binary) continue;
      int64_t correct = 0;
      for (const ItemObservation& o : p.obs) correct += o.reference > 0.5 ? 1 : 0;
      const GoldSignal gold = gold_signal(correct, static_cast<int64_t>(p.obs.size()));
      if (!gold.informative()) {
        p.check.outcome = CheckOutcome::skipped;
        p.check.skip_reason = "reference " + std::to_string(correct) + "/" + std::to_string(p.obs.size());
      }
    }
    size_t decided = 0;
    for (const PendingCheck& p : pending) decided += p.check.outcome == CheckOutcome::skipped ? 0 : 1;
    v.confidence = 1 - alpha;
    v.strict_confidence = 1 - alpha / static_cast<double>(std::max<size_t>(decided, 1));
    const double z_safe = normal_quantile(0.5 + v.confidence / 2), z_strict = normal_quantile(0.5 + v.strict_confidence / 2);

    for (PendingCheck& p : pending) {
      VerdictCheck& c = p.check;
      const VerdictMetric& m = c.info();
      const Interval iv = interval_of(m, p.obs, v.confidence);
      c.items = iv.units;
      c.estimate = iv.estimate;
      c.spread = iv.spread;
      c.items_to_decide = c.run_items_to_decide = kNaN;
      if (c.outcome == CheckOutcome::skipped) {
        c.low = c.high = c.strict_low = c.strict_high = kNaN;
        v.checks.push_back(std::move(c));
        ++v.skipped;
        continue;
      }
      const Interval strict = interval_of(m, p.obs, v.strict_confidence);
      c.low = iv.low, c.high = iv.high, c.strict_low = strict.low, c.strict_high = strict.high;
      const bool higher = m.worse() == Worse::higher;
      if (higher ? c.high <= c.margin : c.low >= c.margin) {
        c.outcome = CheckOutcome::within;
        ++v.within;
      } else if (higher ? c.strict_low > c.margin : c.strict_high < c.margin) {
        c.outcome = CheckOutcome::beyond;
        ++v.beyond;
      } else {
        c.outcome = CheckOutcome::undecided;
        ++v.undecided;
        c.toward_harm = higher ? c.estimate > c.margin : c.estimate < c.margin;
        double n = m.shape == ItemShape::paired_binary
                       ? items_to_decide(c.estimate, c.spread, c.margin, c.toward_harm ? z_strict : z_safe)
                       : items_to_decide_t(c.estimate, c.spread, c.margin, c.toward_harm ? v.strict_confidence : v.confidence);
        // Undecided at its own count, it needs more than that whatever the large-sample formula says.
        if (std::isfinite(n)) n = std::ceil(std::max(n, static_cast<double>(c.items) + 1));
        c.items_to_decide = n;
        c.run_items_to_decide =
            std::isfinite(n) ? std::ceil(n * static_cast<double>(v.items) / static_cast<double>(c.items)) : n;
      }
      v.checks.push_back(std::move(c));
    }

    // The check the verdict's line names.
    auto pick = [&](CheckOutcome outcome, auto better) {
      for (size_t i = 0; i < v.checks.size(); ++i)
        if (v.checks[i].outcome == outcome &&
            (v.deciding < 0 || better(v.checks[i], v.checks[static_cast<size_t>(v.deciding)])))
          v.deciding = static_cast<int>(i);
    };
    // NaN (unknown) counts as more items than any number.
    auto more_items = [](double a, double b) { return std::isnan(a) ? !std::isnan(b) : a > b; };
    v.items_to_decide = kNaN;
    if (v.beyond > 0) {
      v.verdict = Verdict::unsafe;
      pick(CheckOutcome::beyond, [](const VerdictCheck& a, const VerdictCheck& b) { return distance(a) > distance(b); });
    } else if (v.undecided == 0 && v.within > 0) {
      v.verdict = Verdict::safe;
      pick(CheckOutcome::within, [](const VerdictCheck& a, const VerdictCheck& b) { return distance(a) < distance(b); });
    } else {
      v.verdict = Verdict::inconclusive;
      for (const VerdictCheck& c : v.checks) v.toward_harm = v.toward_harm || c.toward_harm;
      // Toward harm: the fewest items that would show one harm; otherwise the most any check needs.
      for (size_t i = 0; i < v.checks.size(); ++i) {
        const VerdictCheck& c = v.checks[i];
        if (c.outcome != CheckOutcome::undecided || c.toward_harm != v.toward_harm) continue;
        const bool take = v.deciding < 0 || (v.toward_harm ? more_items(v.items_to_decide, c.run_items_to_decide)
                                                           : more_items(c.run_items_to_decide, v.items_to_decide));
        if (take) v.deciding = static_cast<int>(i), v.items_to_decide = c.run_items_to_decide;
      }
    }
    v.reason = verdict_reason(v);
    out.push_back(std::move(v));
  }
  return out;
}

std::string item_count_text(double items) {
  if (std::isnan(items)) return "unknown";
  if (items > 1e7) return "more than 10,000,000";
  double n = std::ceil(std::max(items, 0.0));
  if (n >= 100) {
    const double unit = std::pow(10.0, std::floor(std::log10(n)) - 1);
    n = std::ceil(n / unit) * unit;
  }
  return grouped_digits(static_cast<int64_t>(n));
}

std::vector<std::string> verdict_conclusion(const std::vector<ConfigVerdict>& verdicts, const RolloutPolicy& policy,
                                            size_t items, const std::string& reference,
                                            const std::vector<std::string>& domains) {
  if (verdicts.empty()) return {};
  auto names = [&](Verdict which) {
    std::string s;
    for (const ConfigVerdict& v : verdicts)
      if (v.verdict == which) s += (s.empty() ? "" : ", ") + v.shown();
    return s;
  };
  const std::string safe = names(Verdict::safe), unsafe = names(Verdict::unsafe);
  const std::string items_text = grouped_digits(static_cast<int64_t>(items)) + (items == 1 ? " item" : " items");
  const std::string margins = "the margins of " + policy.source, bounds = percent_text(verdicts.front().confidence) + " bounds";
  std::vector<std::string> out;
  std::vector<std::string> found;
  if (!safe.empty()) found.push_back("clears " + safe + " to replace " + reference);
  if (!unsafe.empty()) found.push_back("shows " + unsafe + " worse than " + reference + " beyond a margin");
  if (found.empty())
    out.push_back(fmt::format("This run ({}) can neither clear nor rule out any config against {} at {}: its {} are "
                              "wider than the margins.",
                              items_text, reference, margins, bounds));
  else
    out.push_back(fmt::format("This run ({}) {} ({}, {}).", items_text,
                              found.size() == 1 ? found[0] : found[0] + " and " + found[1], margins, bounds));
  std::string undecided;
  for (const ConfigVerdict& v : verdicts) {
    if (v.verdict != Verdict::inconclusive) continue;
    undecided += (undecided.empty() ? "" : ", ") + v.shown() + " (" + items_phrase(v.items_to_decide) +
                 (v.toward_harm ? " show whether its harm is real)" : " decide it)");
  }
  if (!undecided.empty())
    out.push_back("Not decided: " + undecided +
                  (found.empty() ? "; a run this size can show a config is broken (kvgate gate), not that it is safe to "
                                   "roll out."
                                 : "."));
  std::string domain_list;
  for (const std::string& d : domains) domain_list += (domain_list.empty() ? "" : ", ") + d;
  out.push_back("It speaks only for traffic like these items (" + domain_list +
                "); kvgate compare on your own traffic decides a rollout.");
  return out;
}

}  // namespace kvgate::scoring
