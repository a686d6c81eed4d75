#include "scoring/gate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <span>
#include <tuple>

#include <fmt/format.h>

#include "core/error.h"
#include "core/hash.h"
#include "scoring/gate_positions.h"
#include "scoring/stats.h"

namespace kvgate::scoring {

const char* check_kind_name(CheckKind k) {
  switch (k) {
    case CheckKind::comparability: return "comparability";
    case CheckKind::coverage: return "coverage";
    case CheckKind::absolute: return "absolute";
    case CheckKind::regression: return "regression";
    case CheckKind::latency: return "latency";
    case CheckKind::position: return "position";
  }
  return "unknown";
}

ConfigIndex GateRun::add_config(GateConfig config) {
  configs.push_back(std::move(config));
  return configs.size() - 1;
}

std::optional<ConfigIndex> GateRun::reference() const {
  for (ConfigIndex i = 0; i < configs.size(); ++i)
    if (configs[i].reference) return i;
  return std::nullopt;
}

const std::string& GateRun::reference_spec() const {
  static const std::string kNone;
  const std::optional<ConfigIndex> r = reference();
  return r ? configs[*r].spec : kNone;
}

bool GroupOrder::operator()(const std::pair<std::string, ConfigIndex>& a, const std::pair<std::string, ConfigIndex>& b) const {
  return std::tie(a.first, run->spec(a.second), a.second) < std::tie(b.first, run->spec(b.second), b.second);
}

size_t GateOutcome::failed() const {
  return static_cast<size_t>(std::count_if(checks.begin(), checks.end(), [](const CheckResult& c) { return !c.passed; }));
}

size_t GateOutcome::skipped() const {
  return static_cast<size_t>(std::count_if(checks.begin(), checks.end(), [](const CheckResult& c) { return c.skipped; }));
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using GroupKey = std::pair<std::string, ConfigIndex>;  // (domain, config)
using ItemKey = std::pair<std::string, ConfigIndex>;   // (item_key, config)
// (domain, config) -> V, in the order check lists show them (GroupOrder).
template <class V>
using Groups = std::map<GroupKey, V, GroupOrder>;

std::string check_name(CheckKind kind, const std::string& metric, const std::string& domain, const std::string& config) {
  std::string where = domain;
  if (!config.empty()) where += ", " + config;
  return std::string(check_kind_name(kind)) + "." + metric + "[" + where + "]";
}

// `config` null: a run-wide check.
CheckResult make_check(CheckKind kind, const std::string& metric, const std::string& domain, const GateConfig* config) {
  CheckResult c;
  c.kind = kind;
  c.metric = metric;
  c.domain = domain;
  if (config) {
    c.config = config->spec;
    c.config_id = config->id;
  }
  c.name = check_name(kind, metric, domain, c.config);
  c.baseline_value = c.candidate_value = c.delta = c.ci_low = c.ci_high = c.threshold = kNaN;
  return c;
}

std::string short_list(const std::vector<std::string>& names, size_t shown = 5) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < shown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > shown) out += fmt::format(" and {} more", names.size() - shown);
  return out;
}

// +1: a higher value is worse (KLD, divergence); -1: a lower value is worse (agreement, accuracy).
double worse_sign(const MetricInfo& metric) { return metric.worse == Worse::lower ? -1.0 : 1.0; }

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : "n/a"; }

// A group the baseline does not have: every number unmeasured.
ItemAggregate unmeasured() { return ItemAggregator().result(); }

// What a domain's items let a run measure, whatever its configs did: KLD and top-1 need scored
// tokens, accuracy needs gold answers the reference config answered, divergence needs the
// reference config's greedy answers. A metric the data allows but a config left unmeasured is
// "not measured" (a failure unless the policy allows it); one the data does not allow is "not
// applicable" (nothing to measure, so nothing to fail).
struct Measurable {
  int64_t scored_tokens = 0;
  bool gold = false, greedy = false;
  bool answers = false;  // the reference config's turns have stored answers (first-token checks)
};

std::map<std::string, Measurable> measurable_by_domain(const GateRun& run) {
  std::map<std::string, Measurable> out;
  for (const GateItem& it : run.items) {
    Measurable& m = out[it.domain];
    m.scored_tokens += it.scores.scored_tokens;
    if (run.is_reference(it.config)) {
      m.gold = m.gold || it.scores.exact_match_gold.has_value();
      m.greedy = m.greedy || it.scores.diverged.has_value();
      m.answers = m.answers || it.scores.answered_turns > 0;
    }
  }
  return out;
}

// Why the data cannot measure `metric`, or "" when it can.
std::string not_applicable(const Measurable& m, const MetricInfo& metric) {
  switch (metric.needs) {
    case MetricNeeds::gold_answers:
      return m.gold ? "" : "no item of the domain has a gold answer the reference config answered";
    case MetricNeeds::greedy_answers:
      return m.greedy ? "" : "the reference config generated no greedy answer in the domain";
    case MetricNeeds::stored_answers:
      return m.answers ? "" : "the reference config has no stored answer in the domain (a run made before answers were kept)";
    case MetricNeeds::scored_tokens:
    case MetricNeeds::timed_turns: break;
  }
  return m.scored_tokens > 0 ? "" : "no item of the domain has a scored token";
}

// A check with nothing to compare: passes when the metric is not applicable or the policy allows
// it unmeasured, fails otherwise, and says which.
void settle_unmeasured(CheckResult& c, const std::string& what, const std::string& inapplicable, bool allowed) {
  // Not applicable, or allowed unmeasured: skipped with the reason, never read as a pass.
  if (!inapplicable.empty()) {
    c.passed = c.skipped = true;
    c.detail = what + ": not applicable (" + inapplicable + ")";
  } else {
    c.passed = c.skipped = allowed;
    c.detail = what + (allowed ? "; not checked (the policy allows it unmeasured)"
                               : "; fails: the items allow measuring it (set allow_unmeasured in the policy to accept that)");
  }
}

