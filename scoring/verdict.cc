#include "scoring/verdict.h"

#include <cmath>

#include <fmt/format.h>

namespace kvgate::scoring {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::safe: return "safe";
    case Verdict::watch: return "watch";
    case Verdict::unsafe: return "unsafe";
  }
  return "unknown";
}

namespace {

// The metrics whose limit is a floor on a fraction; every other absolute limit is a ceiling.
bool lower_limit(const std::string& metric) { return metric == "same_top1"; }

const char* metric_label(const std::string& metric) {
  if (metric == "kld_mean") return "mean KLD";
  if (metric == "kld_p99") return "item KLD p99";
  if (metric == "same_top1") return "same top-1";
  if (metric == "divergence_rate") return "greedy divergence";
  if (metric == "gold_accuracy_drop") return "gold accuracy drop";
  return "value";
}

// How much of its allowance a decided check used: 1 at the limit, above 1 past it.
double share_used(const CheckResult& c) {
  const double v = c.metric == "gold_accuracy_drop" ? c.delta : c.candidate_value;
  if (!std::isfinite(v) || !std::isfinite(c.threshold)) return 0;
  if (lower_limit(c.metric)) return c.threshold >= 1 ? (v >= 1 ? 0 : 2) : (1 - v) / (1 - c.threshold);
  if (c.threshold <= 0) return v > 0 ? 2 : 0;
  return std::max(0.0, v) / c.threshold;
}

std::string value_text(const std::string& metric, double v) {
  if (metric == "same_top1" || metric == "divergence_rate" || metric == "gold_accuracy_drop")
    return fmt::format("{:.1f} %", 100 * v);
  return fmt::format("{:.4g}", v);
}

}  // namespace

std::string ConfigVerdict::line() const {
  std::string out = fmt::format("{}: {} for this workload", config, verdict_name(verdict));
  if (!reason.empty()) out += ": " + reason;
  out += fmt::format(" ({} of {} policy checks failed", failed, checks);
  if (skipped > 0) out += fmt::format(", {} skipped", skipped);
  return out + ")";
}

std::vector<ConfigVerdict> config_verdicts(const GatePolicy& policy, const GateRun& run) {
  const GateOutcome o = evaluate_gate(policy, nullptr, run);
  std::vector<ConfigVerdict> out;
  for (const std::string& config : run.configs) {
    if (config == run.reference_config) continue;
    ConfigVerdict v;
    v.config = config;
    const CheckResult* worst = nullptr;
    for (const CheckResult& c : o.checks) {
      if (c.config != config || c.kind != CheckKind::absolute) continue;
      ++v.checks;
      if (c.skipped) {
        ++v.skipped;
        continue;
      }
      if (!c.passed) ++v.failed;
      const double s = c.passed ? std::min(share_used(c), 1.0) : std::max(share_used(c), 1.0 + 1e-9);
      // A failed check always outranks a passed one; ties keep the first (the checks' stable order).
      if (!worst || s > v.share) worst = &c, v.share = s;
    }
    if (!worst) {
      v.reason = v.checks == 0 ? "the policy sets no absolute limit for it" : "no check could be decided";
      v.verdict = v.checks == 0 ? Verdict::safe : Verdict::watch;
    } else {
      v.worst_check = worst->name;
      v.domain = worst->domain;
      v.verdict = v.failed > 0 ? Verdict::unsafe : v.share >= kWatchShare ? Verdict::watch : Verdict::safe;
      const double value = worst->metric == "gold_accuracy_drop" ? worst->delta : worst->candidate_value;
      const bool lower = lower_limit(worst->metric);
      const char* cmp = worst->passed ? (lower ? ">=" : "<=") : (lower ? "<" : ">");
      v.reason = fmt::format("{} {} in {} {} limit {}", metric_label(worst->metric), value_text(worst->metric, value),
                             worst->domain, cmp, value_text(worst->metric, worst->threshold));
      if (worst->passed) v.reason += fmt::format(", {:.0f} % of the allowance used", 100 * v.share);
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace kvgate::scoring
