#include "results/stored_run.h"

#include <map>

#include "core/error.h"

namespace kvgate::results {

void add_first_tokens(ItemMetrics& m, const TurnMetrics& t) {
  if (!t.answer_tokens) return;  // no greedy answer on this turn (or a run made before answers were kept)
  ++m.answered_turns;
  if (*t.answer_tokens == 0) ++m.first_token_eos;
  if (t.answer_divergence && *t.answer_divergence == 0) ++m.first_token_differs;
}

std::string_view stored_spec_prefix(std::string_view spec) {
  if (spec.rfind(kEndpointSpecPrefix, 0) == 0) {
    const size_t eq = spec.find('=');
    return eq == std::string_view::npos ? spec : spec.substr(0, eq + 1);
  }
  const size_t plus = spec.find('+');
  return plus == std::string_view::npos ? std::string_view() : spec.substr(0, plus + 1);
}

StoredRun StoredRun::load(Store& store, const RunRecord& run) {
  StoredRun s;
  s.record = run;
  s.endpoints = store.config_endpoints(run.id);
  std::map<int64_t, const ConfigEndpoint*> endpoint_of;
  for (const ConfigEndpoint& e : s.endpoints) endpoint_of[e.config_id] = &e;
  for (RunConfigRecord& r : store.run_configs(run.id)) {
    StoredConfig c;
    static_cast<RunConfigRecord&>(c) = std::move(r);
    if (const auto e = endpoint_of.find(c.config_id); e != endpoint_of.end()) c.endpoint = *e->second;
    try {
      c.kv = kernels::parse_stored_kv_config(std::string_view(c.spec).substr(stored_spec_prefix(c.spec).size()));
    } catch (const Error& e) {
      c.kv_problem = e.what();  // a name this build cannot read: shown and keyed as stored, never re-read
    }
    s.configs.push_back(std::move(c));
  }
  s.item_info = store.run_items(run.id);
  s.items = store.run_item_metrics(run.id);
  s.turns = store.run_turn_metrics(run.id);
  s.positions = store.run_position_metrics(run.id);
  for (const ItemInfo& i : s.item_info)
    if (i.calibration) s.calibration[i.item_key] = *i.calibration;
  std::map<std::pair<std::string, int64_t>, ItemMetrics*> by_item;
  for (RunItemMetrics& r : s.items) by_item[{r.item_key, r.metrics.config_id}] = &r.metrics;
  for (const RunTurnMetrics& t : s.turns)
    if (const auto it = by_item.find({t.item_key, t.turn.config_id}); it != by_item.end()) add_first_tokens(*it->second, t.turn);
  s.failures = store.item_failures(run.id);
  s.load_replay = store.load_replay(run.id);
  if (s.load_replay) {
    s.load_requests = store.load_requests(run.id);
    s.capacity_predictions = store.capacity_predictions(run.id);
  }
  return s;
}

const StoredConfig* StoredRun::config(int64_t config_id) const {
  for (const StoredConfig& c : configs)
    if (c.config_id == config_id) return &c;
  return nullptr;
}

std::string StoredRun::spec_of(int64_t config_id) const {
  const StoredConfig* c = config(config_id);
  return c ? c->spec : "config#" + std::to_string(config_id);
}

const StoredConfig* StoredRun::reference() const {
  for (const StoredConfig& c : configs)
    if (c.role == ConfigRole::reference) return &c;
  return nullptr;
}

}  // namespace kvgate::results
