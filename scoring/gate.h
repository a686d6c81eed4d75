#pragma once
// Regression gate logic on plain numbers: a candidate run's per-item metrics are checked
// against a policy's absolute limits and, item by item paired, against a baseline run's.
//
// Why paired bootstrap plus a floor: items differ far more from each other than a config
// changes any one of them, so only per-item deltas see a small real change; and a real but
// negligible change must not fail a nightly, so the mean delta must also exceed a magnitude.
// Identical runs give all-zero deltas, an interval of [0, 0], and so can never fire.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "scoring/aggregate.h"
#include "scoring/gate_policy.h"
#include "scoring/position_buckets.h"

namespace kvgate::scoring {

// One config of a run as the gate sees it. A run's series (items, turns, positions) name their
// config by its index in GateRun::configs; two runs' configs are matched once, by match_configs.
struct GateConfig {
  int64_t id = 0;     // its id in the results database (0: not stored, as in tests)
  std::string spec;   // canonical: what check names carry, and what matches it with another run's config
  std::string label;  // as the user typed it ("" where not recorded)
  bool reference = false;  // the config the run's KLDs are measured against
};

using ConfigIndex = size_t;  // into GateRun::configs

// One eval item under one KV config.
struct GateItem {
  std::string item_key, domain;
  ConfigIndex config = 0;
  ItemScores scores;
};

// One scored turn of one item under one config. The latency slowdown pairs a config's turn with
// the reference config's same turn (item_key, turn_index) of the same run.
struct GateTurn {
  ConfigIndex config = 0;
  TurnLatency latency;
  std::string item_key;
  int64_t turn_index = 0;
};

// Per-position sums of one stored unit (an item's turn, or an item) under one config, in one
// bucket (scoring/position_buckets.h).
struct GatePosition {
  std::string item_key;
  ConfigIndex config = 0;
  int bucket = 0;
  PositionSums sums;
};

// What else the machine ran during a run (the runs row, docs/schema.md). 1-minute load
// averages: at the run's start, and the highest seen between its items (its own threads
// included).
struct RunLoad {
  double load_avg_start = 0, load_avg_max = 0;
  double cpu_seconds = 0, wall_seconds = 0;  // the run's process CPU time (user + system) and wall time
  int64_t cores = 0;    // online cores
  int64_t threads = 0;  // the run's own worker threads
};

// Runnable tasks per core that were not the run's own: max(load at start, highest load minus
// the run's threads) / cores. A resumed run counts its worst invocation.
double other_load_per_core(const RunLoad& load);

// The calibration workload's CPU times around one item (results::ItemCalibration), ms.
struct ItemCalibration {
  double prefill_ms = 0, decode_ms = 0;
};

struct GateRun {
  int64_t id = 0;
  std::string status;  // complete | interrupted | running | failed
  std::string suite_name, suite_hash, model_sha256;
  std::vector<GateConfig> configs;  // every config of the run, reference included, in the run's order
  std::vector<GateItem> items;
  std::vector<GateTurn> turns;
  // Per-position sums, one row per (item, config, bucket) or finer (turns): the position checks
  // add up an item's rows per bucket. Empty for a run made before kvgate kept them.
  std::vector<GatePosition> positions;
  std::optional<RunLoad> load;  // nullopt: not recorded (an older kvgate, or a killed invocation)
  // The latency yardstick: the calibration workload as text ("": the run was not calibrated) and
  // its times around each item, by item key (an item without one is not in the map).
  std::string calibration;
  std::map<std::string, ItemCalibration> item_calibration;

