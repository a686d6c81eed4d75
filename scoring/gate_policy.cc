#include "scoring/gate_policy.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "core/mapped_file.h"
#include "scoring/position_buckets.h"

namespace kvgate::scoring {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& source, const std::string& where, const std::string& problem) {
  throw_input_error(source + ": " + where + ": " + problem);
}

// Keys that earlier policy files spelled differently: named in the error, since ignoring one
// would silently turn its limit off.
const std::map<std::string, std::string> kRenamedKeys = {{"accuracy", "gold_accuracy"},
                                                         {"accuracy_drop_max", "gold_accuracy_drop_max"}};

void reject_unknown_keys(const json& object, const std::set<std::string>& known, const std::string& source,
                         const std::string& where) {
  for (const auto& [key, value] : object.items())
    if (!known.count(key)) {
      const auto renamed = kRenamedKeys.find(key);
      if (renamed != kRenamedKeys.end() && known.count(renamed->second))
        bad(source, where, "key '" + key + "' is now '" + renamed->second + "' (rename it in the policy file)");
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      bad(source, where, "unknown key '" + key + "' (known: " + list + ")");
    }
}

const json& require_object(const json& value, const std::string& source, const std::string& where) {
  if (!value.is_object()) bad(source, where, "expected a JSON object");
  return value;
}

// Inside a rule, NaN stands for an explicit null: "off here", which must override a less
// specific rule's limit, unlike an absent key, which inherits it. limits_for() turns it into
// nullopt.
constexpr double kExplicitlyOff = std::numeric_limits<double>::quiet_NaN();

void drop_explicit_off(std::optional<double>& v) {
  if (v && std::isnan(*v)) v.reset();
}

// A limit: a finite number >= 0; null for "off"; absent for "inherit".
std::optional<double> read_limit(const json& object, const char* key, const std::string& source,
                                 const std::string& where, double upper = INFINITY) {
  if (!object.contains(key)) return std::nullopt;
  if (object.at(key).is_null()) return kExplicitlyOff;
  const json& v = object.at(key);
  if (!v.is_number()) bad(source, where + "." + key, "expected a number or null");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0 || x > upper)
    bad(source, where + "." + key,
        std::isfinite(upper) ? "must be a number in [0, 1]" : "must be a finite number >= 0");
  return x;
}

AbsoluteLimits read_absolute(const json& j, const std::string& source, const std::string& where) {
  require_object(j, source, where);
  reject_unknown_keys(j,
                      {"kld_mean_max", "kld_p99_max", "same_top1_min", "gold_accuracy_drop_max", "divergence_rate_max",
                       "first_token_eos_rate_max", "first_token_differs_rate_max"},
                      source, where);
  AbsoluteLimits a;
  a.kld_mean_max = read_limit(j, "kld_mean_max", source, where);
  a.kld_p99_max = read_limit(j, "kld_p99_max", source, where);
  a.same_top1_min = read_limit(j, "same_top1_min", source, where, 1.0);
  a.gold_accuracy_drop_max = read_limit(j, "gold_accuracy_drop_max", source, where, 1.0);
  a.divergence_rate_max = read_limit(j, "divergence_rate_max", source, where, 1.0);
  a.first_token_eos_rate_max = read_limit(j, "first_token_eos_rate_max", source, where, 1.0);
  a.first_token_differs_rate_max = read_limit(j, "first_token_differs_rate_max", source, where, 1.0);
  return a;
}

RegressionLimits read_regression(const json& j, const std::string& source, const std::string& where) {
  require_object(j, source, where);
  reject_unknown_keys(j,
                      {"kld_mean", "kld_p99", "same_top1", "gold_accuracy", "divergence_rate", "first_token_eos_rate",
                       "first_token_differs_rate"},
                      source, where);
  RegressionLimits r;
  r.kld_mean = read_limit(j, "kld_mean", source, where);
  r.kld_p99 = read_limit(j, "kld_p99", source, where);
  r.same_top1 = read_limit(j, "same_top1", source, where, 1.0);
  r.gold_accuracy = read_limit(j, "gold_accuracy", source, where, 1.0);
  r.divergence_rate = read_limit(j, "divergence_rate", source, where, 1.0);
  r.first_token_eos_rate = read_limit(j, "first_token_eos_rate", source, where, 1.0);
  r.first_token_differs_rate = read_limit(j, "first_token_differs_rate", source, where, 1.0);
  return r;
}

