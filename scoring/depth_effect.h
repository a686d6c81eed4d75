#pragma once
// Quality by depth on the same documents (issue 42): the position buckets of
// scoring/position_buckets.h with the document (the item) as the unit of evidence. Tokens of one
// document are not independent draws (its style, its topic, how hard it is move them together),
// so intervals come from a bootstrap over documents, never over tokens: each resample draws the
// documents with replacement and recomputes the token-weighted means from their bucket sums.
// The paired depth effect compares a config's deep bucket with its shallow one on the documents
// that hold both (a depth sweep, evalsets/sweep.h, puts every document in every bucket), so it
// says how quality changes with depth rather than which documents landed where.
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "scoring/gate_policy.h"
#include "scoring/position_buckets.h"

namespace kvgate::scoring {

// Fewer documents than this give no interval and no depth effect: a bootstrap over one or two
// documents only repeats them. One rule for the reports and the gate.
inline constexpr int64_t kDepthMinDocuments = 3;

// A point estimate with its bootstrap percentile interval; NaN where it is not measured.
struct Estimate {
  double value = std::numeric_limits<double>::quiet_NaN();
  double low = std::numeric_limits<double>::quiet_NaN();
  double high = std::numeric_limits<double>::quiet_NaN();
};

// One document's sums per bucket under one config (its turns added up).
using DocumentBuckets = std::map<int, PositionSums>;
// Per document (item key, in key order), for one config.
using ConfigDocuments = std::map<std::string, DocumentBuckets>;

// The documents of `config` among `rows` (rows of other configs are ignored).
ConfigDocuments config_documents(std::span<const PositionRow> rows, const std::string& config);

// A bucket's token-weighted mean KLD and same-top-1 over the documents that reach it, with the
// interval from resampling those documents (NaN bounds under kDepthMinDocuments documents).
struct BucketEstimate {
  int64_t documents = 0, tokens = 0;
  Estimate kld_mean, same_top1;
};
BucketEstimate bucket_estimate(const ConfigDocuments& docs, int bucket, const BootstrapSettings& settings, uint64_t seed);

// The paired depth effect of a config: bucket `deep` against bucket `shallow` over the documents
// with scored tokens in both, all four means token-weighted over exactly those documents.
struct DepthEffect {
  int shallow = 0, deep = 0;
  int64_t documents = 0, shallow_tokens = 0, deep_tokens = 0;
  double shallow_kld = std::numeric_limits<double>::quiet_NaN(), deep_kld = std::numeric_limits<double>::quiet_NaN();
  double shallow_top1 = std::numeric_limits<double>::quiet_NaN(), deep_top1 = std::numeric_limits<double>::quiet_NaN();
  Estimate kld_ratio;        // deep / shallow mean KLD
  Estimate kld_difference;   // deep - shallow mean KLD (nats)
  Estimate top1_difference;  // deep - shallow same-top-1 (fraction; negative: agreement lost with depth)
  bool measured() const { return documents >= kDepthMinDocuments; }
};
// Intervals only when measured(); the means are filled whenever a document holds both buckets.
DepthEffect depth_effect(const ConfigDocuments& docs, int shallow, int deep, const BootstrapSettings& settings,
                         uint64_t seed);

// The seed of one estimate: the settings' seed mixed with what it estimates ("depth q4_0 0 3"),
// so every number is reproducible on its own, whatever else a report computes.
uint64_t estimate_seed(const BootstrapSettings& settings, const std::string& what);

// The bucket a report compares with the shallow one: the deepest bucket after `shallow` that at
// least kDepthMinDocuments documents hold together with `shallow`; nullopt when none does.
std::optional<int> deepest_paired_bucket(const ConfigDocuments& docs, int shallow);

// One config's quality by depth as the reports show it: per bucket its documents, tokens and
// means with intervals over documents, and its paired effect against the shallowest bucket
// (documents == 0 at the shallowest itself); `effect` the headline, the shallowest bucket
// against deepest_paired_bucket (nullopt when no bucket qualifies).
struct DepthPoint {
  int bucket = 0;
  BucketEstimate estimate;
  DepthEffect vs_shallow;
};
struct DepthCurve {
  std::string config;
  std::vector<DepthPoint> points;  // buckets with tokens, in order
  std::optional<DepthEffect> effect;
};
DepthCurve depth_curve(const ConfigDocuments& docs, const std::string& config, const BootstrapSettings& settings);

}  // namespace kvgate::scoring
