#include "scoring/rollout_policy.h"

#include <cmath>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "core/mapped_file.h"

namespace kvgate::scoring {
namespace {

using json = nlohmann::json;

// A null inside a domain or the positions: "off here", overriding the top-level margin.
constexpr double kOffHere = std::numeric_limits<double>::quiet_NaN();

[[noreturn]] void bad(const std::string& source, const std::string& where, const std::string& problem) {
  throw_input_error(source + ": " + where + ": " + problem);
}

void reject_unknown_keys(const json& object, const std::set<std::string>& known, const std::string& source,
                         const std::string& where) {
  for (const auto& [key, value] : object.items())
    if (!known.count(key)) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      bad(source, where, "unknown key '" + key + "' (known: " + list + ")");
    }
}

// Margins of the metrics `allowed` accepts; `extra` keys (a note) pass. null is kOffHere.
RolloutMargins read_margins(const json& j, const std::string& source, const std::string& where, bool positions_only,
                            const std::set<std::string>& extra = {}) {
  if (!j.is_object()) bad(source, where, "expected a JSON object of margins");
  std::set<std::string> known = extra;
  for (const VerdictMetric& m : kVerdictMetrics)
    if (!positions_only || m.per_bucket) known.emplace(m.margin_key);
  reject_unknown_keys(j, known, source, where);
  RolloutMargins out;
  for (size_t i = 0; i < kVerdictMetrics.size(); ++i) {
    const VerdictMetric& m = kVerdictMetrics[i];
    const std::string key(m.margin_key);
    if (!j.contains(key)) continue;
    const json& v = j[key];
    if (v.is_null()) {
      out[i] = kOffHere;
      continue;
    }
    if (!v.is_number()) bad(source, where + "." + key, "expected a number or null");
    const double x = v.get<double>();
    const bool fraction = m.unit != VerdictUnit::number;
    if (!std::isfinite(x) || x < 0 || (fraction && x > 1))
      bad(source, where + "." + key, fraction ? "must be a fraction in [0, 1] (0.02 is 2 points)" : "must be a finite number >= 0");
    out[i] = x;
  }
  return out;
}

std::optional<double> resolve(const std::optional<double>& own, const std::optional<double>& inherited) {
  const std::optional<double> v = own ? own : inherited;
  if (v && std::isnan(*v)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<double> RolloutPolicy::margin(size_t m, const std::string& domain) const {
  const auto d = domains.find(domain);
  return resolve(d == domains.end() ? std::nullopt : d->second[m], margins[m]);
}

std::optional<double> RolloutPolicy::position_margin(size_t m) const {
  if (!position_from || !kVerdictMetrics[m].per_bucket) return std::nullopt;
  return resolve(position_margins[m], margins[m]);
}

RolloutPolicy parse_rollout_policy(const std::string& text, const std::string& source) {
  const json j = parse_json_input(text, source);
  if (!j.is_object()) bad(source, "top level", "expected a JSON object");
  if (j.contains("kvgate_gate_policy"))
    bad(source, "top level",
        "this is a gate policy (kvgate gate --policy); verdicts take a rollout policy such as ci/gates/rollout.json "
        "(docs/gates.md, \"Rollout verdicts\")");
  reject_unknown_keys(j, {"kvgate_rollout_policy", "description", "confidence", "margins", "domains", "positions"}, source,
                      "top level");
  if (!j.contains("kvgate_rollout_policy") || j["kvgate_rollout_policy"] != 1)
    bad(source, "kvgate_rollout_policy", "must be 1 (the rollout policy format version this build reads)");
  RolloutPolicy p;
  p.source = source;
  if (j.contains("description")) {
    if (!j["description"].is_string()) bad(source, "description", "expected a string");
    p.description = j["description"].get<std::string>();
  }
  if (j.contains("confidence")) {
    if (!j["confidence"].is_number() || !(j["confidence"].get<double>() > 0.5 && j["confidence"].get<double>() < 1.0))
      bad(source, "confidence", "expected a number in (0.5, 1), e.g. 0.95");
    p.confidence = j["confidence"].get<double>();
  }
  if (!j.contains("margins")) bad(source, "margins", "missing: the largest acceptable harm per metric is the policy");
  p.margins = read_margins(j["margins"], source, "margins", false);
  for (std::optional<double>& m : p.margins)
    if (m && std::isnan(*m)) m.reset();
  if (j.contains("domains")) {
    if (!j["domains"].is_object()) bad(source, "domains", "expected an object of domain name -> margins");
    for (const auto& [domain, margins] : j["domains"].items()) {
      if (domain.empty() || domain == "*") bad(source, "domains", "a domain name must be non-empty and not \"*\" (\"margins\" is the workload's)");
      p.domains[domain] = read_margins(margins, source, "domains." + domain, false, {"note"});
    }
  }
  if (j.contains("positions") && !j["positions"].is_null()) {
    const json& pos = j["positions"];
    if (!pos.is_object()) bad(source, "positions", "expected an object {\"min_position\": N, \"margins\": {...}} or null");
    reject_unknown_keys(pos, {"min_position", "margins", "note"}, source, "positions");
    if (!pos.contains("min_position") || !pos["min_position"].is_number_integer() ||
        !position_bucket_starting_at(pos["min_position"].get<int64_t>())) {
      std::string starts;
      for (const int64_t s : kPositionBucketStart) starts += (starts.empty() ? "" : ", ") + std::to_string(s);
      bad(source, "positions.min_position", "expected the start of a position bucket (" + starts + ")");
    }
    p.position_from = pos["min_position"].get<int64_t>();
    if (pos.contains("margins")) p.position_margins = read_margins(pos["margins"], source, "positions.margins", true);
  }
  return p;
}

RolloutPolicy load_rollout_policy(const std::string& path) { return parse_rollout_policy(read_whole_file(path, kMaxConfigFileBytes), path); }

}  // namespace kvgate::scoring
