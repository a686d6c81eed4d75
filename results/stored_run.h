#pragma once
// A stored run read once: its record, its configs (reference first), and its item and turn
// metrics with their items' keys and domains. Each item row's first-token counts are derived from
// its turn rows here. `kvgate runs show`, the report, the gate and the
// weights x KV table each take one, so they see the same rows joined the same way, and roles
// and statuses arrive as the store's enums.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "results/store.h"

namespace kvgate::results {

struct StoredRun {
  RunRecord record;
  std::vector<RunConfigRecord> configs;  // the store's order: reference first, then by spec
  std::vector<RunItemMetrics> items;     // in item-key order
  std::vector<RunTurnMetrics> turns;
  std::vector<RunPositionMetrics> positions;  // position buckets, per turn (empty before schema 7)
  std::map<std::string, ItemCalibration> calibration;  // by item key: the items timed against a yardstick

  static StoredRun load(Store& store, const RunRecord& run);

  // The config with this id; null when the run has none.
  const RunConfigRecord* config(int64_t config_id) const;
  // Its spec, or "config#ID" for an id the run does not have (a damaged file, named as such).
  std::string spec_of(int64_t config_id) const;
  // The reference config; null when the run has none.
  const RunConfigRecord* reference() const;
};

// Counts one turn into its item row's first-token counts (ItemMetrics::answered_turns, ...).
void add_first_tokens(ItemMetrics& m, const TurnMetrics& t);

}  // namespace kvgate::results
