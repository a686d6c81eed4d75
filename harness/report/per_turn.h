#pragma once
// The per-turn numbers of a run's multi-turn sessions (README: "per-turn KLD, top-1, TTFT,
// TPOT"): per config and turn index, the means over sessions of that turn's context length, KLD
// against the reference, same top-1, TTFT and TPOT (scoring::means_over_sessions). The drift the
// report charts, as numbers; `kvgate runs show` and `kvgate replay` print this one table.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "results/stored_run.h"
#include "scoring/aggregate.h"

namespace kvgate::harness {

struct ConfigTurns {
  std::string label, spec;
  bool reference = false;
  std::vector<std::pair<int64_t, scoring::TurnMeans>> turns;  // by turn index
};

struct PerTurn {
  size_t sessions = 0;               // items with at least two turns
  std::vector<ConfigTurns> configs;  // the run's order: reference first
};

PerTurn per_turn(const results::StoredRun& run);

// "" for a run without multi-turn sessions. Latency columns are wall-clock (they vary run to run).
std::string per_turn_text(const PerTurn& p);
// {"sessions": N, "turns": [{"label", "spec", "turn", "sessions", "context_tokens", "kld_mean",
// "same_top1", "ttft_ms", "tpot_ms"}, ...]}, null for what no session measured.
nlohmann::json per_turn_json(const PerTurn& p);

}  // namespace kvgate::harness