CoverageLimits read_coverage(const json& j, const std::string& source, const std::string& where) {
  require_object(j, source, where);
  reject_unknown_keys(j, {"items_min", "scored_tokens_min"}, source, where);
  CoverageLimits c;
  c.items_min = read_limit(j, "items_min", source, where);
  c.scored_tokens_min = read_limit(j, "scored_tokens_min", source, where);
  return c;
}

// The start of a position bucket at `key`, or an error listing them.
int64_t read_bucket_start(const json& e, const char* key, const std::string& source, const std::string& at) {
  if (!e.contains(key) || !e[key].is_number_integer() || !position_bucket_starting_at(e[key].get<int64_t>())) {
    std::string starts;
    for (const int64_t s : kPositionBucketStart) starts += (starts.empty() ? "" : ", ") + std::to_string(s);
    bad(source, at + "." + key, "expected the start of a position bucket (" + starts + ")");
  }
  return e[key].get<int64_t>();
}

// The metric of a position or depth check: "kld_mean" or "same_top1", the two a bucket sums.
std::string read_position_metric(const json& e, const std::string& source, const std::string& at) {
  if (!e.contains("metric") || !e["metric"].is_string() || (e["metric"] != "kld_mean" && e["metric"] != "same_top1"))
    bad(source, at + ".metric", "expected \"kld_mean\" or \"same_top1\"");
  return e["metric"].get<std::string>();
}

// "positions": [{"metric": "kld_mean", "min_position": 16384, "regression": 0.002, "limit": 0.5}, ...]
// or null (none here, overriding a less specific rule).
std::vector<PositionLimit> read_positions(const json& j, const std::string& source, const std::string& where) {
  if (j.is_null()) return {};
  if (!j.is_array()) bad(source, where, "expected an array of position checks or null");
  std::vector<PositionLimit> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const json& e = require_object(j[i], source, at);
    reject_unknown_keys(e, {"metric", "min_position", "regression", "limit"}, source, at);
    PositionLimit p;
    p.metric = read_position_metric(e, source, at);
    p.min_position = read_bucket_start(e, "min_position", source, at);
    const double upper = p.metric == "same_top1" ? 1.0 : INFINITY;
    p.regression = read_limit(e, "regression", source, at, upper);
    p.limit = read_limit(e, "limit", source, at, upper);
    drop_explicit_off(p.regression);
    drop_explicit_off(p.limit);
    if (!p.regression && !p.limit) bad(source, at, "sets neither \"regression\" nor \"limit\", so it checks nothing");
    out.push_back(std::move(p));
  }
  return out;
}

