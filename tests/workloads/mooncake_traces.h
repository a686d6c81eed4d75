#pragma once
// The Mooncake-format traces the workload tests read. The synthetic sample is in the tree and
// always runs; the real conversation trace lives outside it (../shared/traces, which must not be
// copied in) and is checked in addition wherever it exists.
#include <fstream>
#include <string>

namespace kvgate::testing {

// 209 requests in the Mooncake JSONL format, written by tests/data/make_mooncake_sample.py.
inline const std::string kMooncakeSample = std::string(KVGATE_SOURCE_DIR) + "/tests/data/mooncake_sample.jsonl";
inline const std::string kMooncakeReal =
    std::string(KVGATE_SOURCE_DIR) + "/../shared/traces/mooncake_conversation_trace.jsonl";

inline bool have_real_mooncake() { return std::ifstream(kMooncakeReal).good(); }

// Why a real-trace test skipped and what it did not cover, for GTEST_SKIP().
inline std::string real_mooncake_absent(const std::string& not_covered) {
  return "not covered: " + not_covered + " on the real Mooncake conversation trace (12,031 requests), absent at " +
         kMooncakeReal + "; the synthetic sample " + kMooncakeSample + " was checked instead";
}

}  // namespace kvgate::testing
