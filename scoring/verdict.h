#pragma once
// One line per candidate config a person can act on: safe, watch or unsafe for the workload a
// run measured, derived from the gate policy's absolute limits (the same checks `kvgate gate`
// runs without a baseline), naming the check that came closest to its limit and its number.
//
// unsafe  some absolute check of the config failed (in any domain);
// watch   none failed, but one used at least kWatchShare of its allowance: an upper limit L with
//         value v uses v / L; a lower limit L on a fraction uses (1 - v) / (1 - L);
// safe    every check kept more than that margin.
// Skipped checks (nothing measured, gold accuracy the reference cannot answer) decide nothing
// and are counted in the line so a reader knows they were not passed.
#include <cstddef>
#include <string>
#include <vector>

#include "scoring/gate.h"

namespace kvgate::scoring {

inline constexpr double kWatchShare = 0.5;

enum class Verdict { safe, watch, unsafe };
const char* verdict_name(Verdict v);

struct ConfigVerdict {
  std::string config;
  Verdict verdict = Verdict::safe;
  std::string worst_check;  // the check's name; "" when the config had no decided check
  std::string domain;
  double share = 0;         // of the allowance the worst check used (> 1: failed)
  size_t failed = 0, skipped = 0, checks = 0;
  std::string reason;       // "mean KLD 0.62 in tables > limit 0.5"
  std::string line() const;  // "q4_0/q4_0: unsafe for this workload: mean KLD 0.62 in tables > limit 0.5 (2 of 10 checks failed)"
};

// Per candidate config of `run` (in its order), from evaluate_gate(policy, nullptr, run)'s
// absolute checks. A config with no absolute checks at all is "safe" with a reason saying so.
std::vector<ConfigVerdict> config_verdicts(const GatePolicy& policy, const GateRun& run);

}  // namespace kvgate::scoring