// "depth": [{"metric": "kld_mean", "shallow": 0, "min_position": 2048, "ratio_max": 3, "floor": 0.002}, ...]
// or null (none here, overriding a less specific rule).
std::vector<DepthLimit> read_depth(const json& j, const std::string& source, const std::string& where) {
  if (j.is_null()) return {};
  if (!j.is_array()) bad(source, where, "expected an array of depth checks or null");
  std::vector<DepthLimit> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const json& e = require_object(j[i], source, at);
    reject_unknown_keys(e, {"metric", "shallow", "min_position", "ratio_max", "floor"}, source, at);
    DepthLimit d;
    d.metric = read_position_metric(e, source, at);
    d.shallow = e.contains("shallow") ? read_bucket_start(e, "shallow", source, at) : 0;
    d.min_position = read_bucket_start(e, "min_position", source, at);
    if (d.min_position <= d.shallow) bad(source, at + ".min_position", "must be deeper than \"shallow\"");
    if (e.contains("ratio_max") && d.metric != "kld_mean")
      bad(source, at + ".ratio_max", "applies to kld_mean (a ratio of agreement rates says little; use \"floor\")");
    d.ratio_max = read_limit(e, "ratio_max", source, at);
    d.floor = read_limit(e, "floor", source, at, d.metric == "same_top1" ? 1.0 : INFINITY);
    drop_explicit_off(d.ratio_max);
    drop_explicit_off(d.floor);
    if (d.ratio_max && *d.ratio_max < 1) bad(source, at + ".ratio_max", "must be at least 1 (a ratio below 1 is no worsening)");
    if (!d.ratio_max && !d.floor) bad(source, at, "sets neither \"ratio_max\" nor \"floor\", so it checks nothing");
    out.push_back(std::move(d));
  }
  return out;
}

// null is false, stated (overriding a less specific rule), as a null limit is "off".
std::optional<bool> read_bool(const json& object, const char* key, const std::string& source, const std::string& where) {
  if (!object.contains(key)) return std::nullopt;
  if (object.at(key).is_null()) return false;
  if (!object.at(key).is_boolean()) bad(source, where + "." + key, "expected true, false or null");
  return object.at(key).get<bool>();
}

std::string read_name(const json& rule, const char* key, const std::string& source, const std::string& where) {
  if (!rule.contains(key)) return "*";
  const json& v = rule.at(key);
  if (!v.is_string() || v.get<std::string>().empty()) bad(source, where + "." + key, "expected a non-empty string (or \"*\")");
  return v.get<std::string>();
}

// Later sources overwrite earlier ones only where they set a limit.
void overlay(std::optional<double>& into, const std::optional<double>& from) {
  if (from) into = from;
}

void overlay_limits(GateLimits& into, const GateLimits& from) {
  overlay(into.absolute.kld_mean_max, from.absolute.kld_mean_max);
  overlay(into.absolute.kld_p99_max, from.absolute.kld_p99_max);
  overlay(into.absolute.same_top1_min, from.absolute.same_top1_min);
  overlay(into.absolute.gold_accuracy_drop_max, from.absolute.gold_accuracy_drop_max);
  overlay(into.absolute.divergence_rate_max, from.absolute.divergence_rate_max);
  overlay(into.absolute.first_token_eos_rate_max, from.absolute.first_token_eos_rate_max);
  overlay(into.absolute.first_token_differs_rate_max, from.absolute.first_token_differs_rate_max);
  overlay(into.regression.kld_mean, from.regression.kld_mean);
  overlay(into.regression.kld_p99, from.regression.kld_p99);
  overlay(into.regression.same_top1, from.regression.same_top1);
  overlay(into.regression.gold_accuracy, from.regression.gold_accuracy);
  overlay(into.regression.divergence_rate, from.regression.divergence_rate);
  overlay(into.regression.first_token_eos_rate, from.regression.first_token_eos_rate);
  overlay(into.regression.first_token_differs_rate, from.regression.first_token_differs_rate);
  if (from.positions) into.positions = from.positions;
  if (from.depth) into.depth = from.depth;
  overlay(into.coverage.items_min, from.coverage.items_min);
  overlay(into.coverage.scored_tokens_min, from.coverage.scored_tokens_min);
  if (from.allow_unmeasured) into.allow_unmeasured = from.allow_unmeasured;
}

}  // namespace

