#include "harness/verdicts.h"

#include <map>

#include "core/error.h"
#include "harness/default_policy.h"
#include "harness/stored_scores.h"
#include "kernels/kv_config.h"

namespace kvgate::harness {

scoring::GatePolicy load_policy_or_default(const std::string& path) {
  scoring::GatePolicy policy =
      path.empty() ? scoring::parse_gate_policy(kDefaultGatePolicy, kDefaultGatePolicySource) : scoring::load_gate_policy(path);
  const std::string source = path.empty() ? kDefaultGatePolicySource : path;
  scoring::canonicalize_policy_kv(policy, [&](const std::string& spec) {
    try {
      return kernels::parse_kv_config(spec).canonical();
    } catch (const Error& e) {
      throw_input_error(source + ": rule kv '" + spec + "': " + e.what());
    }
  });
  return policy;
}

scoring::GateRun load_gate_run(results::Store& store, const results::RunRecord& run) {
  scoring::GateRun g;
  g.id = run.id;
  g.status = run.status;
  g.suite_name = run.info.suite_name;
  g.suite_hash = run.info.suite_hash;
  g.model_sha256 = run.info.model_sha256;
  std::map<int64_t, std::string> spec_of;
  for (const results::RunConfigRecord& c : store.run_configs(run.id)) {
    spec_of[c.config_id] = c.spec;
    g.configs.push_back(c.spec);
    if (c.role == "reference") g.reference_config = c.spec;
  }
  auto spec = [&](int64_t id) {
    const auto it = spec_of.find(id);
    return it == spec_of.end() ? "config#" + std::to_string(id) : it->second;
  };
  for (const results::RunItemMetrics& r : store.run_item_metrics(run.id)) {
    scoring::GateItem it;
    it.item_key = r.item_key;
    it.domain = r.domain;
    it.config = spec(r.metrics.config_id);
    it.scores = item_scores(r.metrics);
    g.items.push_back(std::move(it));
  }
  for (const results::RunTurnMetrics& t : store.run_turn_metrics(run.id))
    g.turns.push_back({spec(t.turn.config_id), turn_latency(t.turn)});
  return g;
}

RunVerdicts run_verdicts(results::Store& store, const results::RunRecord& run, const std::string& policy_path) {
  RunVerdicts v;
  v.policy = policy_path.empty() ? kDefaultGatePolicySource : policy_path;
  v.configs = scoring::config_verdicts(load_policy_or_default(policy_path), load_gate_run(store, run));
  return v;
}

std::string verdicts_text(const RunVerdicts& v) {
  if (v.configs.empty()) return "";
  std::string text = "verdict per config (policy " + v.policy + "):\n";
  for (const scoring::ConfigVerdict& c : v.configs) text += "  " + c.line() + "\n";
  return text;
}

}  // namespace kvgate::harness
