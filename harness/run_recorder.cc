#include "harness/run_recorder.h"

#include <map>
#include <optional>

#include "core/error.h"
#include "core/hash.h"

namespace kvgate::harness {

EvalPlan RunRecorder::plan_to_resume(results::Store& store, int64_t run_id) {
  const std::optional<results::RunRecord> run = store.find_run(run_id);
  if (!run) throw_usage_error(store.path() + ": no run " + std::to_string(run_id) + " to resume");
  if (run->status == "complete") throw_usage_error(store.path() + ": run " + std::to_string(run_id) + " is already complete");
  std::vector<StoredConfig> configs;
  for (const results::RunConfigRecord& c : store.run_configs(run_id))
    configs.push_back({c.spec, c.role == "reference" ? ConfigRole::reference : ConfigRole::candidate});
  return plan_from_stored_run(run_id, run->info.suite_name, run->info.suite_hash, run->info.model_path, configs);
}

RunRecorder::RunRecorder(results::Store& store, const EvalPlan& plan, results::RunInfo info)
    : store_(store), plan_(plan), info_(std::move(info)) {}

void RunRecorder::open(const kernels::KvShape& shape) {
  if (plan_.resume_run > 0) {
    run_id_ = plan_.resume_run;
    std::map<std::string, int64_t> id_of;
    for (const results::RunConfigRecord& c : store_.run_configs(run_id_)) id_of[c.spec] = c.config_id;
    for (const PlannedConfig& c : plan_.configs) {
      const auto it = id_of.find(c.spec);
      if (it == id_of.end())
        throw_internal_error(store_.path() + ": run " + std::to_string(run_id_) + " lost its config " + c.spec);
      config_ids_.push_back(it->second);
    }
    store_.resume_run(run_id_);
    stored_ = store_.finished_pairs(run_id_);
    return;
  }
  run_id_ = store_.begin_run(info_);
  for (const PlannedConfig& c : plan_.configs) {
    const int64_t id = store_.add_config({c.spec, hex_u64(c.kv.hash()), c.kv.bits_per_element(shape)});
    store_.attach_config(run_id_, id,
                         c.role == ConfigRole::reference ? results::ConfigRole::reference : results::ConfigRole::candidate,
                         c.kv.bytes_per_token(shape));
    config_ids_.push_back(id);
  }
}

bool RunRecorder::holds(const std::string& item_key) const {
  for (const int64_t id : config_ids_)
    if (!stored_.count({item_key, id})) return false;
  return true;
}

void RunRecorder::record(ItemRecord item) {
  KVGATE_CHECK(item.configs.size() == config_ids_.size(), "one record per config of the plan");
  results::ItemWriter writer = store_.begin_item(run_id_, item.info);
  for (size_t c = 0; c < item.configs.size(); ++c) {
    ConfigItemRecord& r = item.configs[c];
    const int64_t id = config_ids_[c];
    r.metrics.config_id = id;
    writer.add_metrics(r.metrics);
    for (results::TurnMetrics& t : r.turns) {
      t.config_id = id;
      writer.add_turn(t);
    }
    for (results::TokenClassMetrics& tc : r.token_classes) {
      tc.config_id = id;
      writer.add_token_class(tc);
    }
    for (results::LatencySamples& l : r.latency) {
      l.config_id = id;
      writer.add_latency(l);
    }
  }
  writer.commit();
}

void RunRecorder::finish(bool complete) {
  store_.finish_run(run_id_, complete ? results::RunStatus::complete : results::RunStatus::interrupted);
}

void RunRecorder::fail() {
  if (run_id_ > 0) store_.finish_run(run_id_, results::RunStatus::failed);
}

}  // namespace kvgate::harness