GateLimits GatePolicy::limits_for(const std::string& domain, const std::string& kv) const {
  GateLimits out;
  // Least specific first, so each more specific rule overwrites what it sets.
  const std::pair<bool, bool> order[] = {{false, false}, {true, false}, {false, true}, {true, true}};
  for (const auto& [exact_domain, exact_kv] : order)
    for (const GateRule& r : rules) {
      const bool domain_ok = exact_domain ? r.domain == domain : r.domain == "*";
      const bool kv_ok = exact_kv ? r.kv == kv : r.kv == "*";
      if (domain_ok && kv_ok) overlay_limits(out, r.limits);
    }
  for (std::optional<double>* v : {&out.absolute.kld_mean_max, &out.absolute.kld_p99_max, &out.absolute.same_top1_min,
                                   &out.absolute.gold_accuracy_drop_max, &out.absolute.divergence_rate_max,
                                   &out.absolute.first_token_eos_rate_max, &out.absolute.first_token_differs_rate_max,
                                   &out.regression.first_token_eos_rate, &out.regression.first_token_differs_rate,
                                   &out.regression.kld_mean, &out.regression.kld_p99, &out.regression.same_top1,
                                   &out.regression.gold_accuracy, &out.regression.divergence_rate, &out.coverage.items_min,
                                   &out.coverage.scored_tokens_min})
    drop_explicit_off(*v);
  return out;
}