  // Appends a config; returns its index.
  ConfigIndex add_config(GateConfig config);
  // The reference config's index (the first config marked so); nullopt when the run has none.
  std::optional<ConfigIndex> reference() const;
  bool is_reference(ConfigIndex config) const { return configs.at(config).reference; }
  // The reference config's spec, "" when the run has none.
  const std::string& reference_spec() const;
  const std::string& spec(ConfigIndex config) const { return configs.at(config).spec; }
};

// Orders (domain, config) groups of `run` as check lists show them: by domain, then by the
// config's canonical spec (the order check names sort in).
struct GroupOrder {
  const GateRun* run = nullptr;
  bool operator()(const std::pair<std::string, ConfigIndex>& a, const std::pair<std::string, ConfigIndex>& b) const;
};

struct AffectedItem {
  std::string item_key;
  double baseline = 0, candidate = 0, delta = 0;
};

enum class CheckKind { comparability, coverage, absolute, regression, latency, position };
const char* check_kind_name(CheckKind k);

struct CheckResult {
  // unique and stable: "regression.kld_mean[tables, q4_0/q4_0]", "position.kld_mean@16-32k[long, q4_0/q4_0]"
  std::string name;
  CheckKind kind = CheckKind::absolute;
  std::string domain;  // "*" for run-wide checks
  std::string config;  // the config's canonical spec; "" for run-wide checks
  // The named config's GateConfig::id (the candidate's; the baseline's for a config only it has),
  // which the gate command stores with the decision; nullopt for run-wide checks.
  std::optional<int64_t> config_id;
  std::string metric;
  bool passed = true;
  // Not decided: the check could not say anything (nothing measured, or gold accuracy where the
  // reference itself cannot answer). Never a failure, but reports list it apart from the
  // passes, with `detail` giving the reason, so a skipped check is never read as a pass.
  bool skipped = false;
  // NaN where a number does not apply (e.g. no baseline for an absolute check).
  double baseline_value = 0, candidate_value = 0, delta = 0, ci_low = 0, ci_high = 0, threshold = 0;
  size_t items = 0;  // items (or pairs) the check looked at
  std::string detail;  // one line a person reads: the numbers and why it passed or failed
  std::vector<AffectedItem> most_affected;  // worst deltas first (regression checks)
};

// The decision of a paired regression check (gate.cc's per-metric checks and gate_positions.cc's
// per-bucket ones share it): `bv`/`cv` the baseline's and candidate's values per paired item,
// `moved` those pairs; `sign` +1 where higher is worse, -1 where lower is. Fills the means, the
// seeded bootstrap interval of candidate - baseline (seed from the policy and c.name), `passed`
// (unless the worsening is both real, the interval excluding 0, and beyond `floor`) and the five
// items that worsened most. Returns whether the worsening is real, for the detail line.
bool decide_paired_regression(CheckResult& c, const std::vector<double>& bv, const std::vector<double>& cv,
                              std::vector<AffectedItem> moved, double sign, double floor, const GatePolicy& policy);

struct GateOutcome {
  std::vector<CheckResult> checks;
  std::vector<std::string> notes;  // things a reader should know that are not failures
  size_t failed() const;
  size_t skipped() const;
  bool passed() const { return failed() == 0; }
};

// `--pair-config BASE=CAND`: the baseline's config BASE is compared with the candidate's CAND
// (indices into each run's configs).
struct ConfigPairing {
  ConfigIndex baseline_config = 0, candidate_config = 0;
};

// Which config of the baseline each config of the candidate is compared with. "The same config"
// across two runs is the one of the same canonical spec, unless a pairing says otherwise: a
// paired baseline config stands for its candidate config, and the baseline's own config of that
// candidate's spec is left out, so one candidate config never has two baseline counterparts.
struct ConfigMatch {
  std::vector<std::optional<ConfigIndex>> baseline_of;   // per candidate config
  std::vector<std::optional<ConfigIndex>> candidate_of;  // per baseline config
  std::vector<bool> left_out;  // per baseline config: displaced by a pairing (neither compared nor covered)
  std::vector<std::string> notes;  // one per pairing and per config left out
};

// The one place two runs' configs are matched. A config paired twice, or two pairings onto one
// config, are usage errors (kvgate::Error).
ConfigMatch match_configs(const GateRun& baseline, const GateRun& candidate, const std::vector<ConfigPairing>& pairings);

// baseline == nullptr: no baseline (a first run), so only comparability-free absolute checks
// run, with a note saying so. Deterministic: the same inputs give bit-identical results.
// `pairings` (with a baseline only) go to match_configs; their notes come first.
GateOutcome evaluate_gate(const GatePolicy& policy, const GateRun* baseline, const GateRun& candidate,
                          const std::vector<ConfigPairing>& pairings = {});

}  // namespace kvgate::scoring