void add_absolute_checks(const GatePolicy& policy, const GateRun* baseline, const ConfigMatch& match, const GateRun& cand,
                         std::vector<CheckResult>& out) {
  Groups<std::vector<const GateItem*>> groups(GroupOrder{&cand});
  std::map<GroupKey, ItemAggregator> base_groups;  // the baseline's configs
  std::map<ItemKey, const GateItem*> by_item;
  for (const GateItem& it : cand.items) {
    groups[{it.domain, it.config}].push_back(&it);
    by_item[{it.item_key, it.config}] = &it;
  }
  if (baseline)
    for (const GateItem& it : baseline->items) base_groups[{it.domain, it.config}].add(it.scores);
  const std::map<std::string, Measurable> measurable = measurable_by_domain(cand);

  const std::optional<ConfigIndex> reference = cand.reference();
  for (const auto& [key, items] : groups) {
    const auto& [domain, config] = key;
    if (cand.is_reference(config)) continue;  // KLD against itself is zero by construction
    const GateConfig& shown = cand.configs[config];
    const GateLimits limits = policy.limits_for(domain, shown.spec);
    const AbsoluteLimits& lim = limits.absolute;
    const bool allow_unmeasured = limits.allow_unmeasured.value_or(false);
    const Measurable& data = measurable.at(domain);
    ItemAggregator cand_group;
    for (const GateItem* it : items) cand_group.add(it->scores);
    const ItemAggregate a = cand_group.result();
    const std::optional<ConfigIndex> base_config = match.baseline_of[config];
    const auto base_it = base_config ? base_groups.find({domain, *base_config}) : base_groups.end();
    const ItemAggregate b = base_it == base_groups.end() ? unmeasured() : base_it->second.result();

    // Ceilings and floors on the config's own value; a drop from the reference is checked below.
    for (const MetricInfo& m : kMetrics) {
      if (m.absolute != AbsoluteLimit::max && m.absolute != AbsoluteLimit::min) continue;
      const std::optional<double>& limit = lim[metric_of(m)];
      if (!limit) continue;
      const bool upper = m.absolute == AbsoluteLimit::max;
      const double value = m.of_summary(a, {}), base_value = m.of_summary(b, {});
      CheckResult c = make_check(CheckKind::absolute, std::string(m.name), domain, &shown);
      c.candidate_value = value;
      c.baseline_value = base_value;
      c.threshold = *limit;
      c.items = items.size();
      if (!std::isfinite(value)) {
        settle_unmeasured(c, fmt::format("{}: not measured on any of {} items (limit {})", m.label, items.size(), num(*limit)),
                          not_applicable(data, m), allow_unmeasured);
      } else {
        c.passed = upper ? value <= *limit : value >= *limit;
        c.detail = fmt::format("{} {} {} limit {} over {} items (baseline {})", m.label, num(value),
                               c.passed ? (upper ? "<=" : ">=") : (upper ? ">" : "<"), num(*limit), items.size(),
                               num(base_value));
      }
      out.push_back(std::move(c));
    }

    const MetricInfo& gold_metric = metric_info(Metric::gold_accuracy);
    if (const std::optional<double>& drop_max = lim[Metric::gold_accuracy]) {
      // Accuracy drop is measured on the items both this config and the reference answered.
      double ref_correct = 0, cfg_correct = 0, n = 0;
      for (const GateItem* it : items) {
        const auto ref = reference ? by_item.find({it->item_key, *reference}) : by_item.end();
        if (!it->scores.exact_match_gold || ref == by_item.end() || !ref->second->scores.exact_match_gold) continue;
        ref_correct += *ref->second->scores.exact_match_gold ? 1 : 0;
        cfg_correct += *it->scores.exact_match_gold ? 1 : 0;
        n += 1;
      }
      CheckResult c = make_check(CheckKind::absolute, absolute_check_name(gold_metric), domain, &shown);
      c.threshold = *drop_max;
      c.items = static_cast<size_t>(n);
      const GoldSignal gold = gold_signal(static_cast<int64_t>(ref_correct), static_cast<int64_t>(n));
      if (n == 0) {
        settle_unmeasured(c, "gold accuracy drop: no item has a gold-answer match under both this config and the reference",
                          not_applicable(data, gold_metric), allow_unmeasured);
      } else if (!gold.informative()) {
        c.skipped = true;
        c.baseline_value = ref_correct / n;
        c.candidate_value = cfg_correct / n;
        c.detail = fmt::format("gold accuracy {} in {}: the reference {} answers {} of {} gold questions "
                               "(at least {} and {:.0f} % needed), so a drop cannot be measured",
                               gold.unavailable(), domain, cand.reference_spec(), gold.reference_correct,
                               gold.reference_answered, kGoldMinCorrect, 100 * kGoldMinFraction);
      } else {
        c.baseline_value = ref_correct / n;  // here "baseline" is the reference config of the same run
        c.candidate_value = cfg_correct / n;
        c.delta = c.baseline_value - c.candidate_value;
        c.passed = c.delta <= *drop_max;
        c.detail = fmt::format("gold accuracy {} vs reference {} ({}): drop {} {} limit {} over {} items",
                               num(c.candidate_value), num(c.baseline_value), cand.reference_spec(), num(c.delta),
                               c.passed ? "<=" : ">", num(*drop_max), c.items);
      }
      out.push_back(std::move(c));
    }
  }
}

// Per domain, the reference config's gold answers in one run.
std::map<std::string, ItemAggregator> reference_gold(const GateRun& run) {
  std::map<std::string, ItemAggregator> out;
  for (const GateItem& it : run.items)
    if (run.is_reference(it.config)) out[it.domain].add(it.scores);
  return out;
}

}  // namespace