GatePolicy parse_gate_policy(const std::string& text, const std::string& source) {
  const json j = parse_json_input(text, source);
  require_object(j, source, "top level");
  reject_unknown_keys(j, {"kvgate_gate_policy", "description", "bootstrap", "rules", "latency"}, source, "top level");
  if (!j.contains("kvgate_gate_policy") || j["kvgate_gate_policy"] != 1)
    bad(source, "kvgate_gate_policy", "must be 1 (the policy format version this build reads)");
  GatePolicy p;
  p.source = source;
  if (j.contains("description") && !j["description"].is_string()) bad(source, "description", "expected a string");
  if (j.contains("bootstrap")) {
    const json& b = require_object(j["bootstrap"], source, "bootstrap");
    reject_unknown_keys(b, {"resamples", "confidence", "seed"}, source, "bootstrap");
    if (b.contains("resamples")) {
      if (!b["resamples"].is_number_integer() || b["resamples"].get<int64_t>() < 100 || b["resamples"].get<int64_t>() > 100000)
        bad(source, "bootstrap.resamples", "expected an integer in [100, 100000]");
      p.bootstrap.resamples = b["resamples"].get<size_t>();
    }
    if (b.contains("confidence")) {
      if (!b["confidence"].is_number() || !(b["confidence"].get<double>() > 0.5 && b["confidence"].get<double>() < 1.0))
        bad(source, "bootstrap.confidence", "expected a number in (0.5, 1)");
      p.bootstrap.confidence = b["confidence"].get<double>();
    }
    if (b.contains("seed")) {
      if (!b["seed"].is_number_unsigned()) bad(source, "bootstrap.seed", "expected a non-negative integer");
      p.bootstrap.seed = b["seed"].get<uint64_t>();
    }
  }
  if (!j.contains("rules") || !j["rules"].is_array() || j["rules"].empty())
    bad(source, "rules", "expected a non-empty array of rules");
  for (size_t i = 0; i < j["rules"].size(); ++i) {
    const std::string where = "rules[" + std::to_string(i) + "]";
    const json& r = require_object(j["rules"][i], source, where);
    reject_unknown_keys(r,
                        {"domain", "kv", "absolute", "regression", "coverage", "positions", "depth", "allow_unmeasured",
                         "note", "optional"},
                        source, where);
    GateRule rule;
    rule.index = i;
    rule.domain = read_name(r, "domain", source, where);
    rule.kv = read_name(r, "kv", source, where);
    if (r.contains("optional")) {
      if (!r["optional"].is_boolean()) bad(source, where + ".optional", "expected true or false");
      rule.optional = r["optional"].get<bool>();
    }
    if (r.contains("absolute")) rule.limits.absolute = read_absolute(r["absolute"], source, where + ".absolute");
    if (r.contains("regression")) rule.limits.regression = read_regression(r["regression"], source, where + ".regression");
    if (r.contains("coverage")) rule.limits.coverage = read_coverage(r["coverage"], source, where + ".coverage");
    if (r.contains("positions")) rule.limits.positions = read_positions(r["positions"], source, where + ".positions");
    if (r.contains("depth")) {
      if (rule.domain != "*")
        bad(source, where + ".depth", "a depth effect is measured over all of a run's documents: set it in a rule with "
                                      "\"domain\": \"*\"");
      rule.limits.depth = read_depth(r["depth"], source, where + ".depth");
    }
    rule.limits.allow_unmeasured = read_bool(r, "allow_unmeasured", source, where);
    p.rules.push_back(std::move(rule));
  }
  if (j.contains("latency")) {
    const json& l = require_object(j["latency"], source, "latency");
    // Every latency limit is a ratio: no slower is 1.
    const std::pair<const char*, std::optional<double> LatencyLimits::*> ratio_limits[] = {
        {"ttft_slowdown_max", &LatencyLimits::ttft_slowdown_max},
        {"tpot_slowdown_max", &LatencyLimits::tpot_slowdown_max},
        {"ttft_calibrated_ratio_max", &LatencyLimits::ttft_calibrated_ratio_max},
        {"tpot_calibrated_ratio_max", &LatencyLimits::tpot_calibrated_ratio_max},
        {"ttft_p50_ratio_max", &LatencyLimits::ttft_p50_ratio_max},
        {"ttft_p95_ratio_max", &LatencyLimits::ttft_p95_ratio_max},
        {"tpot_p50_ratio_max", &LatencyLimits::tpot_p50_ratio_max},
        {"tpot_p95_ratio_max", &LatencyLimits::tpot_p95_ratio_max}};
    std::set<std::string> known{"quiet_load_max", "allow_unmeasured"};
    for (const auto& [key, member] : ratio_limits) known.insert(key);
    reject_unknown_keys(l, known, source, "latency");
    for (const auto& [key, member] : ratio_limits) {
      std::optional<double>& v = p.latency.*member;
      v = read_limit(l, key, source, "latency");
      // Latency limits have no rules to inherit from: null and absent both mean off.
      drop_explicit_off(v);
      // A ratio limit below 1 would fail identical runs.
      if (v && *v < 1.0) bad(source, std::string("latency.") + key, "a ratio limit must be >= 1 (1 means no slower)");
    }
    if (l.contains("quiet_load_max")) {
      // null: no machine counts as quiet, so run-to-run ratios are never checked.
      const std::optional<double> q = read_limit(l, "quiet_load_max", source, "latency");
      p.latency.quiet_load_max = std::isnan(*q) ? std::nullopt : q;
    }
    if (const std::optional<bool> allow = read_bool(l, "allow_unmeasured", source, "latency"))
      p.latency.allow_unmeasured = *allow;
  }
  canonicalize_policy_kv(p, [](const GateRule& r) { return std::vector<std::string>{r.kv}; });
  return p;
}

GatePolicy load_gate_policy(const std::string& path) { return parse_gate_policy(read_whole_file(path, kMaxConfigFileBytes), path); }

void canonicalize_policy_kv(GatePolicy& policy, const std::function<std::vector<std::string>(const GateRule&)>& canonical) {
  std::map<std::pair<std::string, std::string>, size_t> seen;  // (domain, kv) -> the rule that set it
  std::vector<GateRule> rules;
  for (const GateRule& r : policy.rules) {
    const std::vector<std::string> specs = r.kv == "*" ? std::vector<std::string>{"*"} : canonical(r);
    for (const std::string& spec : specs) {
      const auto [it, fresh] = seen.emplace(std::make_pair(r.domain, spec), r.index);
      if (!fresh)
        bad(policy.source, "rules[" + std::to_string(r.index) + "]",
            "a second rule for domain '" + r.domain + "' and kv '" + spec + "' (rules[" + std::to_string(it->second) +
                "] names it too; merge them into one)");
      GateRule bound = r;
      bound.kv = spec;
      rules.push_back(std::move(bound));
    }
  }
  policy.rules = std::move(rules);
}

}  // namespace kvgate::scoring
