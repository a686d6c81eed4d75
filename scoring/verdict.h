#pragma once
// The rollout verdict per candidate config: can it replace the run's reference config (the
// production config) on this workload? From confidence bounds on paired per-item differences
// (scoring/intervals.h), held against a rollout policy's margins (scoring/rollout_policy.h), per
// verdict metric (scoring/verdict_metrics.h) for the workload as a whole, per eval domain and per
// position bucket the policy checks:
//
//   safe          every check's bound on the harm lies inside its margin;
//   unsafe        some check's harm lies beyond its margin with confidence;
//   inconclusive  neither: with what the data do rule out and about how many items would decide.
//
// Error rates. "safe" needs every check inside (an intersection-union test), so each check at the
// policy's confidence c already bounds the chance of calling a config safe while some harm
// exceeds its margin by (1 - c) / 2. "unsafe" needs one check out of K, so its bounds are
// Bonferroni-corrected over the config's K decided checks: confidence 1 - (1 - c) / K. When
// `family` candidates are decided together (kvgate compare recommends one of them) both widen by
// that factor too, so the recommendation keeps the same error rate.
//
// This is not the nightly gate (scoring/gate.h: "is something broken?", absolute limits and
// regression floors); nothing here changes what a gate passes or fails.
#include <cstddef>
#include <string>
#include <vector>

#include "scoring/gate.h"
#include "scoring/rollout_policy.h"

namespace kvgate::scoring {

enum class Verdict { safe, inconclusive, unsafe };
const char* verdict_name(Verdict v);

enum class CheckOutcome { within, beyond, undecided, skipped };
const char* check_outcome_name(CheckOutcome o);

struct VerdictCheck {
  size_t metric = 0;         // index into kVerdictMetrics
  std::string domain = "*";  // "*": the workload as a whole
  int bucket = -1;           // a position bucket (scoring/position_buckets.h); -1: every position
  std::string name;          // "gold_accuracy_drop[lookup]", "kld_mean@2-4k[*]"
  double margin = 0;
  CheckOutcome outcome = CheckOutcome::undecided;
  std::string skip_reason;   // a skipped check: why it could not be decided
  size_t items = 0;          // items it rests on (pairs for gold accuracy)
  double estimate = 0;
  double low = 0, high = 0;                // at the verdict's confidence (the "safe" side)
  double strict_low = 0, strict_high = 0;  // at the corrected confidence (the "unsafe" side)
  double spread = 0;                       // per-item spread (scoring/intervals.h)
  // An undecided check: items of its own scope, and of the run at its mix, that would decide it
  // if the estimate and spread held; toward_harm when the estimate lies beyond the margin.
  double items_to_decide = 0, run_items_to_decide = 0;
  bool toward_harm = false;
  const VerdictMetric& info() const { return kVerdictMetrics[metric]; }
  // The bound a margin is held against: the worse end of the interval at the verdict's confidence.
  double harm_bound() const;
};

struct ConfigVerdict {
  std::string config;  // the canonical spec results are keyed by
  std::string label;   // what tables show (the config as typed); "" shows the spec
  Verdict verdict = Verdict::inconclusive;
  std::vector<VerdictCheck> checks;
  size_t within = 0, beyond = 0, undecided = 0, skipped = 0;
  size_t items = 0;      // the config's items in the run
  double confidence = 0;         // of the "safe" bounds (the policy's, corrected for the family)
  double strict_confidence = 0;  // of the "unsafe" bounds
  int deciding = -1;     // the check the line names (index into checks); -1 when none
  // An inconclusive verdict: items of the run's mix that would decide it (the most any undecided
  // check needs, or, when one points toward harm, the fewest that would show it); NaN unknown.
  double items_to_decide = 0;
  bool toward_harm = false;
  std::string reason;  // the line after "CONFIG: VERDICT: "
  const std::string& shown() const { return label.empty() ? config : label; }
  std::string line() const;  // "q4_0: inconclusive: rules out a gold-accuracy drop above 18.3 points in lookup ..."
};

// Per candidate config of `run` (in its order), against the run's reference config.
// `family`: how many candidates are decided together (1 outside kvgate compare).
std::vector<ConfigVerdict> config_verdicts(const RolloutPolicy& policy, const GateRun& run, size_t family = 1);

// Two or three lines a newcomer acts on: what the run clears or rules out, what it cannot decide
// and how many items would, and whose traffic it speaks for. `items`: the run's items;
// `reference`: the reference config as shown; `domains`: the run's eval domains.
std::vector<std::string> verdict_conclusion(const std::vector<ConfigVerdict>& verdicts, const RolloutPolicy& policy,
                                            size_t items, const std::string& reference,
                                            const std::vector<std::string>& domains);

// "3,100": an item count rounded up to two significant digits, with thousands separators;
// "more than 10,000,000" past that, "unknown" for NaN.
std::string item_count_text(double items);

}  // namespace kvgate::scoring
