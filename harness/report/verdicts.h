#pragma once
// The rollout verdict per config (scoring/verdict.h) for a stored run, under the rollout policy a
// command was given or the built-in ci/gates/rollout.json, in the words every command prints it
// (text, JSON, Markdown); and, for the gate, its policy and the run as the gate reads it.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/report/config_labels.h"
#include "results/store.h"
#include "results/stored_run.h"
#include "scoring/gate.h"
#include "scoring/gate_policy.h"
#include "scoring/rollout_policy.h"
#include "scoring/verdict.h"

namespace kvgate::harness {

// `path` "" gives the built-in default policy, as parsed: its rules' `kv` names are bound to a
// run's configs by bind_policy.
scoring::GatePolicy load_policy_or_default(const std::string& path);

// The policy's rules bound to run `run_id`'s configs, each `kv` rule keyed by the stored spec of
// every config it names (ConfigMatcher: by label, spec as written, or meaning), as the checks
// look limits up. A rule that names no config of the run is an input error naming the policy,
// the rule and the run's configs, unless it is "optional"; then `notes` (if given) gets a line
// saying it was not applied.
scoring::GatePolicy bind_policy(const scoring::GatePolicy& policy, const std::vector<results::StoredConfig>& configs,
                                int64_t run_id, std::vector<std::string>* notes);

// A stored run as the gate's checks (and the verdicts) read it.
scoring::GateRun load_gate_run(const results::StoredRun& stored);

// `path` "" gives the built-in rollout policy (ci/gates/rollout.json).
scoring::RolloutPolicy load_rollout_policy_or_default(const std::string& path);

struct RunVerdicts {
  scoring::RolloutPolicy policy;
  std::vector<scoring::ConfigVerdict> configs;  // per candidate config, `label` as typed
  std::vector<std::string> conclusion;          // what the run can and cannot conclude, 2-3 lines
  std::string reference;                        // the reference config as typed
};
// `family`: candidates decided together (kvgate compare), which widens every bound.
RunVerdicts run_verdicts(const results::StoredRun& stored, const std::string& policy_path, size_t family = 1);

// "verdict per config (rollout policy ..., against REF):", one line per candidate, then the
// conclusion lines.
std::string verdicts_text(const RunVerdicts& v);
// {"policy", "confidence", "reference", "verdicts": [...], "conclusion": [...]}; each verdict
// with its checks (bounds, margin, outcome, items to decide).
nlohmann::json verdicts_json(const RunVerdicts& v);
nlohmann::json verdict_json(const scoring::ConfigVerdict& v);
// For a PR comment: the lines as a list, then the conclusion.
std::string verdicts_markdown(const RunVerdicts& v);

}  // namespace kvgate::harness