bool decide_paired_regression(CheckResult& c, const std::vector<double>& bv, const std::vector<double>& cv,
                              std::vector<AffectedItem> moved, double sign, double floor, const GatePolicy& policy) {
  const uint64_t seed = policy.bootstrap.seed ^ xxhash64(c.name);
  const BootstrapCi ci = paired_bootstrap_ci(bv, cv, policy.bootstrap.resamples, policy.bootstrap.confidence, seed);
  double bsum = 0, csum = 0;
  for (size_t i = 0; i < bv.size(); ++i) {
    bsum += bv[i];
    csum += cv[i];
  }
  c.baseline_value = bsum / static_cast<double>(bv.size());
  c.candidate_value = csum / static_cast<double>(cv.size());
  c.delta = ci.mean_delta;
  c.ci_low = ci.low;
  c.ci_high = ci.high;
  const bool real = sign > 0 ? ci.low > 0 : ci.high < 0;
  const bool large = sign * ci.mean_delta > floor;
  c.passed = !(real && large);
  // Worst first; ties by item key so the list is deterministic.
  std::sort(moved.begin(), moved.end(), [sign](const AffectedItem& a, const AffectedItem& b) {
    if (sign * a.delta != sign * b.delta) return sign * a.delta > sign * b.delta;
    return a.item_key < b.item_key;
  });
  while (!moved.empty() && sign * moved.back().delta <= 0) moved.pop_back();
  if (moved.size() > 5) moved.resize(5);
  c.most_affected = std::move(moved);
  return real;
}

