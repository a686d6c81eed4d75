#include "harness/report/verdicts.h"

#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "harness/default_policy.h"
#include "harness/stored_scores.h"
#include "harness/rollout_policy.h"
#include "kernels/kv_config.h"

namespace kvgate::harness {

scoring::GatePolicy load_policy_or_default(const std::string& path) {
  return path.empty() ? scoring::parse_gate_policy(kDefaultGatePolicy, kDefaultGatePolicySource)
                      : scoring::load_gate_policy(path);
}

scoring::GatePolicy bind_policy(const scoring::GatePolicy& policy, const std::vector<results::StoredConfig>& configs,
                                int64_t run_id, std::vector<std::string>* notes) {
  scoring::GatePolicy bound = policy;
  scoring::canonicalize_policy_kv(bound, [&](const scoring::GateRule& rule) {
    const ConfigMatcher matcher(rule.kv);
    std::vector<std::string> specs;
    for (const results::StoredConfig& c : configs)
      if (matcher.names(c)) specs.push_back(c.spec);
    if (!specs.empty()) return specs;
    const std::string where = fmt::format("{}: rules[{}] (kv '{}')", policy.source, rule.index, echo_user_text(rule.kv));
    if (rule.optional) {
      if (notes)
        notes->push_back(fmt::format("{} names no config of run {} (its configs: {}); the rule is optional and was not "
                                     "applied",
                                     where, run_id, config_list(configs)));
      return specs;
    }
    throw_input_error(fmt::format(
        "{} names no config of run {} (its configs: {}){}; a rule that applies to nothing would let the run pass "
        "without its limits. Name a config as `kvgate runs show` prints it, or give the rule \"optional\": true if it "
        "is meant only for runs that have that config",
        where, run_id, config_list(configs),
        matcher.parse_problem().empty() ? "" : "; as a KV spec: " + matcher.parse_problem()));
  });
  return bound;
}

scoring::GateRun load_gate_run(const results::StoredRun& stored) {
  const results::RunRecord& run = stored.record;
  scoring::GateRun g;
  g.id = run.id;
  g.status = results::run_status_name(run.status);
  g.suite_name = run.info.suite_name;
  g.suite_hash = run.info.suite_hash;
  g.model_sha256 = run.info.model_sha256;
  std::map<int64_t, scoring::ConfigIndex> index_of;
  for (const results::StoredConfig& c : stored.configs)
    index_of[c.config_id] =
        g.add_config({c.config_id, c.spec, c.label, c.role == results::ConfigRole::reference});
  // A row of a config the run does not list cannot be gated as any of its configs.
  auto index = [&](int64_t config_id, const char* table) {
    const auto it = index_of.find(config_id);
    if (it == index_of.end())
      throw_input_error(fmt::format("run {}: {} holds rows of config id {}, which is not a config of the run (its "
                                    "configs: {}); the file is damaged",
                                    run.id, table, config_id, config_list(stored.configs)));
    return it->second;
  };
  for (const results::RunItemMetrics& r : stored.items)
    g.items.push_back({r.item_key, r.domain, index(r.metrics.config_id, "item_metrics"), item_scores(r.metrics)});
  for (const results::RunTurnMetrics& t : stored.turns)
    g.turns.push_back({index(t.turn.config_id, "turn_metrics"), turn_latency(t.turn), t.item_key, t.turn.turn_index});
  for (const results::RunPositionMetrics& r : stored.positions) {
    // As position_rows: a row of a config the run does not list is left out.
    const auto it = index_of.find(r.position.config_id);
    if (it == index_of.end()) continue;
    g.positions.push_back({r.item_key, it->second, scoring::position_bucket(r.position.position_from),
                           position_sums(r.position)});
  }
  g.calibration = run.info.calibration;
  for (const auto& [key, c] : stored.calibration) g.item_calibration[key] = {c.prefill_ms, c.decode_ms};
  if (run.load)
    g.load = scoring::RunLoad{run.load->load_avg_start, run.load->load_avg_max, run.load->cpu_seconds,
                              run.load->wall_seconds, run.load->cores, run.info.threads};
  return g;
}

scoring::RolloutPolicy load_rollout_policy_or_default(const std::string& path) {
  return path.empty() ? scoring::parse_rollout_policy(kRolloutPolicy, kRolloutPolicySource) : scoring::load_rollout_policy(path);
}

RunVerdicts run_verdicts(const results::StoredRun& stored, const std::string& policy_path, size_t family) {
  RunVerdicts v;
  v.policy = load_rollout_policy_or_default(policy_path);
  v.configs = scoring::config_verdicts(v.policy, load_gate_run(stored), family);
  std::set<std::string> items, domains;
  for (const results::RunItemMetrics& r : stored.items) items.insert(r.item_key), domains.insert(r.domain);
  if (const results::StoredConfig* ref = stored.reference()) v.reference = label_of(stored.configs, ref->spec);
  v.conclusion = scoring::verdict_conclusion(v.configs, v.policy, items.size(), v.reference,
                                             std::vector<std::string>(domains.begin(), domains.end()));
  return v;
}

std::string verdicts_text(const RunVerdicts& v) {
  if (v.configs.empty()) return "";
  std::string text = fmt::format("verdict per config (rollout policy {}, against {}):\n", v.policy.source, v.reference);
  for (const scoring::ConfigVerdict& c : v.configs) text += "  " + c.line() + "\n";
  for (const std::string& line : v.conclusion) text += "  " + line + "\n";
  return text;
}

namespace {

nlohmann::json number_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

}  // namespace

nlohmann::json verdict_json(const scoring::ConfigVerdict& v) {
  nlohmann::json checks = nlohmann::json::array();
  for (const scoring::VerdictCheck& c : v.checks)
    checks.push_back({{"name", c.name},
                      {"metric", c.info().name()},
                      {"domain", c.domain},
                      {"position_bucket", c.bucket < 0 ? nlohmann::json(nullptr) : nlohmann::json(scoring::position_bucket_name(c.bucket))},
                      {"worse", c.info().worse() == scoring::Worse::higher ? "higher" : "lower"},
                      {"margin", c.margin},
                      {"outcome", scoring::check_outcome_name(c.outcome)},
                      {"skip_reason", c.skip_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.skip_reason)},
                      {"items", c.items},
                      {"estimate", number_or_null(c.estimate)},
                      {"low", number_or_null(c.low)},
                      {"high", number_or_null(c.high)},
                      {"strict_low", number_or_null(c.strict_low)},
                      {"strict_high", number_or_null(c.strict_high)},
                      {"items_to_decide", number_or_null(c.items_to_decide)},
                      {"run_items_to_decide", number_or_null(c.run_items_to_decide)}});
  return {{"config", v.config},
          {"label", v.shown()},
          {"verdict", scoring::verdict_name(v.verdict)},
          {"reason", v.reason},
          {"line", v.line()},
          {"items", v.items},
          {"confidence", v.confidence},
          {"strict_confidence", v.strict_confidence},
          {"within", v.within},
          {"beyond", v.beyond},
          {"undecided", v.undecided},
          {"skipped", v.skipped},
          {"deciding_check", v.deciding < 0 ? nlohmann::json(nullptr) : nlohmann::json(v.checks[static_cast<size_t>(v.deciding)].name)},
          {"items_to_decide", number_or_null(v.items_to_decide)},
          {"toward_harm", v.toward_harm},
          {"checks", checks}};
}

nlohmann::json verdicts_json(const RunVerdicts& v) {
  nlohmann::json out = {{"policy", v.policy.source},
                        {"confidence", v.policy.confidence},
                        {"reference", v.reference},
                        {"verdicts", nlohmann::json::array()},
                        {"conclusion", v.conclusion}};
  for (const scoring::ConfigVerdict& c : v.configs) out["verdicts"].push_back(verdict_json(c));
  return out;
}

std::string verdicts_markdown(const RunVerdicts& v) {
  if (v.configs.empty()) return "";
  std::string md = fmt::format("**Verdict per config** (rollout policy `{}`, against `{}`):\n\n", v.policy.source, v.reference);
  for (const scoring::ConfigVerdict& c : v.configs)
    md += fmt::format("- **{}**: {}: {}\n", c.shown(), scoring::verdict_name(c.verdict), c.reason);
  md += "\n";
  for (const std::string& line : v.conclusion) md += line + "\n";
  return md + "\n";
}

}  // namespace kvgate::harness
