#pragma once
// The verdict per config (scoring/verdict.h) for a stored run, under the policy a command was
// given or the built-in default (ci/gates/default.json), and the run as the gate reads it.
#include <string>
#include <vector>

#include "harness/report/config_labels.h"
#include "results/store.h"
#include "results/stored_run.h"
#include "scoring/gate.h"
#include "scoring/gate_policy.h"
#include "scoring/verdict.h"

namespace kvgate::harness {

// `path` "" gives the built-in default policy. Rules' KV names are canonicalized as runs store
// them; a rule naming a KV spec that does not parse is an input error naming the file.
scoring::GatePolicy load_policy_or_default(const std::string& path);

// A stored run as the gate's checks read it.
scoring::GateRun load_gate_run(const results::StoredRun& stored);

struct RunVerdicts {
  std::string policy;  // where the policy came from
  scoring::BootstrapSettings bootstrap;  // the policy's: the intervals a report shows use it too
  std::vector<scoring::ConfigVerdict> configs;  // `config` is the canonical spec
  std::vector<ConfigName> names;                // the run's configs: labels beside specs
  std::string label(const scoring::ConfigVerdict& c) const;
  // The verdict's line naming the config by its label.
  std::string line(const scoring::ConfigVerdict& c) const;
};
RunVerdicts run_verdicts(results::Store& store, const results::RunRecord& run, const std::string& policy_path);

// "verdict per config (policy ...):" and one line per candidate config.
std::string verdicts_text(const RunVerdicts& v);

}  // namespace kvgate::harness