namespace {

void add_regression_checks(const GatePolicy& policy, const GateRun& base, const ConfigMatch& match, const GateRun& cand,
                           std::vector<CheckResult>& out) {
  const std::map<std::string, ItemAggregator> base_gold = reference_gold(base), cand_gold = reference_gold(cand);
  auto gold_in = [](const std::map<std::string, ItemAggregator>& m, const std::string& domain) {
    const auto it = m.find(domain);
    return gold_signal(it == m.end() ? ItemAggregate{} : it->second.result());
  };
  std::map<ItemKey, const GateItem*> base_items;
  for (const GateItem& it : base.items) base_items[{it.item_key, it.config}] = &it;
  Groups<std::vector<std::pair<const GateItem*, const GateItem*>>> pairs(GroupOrder{&cand});
  for (const GateItem& it : cand.items) {
    const std::optional<ConfigIndex> base_config = match.baseline_of[it.config];
    if (!base_config) continue;
    const auto b = base_items.find({it.item_key, *base_config});
    if (b != base_items.end()) pairs[{it.domain, it.config}].emplace_back(b->second, &it);
  }
  const std::map<std::string, Measurable> measurable = measurable_by_domain(cand);
  const std::map<std::string, Measurable> base_measurable = measurable_by_domain(base);
  for (const auto& [key, group] : pairs) {
    const auto& [domain, config] = key;
    const GateConfig& shown = cand.configs[config];
    const GateLimits limits = policy.limits_for(domain, shown.spec);
    const RegressionLimits& lim = limits.regression;
    const bool reference = cand.is_reference(config);
    for (const MetricInfo& m : kMetrics) {
      const std::optional<double>& floor = lim[metric_of(m)];
      if (m.regression_key.empty() || !floor) continue;
      const std::string metric(m.name);
      // The reference config's KLD, agreement and divergence are against itself; only its
      // answers can regress (a runtime change moves the reference too): gold accuracy, and
      // answers that end at their first token.
      if (reference && m.against_reference) continue;
      std::vector<double> bv, cv;
      std::vector<AffectedItem> moved;
      for (const auto& [b, c] : group) {
        const double x = m.of_item(b->scores), y = m.of_item(c->scores);
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        bv.push_back(x);
        cv.push_back(y);
        moved.push_back({c->item_key, x, y, y - x});
      }
      CheckResult c = make_check(CheckKind::regression, metric, domain, &shown);
      c.threshold = *floor;
      c.items = bv.size();
      if (bv.empty()) {
        // A baseline made before answers were kept cannot say what the first tokens were.
        std::string inapplicable = not_applicable(measurable.at(domain), m);
        if (inapplicable.empty() && m.needs == MetricNeeds::stored_answers)
          if (const auto b = base_measurable.find(domain); b == base_measurable.end() || !b->second.answers)
            inapplicable = "the baseline run has no stored answer in the domain (made before answers were kept)";
        settle_unmeasured(c, fmt::format("{}: no item of {} pairs measured it in both runs", metric, group.size()),
                          inapplicable, limits.allow_unmeasured.value_or(false));
        out.push_back(std::move(c));
        continue;
      }
      if (m.needs == MetricNeeds::gold_answers) {
        // A reference that answers (almost) nothing in both runs leaves nothing to lose: the
        // check would pass on 0 -> 0. One run whose reference answers is enough to measure.
        const GoldSignal b = gold_in(base_gold, domain), k = gold_in(cand_gold, domain);
        if (!b.informative() && !k.informative()) {
          c.skipped = true;
          c.detail = fmt::format("gold accuracy in {}: the reference answers {} of {} gold questions in the "
                                 "baseline run and {} of {} in the candidate (at least {} and {:.0f} % needed), so a "
                                 "regression cannot be measured",
                                 domain, b.reference_correct, b.reference_answered, k.reference_correct,
                                 k.reference_answered, kGoldMinCorrect, 100 * kGoldMinFraction);
          out.push_back(std::move(c));
          continue;
        }
      }
      const double sign = worse_sign(m);
      const bool real = decide_paired_regression(c, bv, cv, std::move(moved), sign, *floor, policy);
      std::string items;
      for (const AffectedItem& m : c.most_affected)
        items += (items.empty() ? "" : ", ") + fmt::format("{} {:+.4g}", m.item_key, m.delta);
      const int pct = static_cast<int>(std::lround(policy.bootstrap.confidence * 100));
      c.detail = fmt::format("{} mean delta {:+.6g} ({}% CI [{:+.6g}, {:+.6g}], {} pairs; baseline {} -> candidate {}): {}",
                             metric, c.delta, pct, c.ci_low, c.ci_high, bv.size(), num(c.baseline_value),
                             num(c.candidate_value),
                             c.passed ? (real ? fmt::format("real but within the {} floor", num(*floor))
                                              : std::string("interval includes no worsening"))
                                      : fmt::format("worse by more than the {} floor", num(*floor)));
      if (!items.empty()) c.detail += "; most moved: " + items;
      out.push_back(std::move(c));
    }
  }
}

LatencyAggregate run_latency(const GateRun& run, ConfigIndex config) {
  std::vector<TurnLatency> turns;
  for (const GateTurn& t : run.turns)
    if (t.config == config) turns.push_back(t.latency);
  return aggregate_latency(turns);
}

using TurnKey = std::pair<std::string, int64_t>;  // (item_key, turn_index)

bool timed(double ms) { return std::isfinite(ms) && ms > 0; }

// log(config's latency / the reference config's) per turn both timed, in the same run: the
// two ran interleaved, item by item, so whatever else the machine did slowed both.
std::map<TurnKey, double> log_ratios_to_reference(const GateRun& run, ConfigIndex config, bool ttft) {
  std::map<TurnKey, double> ref;
  for (const GateTurn& t : run.turns) {
    const double v = ttft ? t.latency.ttft_ms : t.latency.tpot_ms;
    if (run.is_reference(t.config) && timed(v)) ref[{t.item_key, t.turn_index}] = v;
  }
  std::map<TurnKey, double> out;
  for (const GateTurn& t : run.turns) {
    const double v = ttft ? t.latency.ttft_ms : t.latency.tpot_ms;
    if (t.config != config || !timed(v)) continue;
    const auto r = ref.find({t.item_key, t.turn_index});
    if (r != ref.end()) out[{t.item_key, t.turn_index}] = std::log(v / r->second);
  }
  return out;
}

constexpr size_t kMinSlowdownTurns = 8;

// A latency check with no timed turn to compare: `what` says what is missing; it fails unless
// the policy's latency.allow_unmeasured lets it pass (skipped, never read as a pass).
void settle_untimed(CheckResult& c, const std::string& what, const GatePolicy& policy) {
  c.passed = c.skipped = policy.latency.allow_unmeasured;
  c.detail = what + (c.passed ? "; not checked (the policy allows it unmeasured)"
                              : "; fails (set latency.allow_unmeasured in the policy to accept that)");
}

// The decision of a latency ratio check from paired logarithms (`bv`, `cv`: the baseline's and
// the candidate's, pair by pair): the geometric means, the seeded bootstrap interval of the
// ratio candidate / baseline in c.delta, c.ci_low and c.ci_high, and `passed` unless the
// slowdown is both real (the interval lies above 1) and beyond `limit`. Returns whether it is real.
bool decide_latency_ratio(CheckResult& c, const std::vector<double>& bv, const std::vector<double>& cv, double limit,
                          const GatePolicy& policy) {
  const uint64_t seed = policy.bootstrap.seed ^ xxhash64(c.name);
  const BootstrapCi ci = paired_bootstrap_ci(bv, cv, policy.bootstrap.resamples, policy.bootstrap.confidence, seed);
  double bsum = 0, csum = 0;
  for (size_t i = 0; i < bv.size(); ++i) bsum += bv[i], csum += cv[i];
  const double n = static_cast<double>(bv.size());
  c.baseline_value = std::exp(bsum / n);
  c.candidate_value = std::exp(csum / n);
  c.delta = std::exp(ci.mean_delta);
  c.ci_low = std::exp(ci.low);
  c.ci_high = std::exp(ci.high);
  const bool real = ci.low > 0;
  c.passed = !(real && c.delta > limit);
  return real;
}

// How a latency ratio check ended, for its detail line.
std::string ratio_verdict(const CheckResult& c, bool real, double limit) {
  if (!c.passed) return fmt::format("> limit x{}", num(limit));
  return real ? fmt::format("real but within the limit x{}", num(limit)) : std::string("interval includes no slowdown");
}

void add_slowdown_checks(const GatePolicy& policy, const GateRun& base, const ConfigMatch& match, const GateRun& cand,
                         std::vector<CheckResult>& out) {
  for (ConfigIndex config = 0; config < cand.configs.size(); ++config) {
    const std::optional<ConfigIndex> base_config = match.baseline_of[config];
    if (cand.is_reference(config) || !base_config) continue;
    for (const bool ttft : {true, false}) {
      const std::optional<double>& limit = ttft ? policy.latency.ttft_slowdown_max : policy.latency.tpot_slowdown_max;
      if (!limit) continue;
      const char* what = ttft ? "TTFT" : "TPOT";
      CheckResult c = make_check(CheckKind::latency, ttft ? "ttft_slowdown" : "tpot_slowdown", "*", &cand.configs[config]);
      c.threshold = *limit;
      const std::map<TurnKey, double> b = log_ratios_to_reference(base, *base_config, ttft);
      const std::map<TurnKey, double> v = log_ratios_to_reference(cand, config, ttft);
      std::vector<double> bv, cv;
      for (const auto& [key, x] : v)
        if (const auto it = b.find(key); it != b.end()) {
          bv.push_back(it->second);
          cv.push_back(x);
        }
      c.items = bv.size();
      if (bv.empty()) {
        settle_untimed(c,
                       fmt::format("{} relative to the reference config {}: no turn timed under both it and this config in "
                                   "both runs ({} in the baseline, {} in the candidate)",
                                   what, cand.reference_spec(), b.size(), v.size()),
                       policy);
        out.push_back(std::move(c));
        continue;
      }
      // A bootstrap over a handful of turns has no interval worth the name: two turns timed
      // while something else woke up moved q4_0 x1.7 against f16 between two identical real
      // runs. Below this many paired turns the check says so instead of judging.
      if (bv.size() < kMinSlowdownTurns) {
        c.passed = c.skipped = true;
        c.detail = fmt::format("{} relative to the reference config {}: only {} turn{} timed under both in both runs; "
                               "at least {} are needed to tell a slowdown from timing noise; not checked",
                               what, cand.reference_spec(), bv.size(), bv.size() == 1 ? "" : "s", kMinSlowdownTurns);
        out.push_back(std::move(c));
        continue;
      }
      // Values: geometric means of config / reference; delta: the slowdown, the candidate's
      // relative latency over the baseline's.
      const bool real = decide_latency_ratio(c, bv, cv, *limit, policy);
      const int pct = static_cast<int>(std::lround(policy.bootstrap.confidence * 100));
      c.detail = fmt::format("{} relative to the reference config {} of the same run: x{:.4g} in the baseline, x{:.4g} in "
                             "the candidate: slowdown x{:.4g} ({}% CI [x{:.4g}, x{:.4g}], {} turns) {}",
                             what, cand.reference_spec(), c.baseline_value, c.candidate_value, c.delta, pct, c.ci_low,
                             c.ci_high, bv.size(), ratio_verdict(c, real, *limit));
      out.push_back(std::move(c));
    }
  }
}

// Items needed in both runs before a calibrated ratio is judged: load changes from item to item,
// so the interval is over items, and over fewer it is no interval.
constexpr size_t kMinCalibratedItems = 5;

// What a latency is divided by: TTFT is the turn's prefill (few long compute-bound matmuls), TPOT
// a decode step (many short hand-offs reading every weight once): the yardstick's part of each kind.
double yardstick(const ItemCalibration& c, bool ttft) { return ttft ? c.prefill_ms : c.decode_ms; }

// Why the two runs' calibrated latencies cannot be compared, or "".
std::string not_calibrated(const GateRun& base, const GateRun& cand) {
  for (const auto& [run, role] : {std::pair{&base, "baseline"}, std::pair{&cand, "candidate"}})
    if (run->calibration.empty())
      return fmt::format("the {} run {} timed no calibration workload (engine mode, a GPU backend, or a kvgate from "
                         "before it did)",
                         role, run->id);
  if (base.calibration != cand.calibration)
    return fmt::format("the runs timed different calibration workloads (baseline run {}: {}; candidate run {}: {})",
                       base.id, base.calibration, cand.id, cand.calibration);
  return "";
}

// The log of the run's yardstick: the median over its items of the part's CPU time (of the
// two middle ones, their geometric mean); NaN when no item has one. One figure per run, not one
// per item: on a saturated machine the CPU time of 40 ms of yardstick and of the seconds of
// work beside it move apart from item to item (measured in bench/latency-gate-bench: the
// per-item quotient was noisier than the CPU time alone), while the run's median follows what
// changes slowly, such as a slower or throttled host, and one burst cannot move it.
double run_yardstick_log(const GateRun& run, bool ttft) {
  std::vector<double> logs;
  for (const auto& [key, c] : run.item_calibration)
    if (timed(yardstick(c, ttft))) logs.push_back(std::log(yardstick(c, ttft)));
  if (logs.empty()) return std::nan("");
  std::sort(logs.begin(), logs.end());
  const size_t n = logs.size();
  return n % 2 ? logs[n / 2] : (logs[n / 2 - 1] + logs[n / 2]) / 2;
}

// Per (item, turn) of `config` timed in CPU time in `run`: log(latency in CPU time of the work).
std::map<TurnKey, double> cpu_latency_logs(const GateRun& run, ConfigIndex config, bool ttft) {
  std::map<TurnKey, double> out;
  for (const GateTurn& t : run.turns) {
    const double v = ttft ? t.latency.ttft_cpu_ms : t.latency.tpot_cpu_ms;
    if (t.config == config && timed(v)) out[{t.item_key, t.turn_index}] = std::log(v);
  }
  return out;
}

void add_calibrated_checks(const GatePolicy& policy, const GateRun& base, const ConfigMatch& match, const GateRun& cand,
                           std::vector<CheckResult>& out, std::vector<std::string>& notes) {
  struct Spec {
    const char* metric;
    bool ttft;
    std::optional<double> limit;
  };
  const Spec specs[] = {{"ttft_calibrated_ratio", true, policy.latency.ttft_calibrated_ratio_max},
                        {"tpot_calibrated_ratio", false, policy.latency.tpot_calibrated_ratio_max}};
  if (std::none_of(std::begin(specs), std::end(specs), [](const Spec& s) { return s.limit.has_value(); })) return;
  const std::string why_not = not_calibrated(base, cand);
  if (!why_not.empty()) notes.push_back("calibrated run-to-run latency was not checked: " + why_not);
  for (ConfigIndex config = 0; config < cand.configs.size(); ++config) {
    const std::optional<ConfigIndex> base_config = match.baseline_of[config];
    if (!base_config) continue;
    for (const Spec& spec : specs) {
      if (!spec.limit) continue;
      const char* what = spec.ttft ? "TTFT" : "TPOT";
      const char* workload = spec.ttft ? "prefill" : "decode";
      CheckResult c = make_check(CheckKind::latency, spec.metric, "*", &cand.configs[config]);
      c.threshold = *spec.limit;
      if (!why_not.empty()) {
        c.skipped = true;
        c.detail = fmt::format("{} against the calibration workload: not checked, {}", what, why_not);
        out.push_back(std::move(c));
        continue;
      }
      // Per item, over its turns timed in both runs, the mean log of CPU latency over the run's
      // yardstick: the interval is over items, whose load differs.
      const double yard_b = run_yardstick_log(base, spec.ttft), yard_c = run_yardstick_log(cand, spec.ttft);
      struct Sums {
        double base = 0, cand = 0;
        size_t turns = 0;
      };
      std::map<std::string, Sums> items;
      const auto b = cpu_latency_logs(base, *base_config, spec.ttft), v = cpu_latency_logs(cand, config, spec.ttft);
      size_t turns = 0;
      if (std::isfinite(yard_b) && std::isfinite(yard_c))
        for (const auto& [key, cl] : v)
          if (const auto it = b.find(key); it != b.end()) {
            Sums& s = items[key.first];
            s.base += it->second - yard_b;
            s.cand += cl - yard_c;
            ++s.turns;
            ++turns;
          }
      std::vector<double> bv, cv;
      for (const auto& [key, s] : items) {
        const double n = static_cast<double>(s.turns);
        bv.push_back(s.base / n);
        cv.push_back(s.cand / n);
      }
      c.items = items.size();
      if (items.empty()) {
        settle_untimed(c,
                       fmt::format("{} against the calibration workload: no turn timed in CPU time in both runs ({} in "
                                   "the baseline, {} in the candidate{})",
                                   what, b.size(), v.size(),
                                   std::isfinite(yard_b) && std::isfinite(yard_c) ? "" : "; a run holds no yardstick time"),
                       policy);
        out.push_back(std::move(c));
        continue;
      }
      if (items.size() < kMinCalibratedItems) {
        c.passed = c.skipped = true;
        c.detail = fmt::format("{} against the calibration workload: only {} item{} timed in both runs; at least {} "
                               "are needed for an interval over items; not checked",
                               what, items.size(), items.size() == 1 ? "" : "s", kMinCalibratedItems);
        out.push_back(std::move(c));
        continue;
      }
      // Values: geometric means of CPU latency / yardstick (ms per ms); delta: their ratio.
      const bool real = decide_latency_ratio(c, bv, cv, *spec.limit, policy);
      const int pct = static_cast<int>(std::lround(policy.bootstrap.confidence * 100));
      const double yard_ratio = std::exp(yard_c - yard_b);
      c.detail = fmt::format("{} in CPU time per CPU ms of the calibration workload's {} part (the run's median): "
                             "x{:.4g} in the candidate over the baseline ({}% CI [x{:.4g}, x{:.4g}], {} items, {} turns; "
                             "{} in CPU time itself x{:.4g}, the workload x{:.4g}) {}",
                             what, workload, c.delta, pct, c.ci_low, c.ci_high, items.size(), turns, what,
                             c.delta * yard_ratio, yard_ratio, ratio_verdict(c, real, *spec.limit));
      out.push_back(std::move(c));
    }
  }
}

// Why a run's latency cannot be compared with another run's, or "" when its machine was quiet.
std::string not_quiet(const GateRun& run, const char* role, const std::optional<double>& quiet_load_max) {
  if (!quiet_load_max) return "the policy's quiet_load_max is null (no machine counts as quiet)";
  if (!run.load)
    return fmt::format("the {} run {} recorded no machine load (an older kvgate, or a killed invocation)", role, run.id);
  const RunLoad& l = *run.load;
  const double other = other_load_per_core(l);
  if (other <= *quiet_load_max) return "";
  return fmt::format("the {} run {} ran beside {:.2f} other runnable tasks per core (load average {:.2f} at its start, up "
                     "to {:.2f} on {} cores, {} threads its own; CPU {:.0f} s in {:.0f} s) > quiet {}",
                     role, run.id, other, l.load_avg_start, l.load_avg_max, l.cores, l.threads, l.cpu_seconds,
                     l.wall_seconds, num(*quiet_load_max));
}

void add_run_to_run_checks(const GatePolicy& policy, const GateRun& base, const ConfigMatch& match, const GateRun& cand,
                           std::vector<CheckResult>& out, std::vector<std::string>& notes) {
  struct Spec {
    const char* metric;
    bool ttft;
    double fraction;
    std::optional<double> limit;
    double LatencyAggregate::*value;
  };
  const Spec specs[] = {
      {"ttft_p50_ratio", true, 0.50, policy.latency.ttft_p50_ratio_max, &LatencyAggregate::ttft_p50},
      {"ttft_p95_ratio", true, 0.95, policy.latency.ttft_p95_ratio_max, &LatencyAggregate::ttft_p95},
      {"tpot_p50_ratio", false, 0.50, policy.latency.tpot_p50_ratio_max, &LatencyAggregate::tpot_p50},
      {"tpot_p95_ratio", false, 0.95, policy.latency.tpot_p95_ratio_max, &LatencyAggregate::tpot_p95}};
  if (std::none_of(std::begin(specs), std::end(specs), [](const Spec& s) { return s.limit.has_value(); })) return;
  // Run-to-run latency is what load moves: compared only between two quiet machines.
  std::string noisy = not_quiet(base, "baseline", policy.latency.quiet_load_max);
  if (noisy.empty()) noisy = not_quiet(cand, "candidate", policy.latency.quiet_load_max);
  if (!noisy.empty())
    notes.push_back("run-to-run latency ratios were not checked: " + noisy +
                    "; the slowdown checks against each run's reference config still apply");
  for (ConfigIndex config = 0; config < cand.configs.size(); ++config) {
    const std::optional<ConfigIndex> base_config = match.baseline_of[config];
    if (!base_config) continue;
    const LatencyAggregate b = run_latency(base, *base_config), v = run_latency(cand, config);
    for (const Spec& spec : specs) {
      if (!spec.limit) continue;
      CheckResult c = make_check(CheckKind::latency, spec.metric, "*", &cand.configs[config]);
      c.threshold = *spec.limit;
      const size_t base_turns = spec.ttft ? b.ttft_turns : b.tpot_turns;
      const size_t cand_turns = spec.ttft ? v.ttft_turns : v.tpot_turns;
      c.items = cand_turns;
      if (!noisy.empty()) {
        c.skipped = true;
        c.detail = fmt::format("{}: not checked, the machines were not both quiet: {}", spec.metric, noisy);
      } else if (base_turns == 0 || cand_turns == 0) {
        settle_untimed(c, fmt::format("{}: no timed turns in {}", spec.metric, base_turns == 0 ? "the baseline" : "the candidate"),
                       policy);
      } else {
        c.baseline_value = b.*spec.value;
        c.candidate_value = v.*spec.value;
        c.delta = c.baseline_value > 0 ? c.candidate_value / c.baseline_value : kNaN;
        c.passed = !(std::isfinite(c.delta) && c.delta > *spec.limit);
        c.detail = fmt::format("{} p{:.0f} {} ms vs baseline {} ms on quiet machines: ratio {} {} limit {}",
                               spec.ttft ? "TTFT" : "TPOT", spec.fraction * 100, num(c.candidate_value),
                               num(c.baseline_value), num(c.delta), c.passed ? "<=" : ">", num(*spec.limit));
      }
      out.push_back(std::move(c));
    }
  }
}

// Minimum coverage per (domain, config) of the candidate run, every config of it included.
void add_coverage_min_checks(const GatePolicy& policy, const GateRun& cand, std::vector<CheckResult>& out) {
  std::set<std::string> domains;
  std::map<GroupKey, std::pair<size_t, int64_t>> held;  // items, tokens of items whose KLD was measured
  for (const GateItem& it : cand.items) {
    domains.insert(it.domain);
    auto& [items, tokens] = held[{it.domain, it.config}];
    ++items;
    if (std::isfinite(it.scores.kld_mean)) tokens += it.scores.scored_tokens;
  }
  for (const std::string& domain : domains)
    for (ConfigIndex config = 0; config < cand.configs.size(); ++config) {
      const CoverageLimits lim = policy.limits_for(domain, cand.spec(config)).coverage;
      const auto it = held.find({domain, config});
      const auto [items, tokens] = it == held.end() ? std::pair<size_t, int64_t>{0, 0} : it->second;
      auto check = [&](const char* metric, const std::optional<double>& limit, double value, const char* what) {
        if (!limit) return;
        CheckResult c = make_check(CheckKind::coverage, metric, domain, &cand.configs[config]);
        c.candidate_value = value;
        c.threshold = *limit;
        c.items = items;
        c.passed = value >= *limit;
        c.detail = fmt::format("{} {} {} minimum {}", what, num(value), c.passed ? ">=" : "<", num(*limit));
        out.push_back(std::move(c));
      };
      check("items_min", lim.items_min, static_cast<double>(items), "items held");
      check("scored_tokens_min", lim.scored_tokens_min, static_cast<double>(tokens),
            "scored tokens with a measured KLD");
    }
}

void add_comparability_checks(const GateRun& base, const GateRun& cand, std::vector<CheckResult>& out,
                              std::vector<std::string>& notes) {
  auto same = [&](const char* metric, const std::string& b, const std::string& c, const char* what) {
    CheckResult r = make_check(CheckKind::comparability, metric, "*", nullptr);
    r.passed = b == c;
    r.detail = r.passed ? fmt::format("same {}: {}", what, c)
                        : fmt::format("{} differs: baseline run {} has '{}', candidate run {} has '{}'", what, base.id, b,
                                      cand.id, c);
    out.push_back(std::move(r));
  };
  same("suite", base.suite_name, cand.suite_name, "suite");
  same("suite_hash", base.suite_hash, cand.suite_hash, "suite content hash");
  same("model", base.model_sha256, cand.model_sha256, "model SHA-256");
  same("reference_config", base.reference_spec(), cand.reference_spec(), "reference KV config");
  for (const GateRun* run : {&base, &cand}) {
    const char* role = run == &base ? "baseline" : "candidate";
    if (run->status == "complete") continue;
    if (run->status == "interrupted") {
      notes.push_back(fmt::format("{} run {} is interrupted (a --limit run, or one stopped by a signal): it is gated on the items it holds",
                                  role, run->id));
      continue;
    }
    CheckResult r = make_check(CheckKind::comparability, std::string(role) + "_status", "*", nullptr);
    r.passed = false;
    r.detail = fmt::format("{} run {} is '{}', not a finished run", role, run->id, run->status);
    out.push_back(std::move(r));
  }
}

void add_coverage_checks(const GateRun& base, const ConfigMatch& match, const GateRun& cand,
                         std::vector<CheckResult>& out, std::vector<std::string>& notes) {
  std::set<ItemKey> have;
  for (const GateItem& it : cand.items) have.insert({it.item_key, it.config});
  std::set<ItemKey> base_have;
  for (const GateItem& it : base.items) base_have.insert({it.item_key, it.config});
  // Each baseline config the comparison keeps, under the name it goes by there (its candidate's
  // spec), in name order.
  std::vector<std::pair<const GateConfig*, ConfigIndex>> configs;
  for (ConfigIndex b = 0; b < base.configs.size(); ++b)
    if (!match.left_out[b])
      configs.emplace_back(match.candidate_of[b] ? &cand.configs[*match.candidate_of[b]] : &base.configs[b], b);
  std::sort(configs.begin(), configs.end(),
            [](const auto& x, const auto& y) { return std::tie(x.first->spec, x.second) < std::tie(y.first->spec, y.second); });
  for (const auto& [shown, config] : configs) {
    const std::optional<ConfigIndex> cand_config = match.candidate_of[config];
    CheckResult c = make_check(CheckKind::coverage, "items", "*", shown);
    std::vector<std::string> missing;
    size_t total = 0;
    for (const GateItem& it : base.items)
      if (it.config == config) {
        ++total;
        if (!cand_config || !have.count({it.item_key, *cand_config})) missing.push_back(it.item_key);
      }
    c.items = total;
    c.baseline_value = static_cast<double>(total);
    c.candidate_value = static_cast<double>(total - missing.size());
    c.threshold = static_cast<double>(total);
    if (!cand_config) {
      c.passed = false;
      c.detail = fmt::format("the candidate run has no config {} (the baseline has it on {} items)", shown->spec, total);
    } else {
      c.passed = missing.empty();
      c.detail = missing.empty() ? fmt::format("all {} baseline items present", total)
                                 : fmt::format("{} of {} baseline items missing from the candidate: {}", missing.size(),
                                               total, short_list(missing));
    }
    out.push_back(std::move(c));
  }
  std::vector<std::string> extra;
  for (const GateItem& it : cand.items) {
    const std::optional<ConfigIndex> base_config = match.baseline_of[it.config];
    if (!base_config || !base_have.count({it.item_key, *base_config})) extra.push_back(it.item_key + " @ " + cand.spec(it.config));
  }
  if (!extra.empty())
    notes.push_back(fmt::format("{} (item, config) pairs of the candidate have no baseline and were checked only "
                                "against absolute limits: {}",
                                extra.size(), short_list(extra)));
}

}  // namespace

