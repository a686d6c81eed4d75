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
  std::optional<double> kld_mean_max;          // token-weighted mean KLD
  std::optional<double> kld_p99_max;           // 99th percentile over items of each item's KLD p99
  std::optional<double> same_top1_min;         // token-weighted top-1 agreement, fraction
  std::optional<double> accuracy_drop_max;     // reference config's gold accuracy minus this config's
  std::optional<double> divergence_rate_max;   // items whose greedy answer diverged from the reference's
};

// Minimum magnitudes of a worsening against the baseline, per item paired. A regression fires
// only when the bootstrap interval of the mean delta excludes zero on the worse side AND the
// mean delta is worse by more than this magnitude.
struct RegressionLimits {
  std::optional<double> kld_mean;         // increase
  std::optional<double> kld_p99;          // increase
  std::optional<double> same_top1;        // decrease (fraction)
  std::optional<double> accuracy;         // decrease of gold exact match (fraction of items)
  std::optional<double> divergence_rate;  // increase (fraction of items)
};

struct GateLimits {
  AbsoluteLimits absolute;
  RegressionLimits regression;
};

struct GateRule {
  std::string domain = "*";
  std::string kv = "*";
  GateLimits limits;  // NaN: the file set this limit to null (off, overriding less specific rules)
};

// Latency ratios candidate / baseline of per-config percentiles over all turns. CI machines are
// noisy, so these are off unless a policy sets them.
struct LatencyLimits {
  std::optional<double> ttft_p50_ratio_max, ttft_p95_ratio_max;
  std::optional<double> tpot_p50_ratio_max, tpot_p95_ratio_max;
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

// Rewrites every rule's KV config name with `canonical` (short names such as "fp8" to the
// canonical spec the results store records), so rules match what runs hold. Rules that name
// the same (domain, config) twice are an input error.
void canonicalize_policy_kv(GatePolicy& policy, const std::function<std::string(const std::string&)>& canonical);

}  // namespace kvgate::scoring
