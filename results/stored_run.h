#pragma once
// A stored run read once and bound: its record, its configs (reference first) each with the KV
// config it ran read as stored and the serving endpoint behind it, its items, their item and turn
// metrics, and engine mode's rows. Each item row's first-token counts are derived from its turn
// rows here. Every command that reads a stored run (`kvgate runs show`, the report, answers,
// verdicts, the engine view, the gate, the weights x KV table) takes one StoredRun loaded once, so
// each stored table is read once per run and all of them see the same rows joined the same way,
// with roles and statuses as the store's enums.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kv_config.h"
#include "results/store.h"

namespace kvgate::results {

// An endpoint's config is stored as "endpoint:NAME=CANONICAL" (harness/endpoint_kv.h), never equal
// to an in-process spec.
inline constexpr std::string_view kEndpointSpecPrefix = "endpoint:";

// The part of a stored config name before its KV config: "LABEL+" of a weights config,
// "endpoint:NAME=" of an endpoint's; "" for a plain KV config.
std::string_view stored_spec_prefix(std::string_view spec);

// One config of a stored run, bound once. `kv` is the KV part of its name read with the grammar
// it was stored under (kernels::parse_stored_kv_config: a bare llama.cpp type that an older
// kvgate wrote means unrotated), never re-read with today's user grammar, whose defaults have
// changed before.
struct StoredConfig : RunConfigRecord {
  std::optional<kernels::KvConfig> kv;  // nullopt: a stored spec this build cannot read
  std::string kv_problem;               // why not ("" when kv is set)
  std::optional<ConfigEndpoint> endpoint;  // engine mode: the serving endpoint that ran it (its row)
  // Whether an endpoint ran it, as its name says (the name is what results are keyed by).
  bool served_by_endpoint() const { return spec.rfind(kEndpointSpecPrefix, 0) == 0; }
};

struct StoredRun {
  RunRecord record;
  std::vector<StoredConfig> configs;  // the store's order: reference first, then by spec
  std::vector<ItemInfo> item_info;       // by item key: domain, gold answer, calibration
  std::vector<RunItemMetrics> items;     // in item-key order
  std::vector<RunTurnMetrics> turns;
  std::vector<RunPositionMetrics> positions;  // position buckets, per turn (empty before schema 7)
  std::map<std::string, ItemCalibration> calibration;  // by item key: the items timed against a yardstick
  // Engine mode (docs/engine-mode.md); empty for an in-process run.
  std::vector<ConfigEndpoint> endpoints;  // by config id
  std::vector<ItemFailure> failures;      // by item key
  std::optional<LoadReplaySettings> load_replay;
  std::vector<LoadRequest> load_requests;
  std::vector<CapacityPrediction> capacity_predictions;

  static StoredRun load(Store& store, const RunRecord& run);

  // The config with this id; null when the run has none.
  const StoredConfig* config(int64_t config_id) const;
  // Its spec, or "config#ID" for an id the run does not have (a damaged file, named as such).
  std::string spec_of(int64_t config_id) const;
  // The reference config; null when the run has none.
  const StoredConfig* reference() const;
};

// Counts one turn into its item row's first-token counts (ItemMetrics::answered_turns, ...).
void add_first_tokens(ItemMetrics& m, const TurnMetrics& t);

}  // namespace kvgate::results