double other_load_per_core(const RunLoad& l) {
  const double other = std::max(l.load_avg_start, l.load_avg_max - static_cast<double>(l.threads));
  return std::max(0.0, other) / static_cast<double>(std::max<int64_t>(1, l.cores));
}

ConfigMatch match_configs(const GateRun& baseline, const GateRun& candidate, const std::vector<ConfigPairing>& pairings) {
  ConfigMatch m;
  m.baseline_of.assign(candidate.configs.size(), std::nullopt);
  m.candidate_of.assign(baseline.configs.size(), std::nullopt);
  m.left_out.assign(baseline.configs.size(), false);
  std::vector<bool> paired(baseline.configs.size(), false);
  for (const ConfigPairing& p : pairings) {
    const std::string& b = baseline.spec(p.baseline_config);
    const std::string& c = candidate.spec(p.candidate_config);
    if (paired[p.baseline_config]) throw_usage_error("--pair-config: baseline config " + b + " is paired twice");
    if (const std::optional<ConfigIndex> other = m.baseline_of[p.candidate_config])
      throw_usage_error("--pair-config: candidate config " + c + " is paired with both " + baseline.spec(*other) +
                        " and " + b);
    paired[p.baseline_config] = true;
    m.baseline_of[p.candidate_config] = p.baseline_config;
    m.candidate_of[p.baseline_config] = p.candidate_config;
    m.notes.push_back("baseline config " + b + " is compared with candidate config " + c);
  }
  // Every other config: the same canonical spec is the same config. A baseline config whose
  // candidate counterpart a pairing took is left out, so that config has one baseline.
  std::map<std::string, ConfigIndex> candidate_by_spec;
  for (ConfigIndex c = 0; c < candidate.configs.size(); ++c) candidate_by_spec.emplace(candidate.spec(c), c);
  for (ConfigIndex b = 0; b < baseline.configs.size(); ++b) {
    if (paired[b]) continue;
    const auto c = candidate_by_spec.find(baseline.spec(b));
    if (c == candidate_by_spec.end()) continue;
    if (const std::optional<ConfigIndex> taken = m.baseline_of[c->second]) {
      if (paired[*taken]) {
        m.left_out[b] = true;
        m.notes.push_back("baseline config " + baseline.spec(b) + " is left out: the candidate's " + c->first +
                          " is compared with the baseline's " + baseline.spec(*taken) + " instead");
      }
      continue;
    }
    m.baseline_of[c->second] = b;
    m.candidate_of[b] = c->second;
  }
  return m;
}

