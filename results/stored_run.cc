#include "results/stored_run.h"

#include <map>

namespace kvgate::results {

void add_first_tokens(ItemMetrics& m, const TurnMetrics& t) {
  if (!t.answer_tokens) return;  // no greedy answer on this turn (or a run made before answers were kept)
  ++m.answered_turns;
  if (*t.answer_tokens == 0) ++m.first_token_eos;
  if (t.answer_divergence && *t.answer_divergence == 0) ++m.first_token_differs;
}

StoredRun StoredRun::load(Store& store, const RunRecord& run) {
  StoredRun s;
  s.record = run;
  s.configs = store.run_configs(run.id);
  s.items = store.run_item_metrics(run.id);
  s.turns = store.run_turn_metrics(run.id);
  s.positions = store.run_position_metrics(run.id);
  for (const ItemInfo& i : store.run_items(run.id))
    if (i.calibration) s.calibration[i.item_key] = *i.calibration;
  std::map<std::pair<std::string, int64_t>, ItemMetrics*> by_item;
  for (RunItemMetrics& r : s.items) by_item[{r.item_key, r.metrics.config_id}] = &r.metrics;
  for (const RunTurnMetrics& t : s.turns)
    if (const auto it = by_item.find({t.item_key, t.turn.config_id}); it != by_item.end()) add_first_tokens(*it->second, t.turn);
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
