#pragma once
// Rollout policy: the largest harm a person accepts from replacing the reference config with a
// candidate, per verdict metric (scoring/verdict_metrics.h), for the workload as a whole, per
// eval domain and per position bucket (docs/gates.md "Rollout verdicts"; shipped as
// ci/gates/rollout.json). The verdicts of `eval`, `runs show`, `report` and `compare` hold the
// confidence bounds of the paired harms against these margins. It is not a gate policy: the
// nightly gate's "is something broken?" limits stay in ci/gates/default.json.
//
//   {"kvgate_rollout_policy": 1, "description": "...", "confidence": 0.95,
//    "margins": {"gold_accuracy_drop_max": 0.02, "same_top1_min": 0.95, ...},
//    "domains": {"korean": {"kld_mean_max": 0.03, "note": "why"}},
//    "positions": {"min_position": 2048, "margins": {"kld_mean_max": 0.03}}}
//
// A margin absent from "margins" or null is not checked; a domain's or the positions' margins
// inherit the top-level ones where they do not set them, and null there switches one off.
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "scoring/verdict_metrics.h"

namespace kvgate::scoring {

using RolloutMargins = std::array<std::optional<double>, kVerdictMetrics.size()>;  // kVerdictMetrics order

struct RolloutPolicy {
  std::string source;  // the file it came from, for messages
  std::string description;
  double confidence = 0.95;  // two-sided; a verdict's "safe" bound is one-sided at (1 + confidence) / 2
  RolloutMargins margins;    // the workload as a whole and every domain the file does not name
  std::map<std::string, RolloutMargins> domains;  // as written: nullopt inherits, NaN is "off here"
  std::optional<int64_t> position_from;            // the first position bucket checked; nullopt: none
  RolloutMargins position_margins;                 // as written, like a domain's

  // The margin of metric `m` (its index in kVerdictMetrics) for one domain ("" or "*": the
  // workload as a whole), and per position bucket; nullopt: not checked.
  std::optional<double> margin(size_t m, const std::string& domain) const;
  std::optional<double> position_margin(size_t m) const;
};

// Parses policy JSON text; `source` names it in errors (kvgate::Error, input: "SOURCE: KEY: problem").
RolloutPolicy parse_rollout_policy(const std::string& text, const std::string& source);
RolloutPolicy load_rollout_policy(const std::string& path);

}  // namespace kvgate::scoring