GateOutcome evaluate_gate(const GatePolicy& policy, const GateRun* baseline, const GateRun& candidate,
                          const std::vector<ConfigPairing>& pairings) {
  GateOutcome o;
  // Without a baseline every candidate config is unmatched, which the absolute checks read as
  // "no baseline value".
  const ConfigMatch match = baseline ? match_configs(*baseline, candidate, pairings)
                                     : ConfigMatch{std::vector<std::optional<ConfigIndex>>(candidate.configs.size()), {}, {}, {}};
  o.notes = match.notes;
  if (baseline) {
    add_comparability_checks(*baseline, candidate, o.checks, o.notes);
    add_coverage_checks(*baseline, match, candidate, o.checks, o.notes);
  } else {
    o.notes.push_back(fmt::format("no baseline run: candidate run {} was checked against absolute limits only", candidate.id));
  }
  add_coverage_min_checks(policy, candidate, o.checks);
  add_absolute_checks(policy, baseline, match, candidate, o.checks);
  add_position_checks(policy, baseline, match, candidate, o.checks);
  add_depth_checks(policy, candidate, o.checks);
  if (baseline) {
    add_regression_checks(policy, *baseline, match, candidate, o.checks);
    add_slowdown_checks(policy, *baseline, match, candidate, o.checks);
    add_calibrated_checks(policy, *baseline, match, candidate, o.checks, o.notes);
    add_run_to_run_checks(policy, *baseline, match, candidate, o.checks, o.notes);
  }
  return o;
}

}  // namespace kvgate::scoring
