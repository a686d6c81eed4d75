#pragma once
// Gate policy: which numbers a candidate run must stay within, per eval domain and KV config.
// Read from a JSON file (format in docs/gates.md). Limits that are absent or null are off.
//
// Rules match a domain and a KV config, each a name or "*". For one (domain, config) every
// limit is taken from the most specific rule that sets it, in the order
// (domain, config) > ("*", config) > (domain, "*") > ("*", "*"), so a file states defaults once
// and overrides only what differs.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kvgate::scoring {

// Limits on the candidate run alone.
struct AbsoluteLimits {
  std::optional<double> kld_mean_max;                  // token-weighted mean KLD
  std::optional<double> kld_p99_max;                   // 99th percentile over items of each item's KLD p99
  std::optional<double> same_top1_min;                 // token-weighted top-1 agreement, fraction
  std::optional<double> gold_accuracy_drop_max;        // reference config's gold accuracy minus this config's
  std::optional<double> divergence_rate_max;           // items whose greedy answer diverged from the reference's
  std::optional<double> first_token_eos_rate_max;      // turns whose greedy answer ends at its first token
  std::optional<double> first_token_differs_rate_max;  // turns whose first token differs from the reference's
};

// Minimum magnitudes of a worsening against the baseline, per item paired. A regression fires
// only when the bootstrap interval of the mean delta excludes zero on the worse side AND the
// mean delta is worse by more than this magnitude.
struct RegressionLimits {
  std::optional<double> kld_mean;         // increase
  std::optional<double> kld_p99;          // increase
  std::optional<double> same_top1;        // decrease (fraction)
  std::optional<double> gold_accuracy;    // decrease of gold exact match (fraction of items)
  std::optional<double> divergence_rate;  // increase (fraction of items)
  std::optional<double> first_token_eos_rate;      // increase (fraction of turns, per item paired)
  std::optional<double> first_token_differs_rate;  // increase (fraction of turns, per item paired)
};

// A per-position check (docs/gates.md "Checks by position"): `metric` (kld_mean or same_top1) in
// every position bucket (scoring/position_buckets.h) from `min_position` on, which must be a
// bucket's start. `regression`: the floor of a paired worsening against the baseline, per item
// paired as the regression checks are; `limit`: an absolute maximum (kld_mean) or minimum
// (same_top1) on the candidate. A bucket that no item reaches in either run is skipped with the
// reason, never passed.
struct PositionLimit {
  std::string metric;
  int64_t min_position = 0;
  std::optional<double> regression, limit;
};

// A depth-effect check (docs/gates.md "Checks by depth"): per candidate config, over all the
// run's documents (items) together, `metric` in every position bucket from `min_position` on
// against the bucket starting at `shallow`, paired on the documents holding both
// (scoring/depth_effect.h). It fails when the worsening with depth is real (its bootstrap
// interval over documents excludes none) and exceeds every limit given: `ratio_max` (kld_mean:
// deep / shallow) and `floor` (deep - shallow KLD, or shallow - deep top-1 agreement).
// Fewer than kDepthMinDocuments paired documents, or no bucket reached, skip with the reason.
struct DepthLimit {
  std::string metric;
  int64_t shallow = 0, min_position = 0;
  std::optional<double> ratio_max, floor;
};

// How much of the candidate run a (domain, config) must hold for its checks to mean anything:
// items with the config's row, and tokens whose KLD was measured (items whose KLD was not
// measured count for neither).
struct CoverageLimits {
  std::optional<double> items_min;
  std::optional<double> scored_tokens_min;
};

struct GateLimits {
  AbsoluteLimits absolute;
  RegressionLimits regression;
  CoverageLimits coverage;
  // The per-position checks, all taken from the most specific rule that sets "positions" (an
  // empty list: none, as `null` says in the file).
  std::optional<std::vector<PositionLimit>> positions;
  // The depth-effect checks, likewise from the most specific rule that sets "depth"; only rules
  // for every domain ("*") may set them, since a depth effect is measured over all documents.
  std::optional<std::vector<DepthLimit>> depth;
  // A check whose metric the data allows (the items have scored tokens, gold answers, greedy
  // answers) but that no item measured fails, unless this is true. Off by default.
  std::optional<bool> allow_unmeasured;
};

struct GateRule {
  std::string domain = "*";
  // "*" or a config as the user names it; bound to the stored spec(s) of the run's configs it
  // names before checks look it up (harness/report/verdicts.h, bind_policy).
  std::string kv = "*";
  GateLimits limits;  // NaN: the file set this limit to null (off, overriding less specific rules)
  // "optional": true: the rule is meant for runs that have its config; one that has none is not
  // an error (a note says the rule was not applied). Otherwise a `kv` rule that names no config
  // of the run is an input error: a rule that applies to nothing would let a gate pass unseen.
  bool optional = false;
  size_t index = 0;  // the rule's place in the file, "rules[N]" in messages
};

// Latency (docs/gates.md, "How latency is gated").
//
// Slowdown: each candidate config's TTFT/TPOT as a ratio to the reference config's on the same
// turn of the same run, which ran interleaved with it and so under the same machine load; the
// candidate run's ratios against the baseline run's, turn by turn paired, as a geometric mean
// with a bootstrap interval. It fails when the interval excludes 1 on the slow side and the
// slowdown exceeds the limit. Load slows a config and its reference alike, so it cannot fail.
//
// Calibrated, run to run: per config, reference included, each turn's TTFT/TPOT divided by the
// calibration workload timed just around its item (harness/eval/calibration.h), which load slows
// as it slows the items and a slower kvgate does not; candidate against baseline, per item
// paired, as a geometric mean with a bootstrap interval over items. Fails as the slowdown does.
//
// Run to run: per-config percentiles candidate / baseline, which load does move; checked only
// when both runs recorded a quiet machine (at most quiet_load_max other runnable tasks per
// core; null: no machine is quiet), otherwise passed with a detail saying why not checked.
struct LatencyLimits {
  std::optional<double> ttft_slowdown_max, tpot_slowdown_max;
  std::optional<double> ttft_calibrated_ratio_max, tpot_calibrated_ratio_max;
  std::optional<double> ttft_p50_ratio_max, ttft_p95_ratio_max;
  std::optional<double> tpot_p50_ratio_max, tpot_p95_ratio_max;
  std::optional<double> quiet_load_max = 0.25;
  bool allow_unmeasured = false;  // a limit set with no timed turn to check it fails unless true
};

struct BootstrapSettings {
  size_t resamples = 2000;
  double confidence = 0.95;
  uint64_t seed = 20261202;
};

struct GatePolicy {
  std::string source;  // the file it came from, for messages
  BootstrapSettings bootstrap;
  std::vector<GateRule> rules;
  LatencyLimits latency;
  // The limits for one eval domain and one (canonical) KV config spec.
  GateLimits limits_for(const std::string& domain, const std::string& kv) const;
};

// Parses policy JSON text; `source` names it in errors. Errors are kvgate::Error (input) with a
// one-line message naming the source and the offending key or byte offset.
GatePolicy parse_gate_policy(const std::string& text, const std::string& source);
GatePolicy load_gate_policy(const std::string& path);

// Rewrites every rule's KV config name with `canonical` (the stored spec(s) a rule names; several
// rewrite the rule into one per spec), so rules match what runs hold by exact spec. Rules that
// name the same (domain, config) twice are an input error naming both.
void canonicalize_policy_kv(GatePolicy& policy, const std::function<std::vector<std::string>(const GateRule&)>& canonical);

}  // namespace kvgate::scoring
