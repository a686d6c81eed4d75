#include "results/stored_run.h"

namespace kvgate::results {

StoredRun StoredRun::load(Store& store, const RunRecord& run) {
  StoredRun s;
  s.record = run;
  s.configs = store.run_configs(run.id);
  s.items = store.run_item_metrics(run.id);
  s.turns = store.run_turn_metrics(run.id);
  return s;
}

const RunConfigRecord* StoredRun::config(int64_t config_id) const {
  for (const RunConfigRecord& c : configs)
    if (c.config_id == config_id) return &c;
  return nullptr;
}

std::string StoredRun::spec_of(int64_t config_id) const {
  const RunConfigRecord* c = config(config_id);
  return c ? c->spec : "config#" + std::to_string(config_id);
}

const RunConfigRecord* StoredRun::reference() const {
  for (const RunConfigRecord& c : configs)
    if (c.role == ConfigRole::reference) return &c;
  return nullptr;
}

}  // namespace kvgate::results
