#include "harness/report/verdicts.h"


#include "core/error.h"
#include "harness/default_policy.h"
#include "harness/report/stored_scores.h"
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

scoring::GateRun load_gate_run(const results::StoredRun& stored) {
  const results::RunRecord& run = stored.record;
  scoring::GateRun g;
  g.id = run.id;
  g.status = results::run_status_name(run.status);
  g.suite_name = run.info.suite_name;
  g.suite_hash = run.info.suite_hash;
  g.model_sha256 = run.info.model_sha256;
  for (const results::RunConfigRecord& c : stored.configs) g.configs.push_back(c.spec);
  if (const results::RunConfigRecord* ref = stored.reference()) g.reference_config = ref->spec;
  auto spec = [&](int64_t id) { return stored.spec_of(id); };
  for (const results::RunItemMetrics& r : stored.items) {
    scoring::GateItem it;
    it.item_key = r.item_key;
    it.domain = r.domain;
    it.config = spec(r.metrics.config_id);
    it.scores = item_scores(r.metrics);
    g.items.push_back(std::move(it));
  }
  for (const results::RunTurnMetrics& t : stored.turns)
    g.turns.push_back({spec(t.turn.config_id), turn_latency(t.turn), t.item_key, t.turn.turn_index});
  g.positions = position_rows(stored);
  if (run.load)
    g.load = scoring::RunLoad{run.load->load_avg_start, run.load->load_avg_max, run.load->cpu_seconds,
                              run.load->wall_seconds, run.load->cores, run.info.threads};
  return g;
}

RunVerdicts run_verdicts(results::Store& store, const results::RunRecord& run, const std::string& policy_path) {
  RunVerdicts v;
  v.policy = policy_path.empty() ? kDefaultGatePolicySource : policy_path;
  const results::StoredRun stored = results::StoredRun::load(store, run);
  const scoring::GatePolicy policy = load_policy_or_default(policy_path);
  v.bootstrap = policy.bootstrap;
  v.configs = scoring::config_verdicts(policy, load_gate_run(stored));
  v.names = config_names(stored.configs);
  return v;
}

std::string RunVerdicts::label(const scoring::ConfigVerdict& c) const {
  for (const ConfigName& n : names)
    if (n.spec == c.config) return n.label;
  return c.config;
}

std::string RunVerdicts::line(const scoring::ConfigVerdict& c) const {
  scoring::ConfigVerdict named = c;
  named.config = label(c);
  return named.line();
}

std::string verdicts_text(const RunVerdicts& v) {
  if (v.configs.empty()) return "";
  std::string text = "verdict per config (policy " + v.policy + "):\n";
  for (const scoring::ConfigVerdict& c : v.configs) text += "  " + v.line(c) + "\n";
  return text;
}

}  // namespace kvgate::harness
