#pragma once
// What an eval or replay run evaluates, decided once before any model work: the workload (the
// items and their content hash) and the configs with their roles, each KV spec parsed exactly
// once. It is built from the command's flags (or the suite they name) or from a stored run that
// is being resumed; the runner and the recorder only read it.
//
// A config is one column of results. Today every config runs on the run's one model through
// the run's one engine and differs by its KV spec. A config that names its own model or serving
// endpoint (engine mode) would be a field of PlannedConfig, the runner already keeping one
// engine per config; a shard (docs/scale-out.md: the items whose id hashes to I mod N, taken
// after --limit) would be a field of EvalPlan that selects the items the runner prepares.
#include <cstdint>
#include <string>
#include <vector>

#include "evalsets/item.h"
#include "kernels/kv_config.h"

namespace kvgate::harness {

enum class ConfigRole { reference, candidate };
const char* config_role_name(ConfigRole role);

struct PlannedConfig {
  ConfigRole role = ConfigRole::candidate;
  kernels::KvConfig kv;
  std::string spec;  // kv.canonical(): the config's name in the results and the summary
};

struct Workload {
  std::string source;  // "suite:NAME", "evalset:PATH" or "trace:PATH" (stored as the run's suite name)
  std::string name;    // the suite's name, or the file's path
  std::vector<evalsets::EvalItem> items;
  std::string hash;    // content hash of the items; a resumed run requires the same
};

struct EvalPlan {
  Workload workload;
  std::string model;  // --model PATH, the resumed run's model, or "" for the default model
  std::vector<PlannedConfig> configs;  // the reference first, then the candidates
  int64_t resume_run = 0;  // the stored run this plan continues; 0 for a new run

  const PlannedConfig& reference() const { return configs.front(); }
};

// The flags of `kvgate eval` / `kvgate replay` that choose what to run.
struct PlanFlags {
  bool replay = false;                // `kvgate replay`, whose source is --trace
  std::string suite, evalset, trace;  // exactly one
  std::string kv;   // comma-separated candidates; empty: the suite's
  std::string ref;  // empty: the suite's, else f16
  std::string model;
};

// Usage error (exit 2) when not exactly one source is given, no candidate is left, or a config
// is given twice (the reference included); input errors name the file or spec at fault.
EvalPlan plan_from_flags(const PlanFlags& flags);

// A stored config of a run being resumed.
struct StoredConfig {
  std::string spec;
  ConfigRole role = ConfigRole::candidate;
};

// The plan of stored run `run_id`: its workload is read again from `source` and must still hash
// to `hash` (input error otherwise: the items changed). Candidates keep the stored order.
EvalPlan plan_from_stored_run(int64_t run_id, const std::string& source, const std::string& hash,
                              const std::string& model_path, const std::vector<StoredConfig>& configs);

}  // namespace kvgate::harness
