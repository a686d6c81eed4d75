#pragma once
// The gate's checks by position and by depth (docs/gates.md "Checks by position", "Checks by
// depth"), apart from gate.cc so the
// per-bucket logic reads in one place. Called by evaluate_gate.
#include <vector>

#include "scoring/gate.h"

namespace kvgate::scoring {

// Per (domain, config) of the candidate and per position bucket from each PositionLimit's
// min_position on: the absolute limit on the candidate's token-weighted bucket mean and, with a
// baseline, the paired regression of the per-item bucket means. Buckets that no item of the
// group reaches in either run give one skipped check naming the range, never a pass. `match`
// pairs the candidate's configs with the baseline's (match_configs).
void add_position_checks(const GatePolicy& policy, const GateRun* baseline, const ConfigMatch& match,
                         const GateRun& candidate, std::vector<CheckResult>& out);

// Per candidate config (the reference has none), over all the run's documents: each DepthLimit
// of the config's "*" rules, every bucket from its min_position on against its shallow bucket,
// paired on the documents holding both (scoring/depth_effect.h). Needs no baseline.
void add_depth_checks(const GatePolicy& policy, const GateRun& candidate, std::vector<CheckResult>& out);

}  // namespace kvgate::scoring
