#include "harness/eval/run_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>

#include "core/cpu_time.h"
#include "core/error.h"
#include "core/hash.h"

namespace kvgate::harness {
namespace {

double load_average() {
  double one = 0;
  return ::getloadavg(&one, 1) == 1 ? one : 0.0;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

EvalPlan RunRecorder::plan_to_resume(results::Store& store, int64_t run_id, int64_t limit,
                                     const std::optional<ShardSpec>& shard) {
  const std::optional<results::RunRecord> run = store.find_run(run_id);
  if (!run) throw_usage_error(store.path() + ": no run " + std::to_string(run_id) + " to resume");
  if (run->status == results::RunStatus::complete) throw_usage_error(store.path() + ": run " + std::to_string(run_id) + " is already complete");
  std::map<int64_t, results::ConfigEndpoint> endpoints;
  for (results::ConfigEndpoint& e : store.config_endpoints(run_id)) endpoints[e.config_id] = std::move(e);
  std::vector<StoredConfig> configs;
  for (const results::RunConfigRecord& c : store.run_configs(run_id)) {
    StoredConfig sc;
    sc.config_id = c.config_id;
    sc.spec = c.spec;
    sc.label = c.label;
    sc.role = c.role == results::ConfigRole::reference ? ConfigRole::reference : ConfigRole::candidate;
    sc.top_k = c.top_k ? static_cast<int>(*c.top_k) : 0;
    // A weights run's config is named LABEL+KV; a plain run's name is its KV spec.
    if (c.model && c.model->kv_spec != c.spec) {
      sc.kv_spec = c.model->kv_spec;
      sc.model_label = c.model->label;
      sc.model_path = c.model->path;
    }
    if (const auto it = endpoints.find(c.config_id); it != endpoints.end()) {
      serving::EndpointConfig e;
      e.name = it->second.name;
      e.url = it->second.url;
      e.kind = serving::parse_engine_kind(it->second.engine).value_or(serving::EngineKind::automatic);
      sc.endpoint = std::move(e);
      sc.kv = it->second.kv;
      sc.kv_source = it->second.kv_source;
    }
    configs.push_back(std::move(sc));
  }
  EvalPlan plan = plan_from_stored_run(run_id, run->info.suite_name, run->info.suite_hash, run->info.model_path, configs);
  const std::optional<results::RunPlan> stored = store.run_plan(run_id);
  if (stored && stored->shard_index) {
    const std::string run_name = store.path() + ": run " + std::to_string(run_id);
    const std::string stored_shard = std::to_string(*stored->shard_index) + "/" + std::to_string(*stored->shard_count);
    if (shard && (shard->index != *stored->shard_index || shard->count != *stored->shard_count))
      throw_usage_error(run_name + " is shard " + stored_shard + ", not " + std::to_string(shard->index) + "/" +
                        std::to_string(shard->count) + "; resume it without --shard");
    if (limit > 0 && limit != stored->plan_items)
      throw_usage_error(run_name + " is a shard of a plan of " + std::to_string(stored->plan_items) +
                        " items; resume it without --limit");
    plan.shard = ShardSpec{*stored->shard_index, *stored->shard_count, stored->shard_origin};
    plan.limit = stored->plan_items;
  } else {
    if (shard) throw_usage_error(store.path() + ": run " + std::to_string(run_id) + " is not a shard; resume it without --shard");
    // A --limit run resumes as the plan it was (its first N items), never silently as the whole
    // workload: only a --limit given now changes it. A run from before plans were recorded has
    // no stored size, and resumes as given.
    plan.limit = limit > 0 ? limit : stored ? stored->plan_items : 0;
  }
  select_items(plan);
  return plan;
}

RunRecorder::RunRecorder(results::Store& store, const EvalPlan& plan, results::RunInfo info, std::string plan_text)
    : store_(&store), plan_(plan), info_(std::move(info)), plan_text_(std::move(plan_text)),
      plan_hash_(hex_u64(xxhash64(plan_text_))) {}

RunRecorder::RunRecorder(std::string db_path, const EvalPlan& plan, results::RunInfo info, std::string plan_text)
    : db_path_(std::move(db_path)), plan_(plan), info_(std::move(info)), plan_text_(std::move(plan_text)),
      plan_hash_(hex_u64(xxhash64(plan_text_))) {}

RunRecorder::~RunRecorder() {
  if (run_id_ == 0 || ended_) return;
  try {
    fail();
  } catch (...) {
    // A destructor must not throw; the run then stays 'running', as after a kill -9.
  }
}

results::Store& RunRecorder::store() {
  if (!store_) throw_internal_error("the run's store is used before the run is opened");
  return *store_;
}

void RunRecorder::record_plan() {
  results::RunPlan record{plan_hash_, plan_text_, static_cast<int64_t>(plan_.plan_items()), std::nullopt, std::nullopt, {}};
  std::vector<results::PlanItem> items;
  if (plan_.shard) {
    record.shard_index = plan_.shard->index;
    record.shard_count = plan_.shard->count;
    record.shard_origin = plan_.shard->origin;
    // The whole plan's items with their shards: a merge names the items of a missing shard.
    for (size_t i = 0; i < plan_.plan_items(); ++i) {
      const std::string& id = plan_.workload.items[i].id;
      items.push_back({static_cast<int64_t>(i), id, shard_of_item(id, plan_.shard->count)});
    }
  }
  store_->record_plan(run_id_, record, items);
}

void RunRecorder::open(const std::vector<ConfigSetup>& setups, const std::string& calibration) {
  KVGATE_CHECK(setups.size() == plan_.configs.size(), "one setup per config of the plan");
  if (!store_) store_ = &owned_store_.emplace(results::Store::open(db_path_));
  if (plan_.resume_run > 0) {
    run_id_ = plan_.resume_run;
    // The ids came with the plan (plan_to_resume read the run's configs once).
    for (const PlannedConfig& c : plan_.configs) {
      if (c.stored_id == 0)
        throw_internal_error(store_->path() + ": resuming run " + std::to_string(run_id_) + ", config " + c.spec +
                             " has no stored id in the plan");
      config_ids_.push_back(c.stored_id);
    }
    const results::RunRecord stored = *store_->find_run(run_id_);
    earlier_load_ = stored.load;
    // Items stored without a calibration (a run begun before schema 10) are simply not calibrated.
    const std::string& before = stored.info.calibration;
    if (!calibration.empty() && before != calibration)
      store_->record_run_calibration(run_id_, before.empty() ? calibration : before + "; then " + calibration);
    store_->resume_run(run_id_);
    record_plan();
    stored_ = store_->finished_pairs(run_id_);
    load_known_ = earlier_load_.has_value() || stored_.empty();
    sample_load();
    return;
  }
  info_.calibration = calibration;
  run_id_ = store_->begin_run(info_);
  for (size_t i = 0; i < plan_.configs.size(); ++i) {
    const PlannedConfig& c = plan_.configs[i];
    const kernels::KvShape& shape = setups[i].shape;
    // An endpoint's results name is more than its KV config, so it hashes as the name it is.
    const std::string hash = c.endpoint ? hex_u64(xxhash64(c.spec)) : hex_u64(c.kv.hash());
    const int64_t id = store_->add_config({c.spec, hash, c.kv.bits_per_element(shape)});
    store_->attach_config(run_id_, id,
                         c.role == ConfigRole::reference ? results::ConfigRole::reference : results::ConfigRole::candidate,
                         c.kv.bytes_per_token(shape));
    if (c.top_k > 0) store_->set_config_estimator(run_id_, id, "topk", c.top_k);
    store_->set_config_label(run_id_, id, c.label.empty() ? c.spec : c.label);
    if (setups[i].model) store_->record_config_model(run_id_, id, *setups[i].model);
    config_ids_.push_back(id);
  }
  record_plan();
  sample_load();
}

// The first sample starts the clocks; later ones (one per item) keep the highest load.
void RunRecorder::sample_load() {
  const double now = load_average();
  if (wall_start_ == 0) {
    load_.load_avg_start = load_.load_avg_max = now;
    load_.cores = std::max<int64_t>(1, ::sysconf(_SC_NPROCESSORS_ONLN));
    cpu_start_ = process_cpu_seconds();
    wall_start_ = wall_seconds();
    return;
  }
  load_.load_avg_max = std::max(load_.load_avg_max, now);
}

void RunRecorder::record_load() {
  if (run_id_ == 0 || wall_start_ == 0) return;
  sample_load();
  results::RunLoad load = load_;
  load.cpu_seconds = process_cpu_seconds() - cpu_start_;
  load.wall_seconds = wall_seconds() - wall_start_;
  if (earlier_load_) {
    load.load_avg_start = std::max(load.load_avg_start, earlier_load_->load_avg_start);
    load.load_avg_max = std::max(load.load_avg_max, earlier_load_->load_avg_max);
    load.cores = std::min(load.cores, earlier_load_->cores);
    load.cpu_seconds += earlier_load_->cpu_seconds;
    load.wall_seconds += earlier_load_->wall_seconds;
  }
  store_->record_run_load(run_id_, load_known_ ? std::optional<results::RunLoad>(load) : std::nullopt);
}

bool RunRecorder::holds(const std::string& item_key) const {
  for (const int64_t id : config_ids_)
    if (!stored_.count({item_key, id})) return false;
  return true;
}

void RunRecorder::record(ItemRecord item) {
  KVGATE_CHECK(item.configs.size() == config_ids_.size(), "one record per config of the plan");
  results::ItemWriter writer = store_->begin_item(run_id_, item.info);
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
    for (results::PositionMetrics& p : r.positions) {
      p.config_id = id;
      writer.add_position(p);
    }
  }
  writer.commit();
  sample_load();
}

void RunRecorder::record_endpoint(size_t config_index, results::ConfigEndpoint endpoint) {
  KVGATE_CHECK(config_index < config_ids_.size(), "an endpoint of a planned config");
  endpoint.config_id = config_ids_[config_index];
  store_->add_config_endpoint(run_id_, endpoint);
}

void RunRecorder::record_failure(const std::string& item_key, std::optional<size_t> config_index, const std::string& endpoint,
                                 const std::string& failure, const std::string& message) {
  results::ItemFailure f;
  f.item_key = item_key;
  if (config_index && *config_index < config_ids_.size()) f.config_id = config_ids_[*config_index];
  f.endpoint = endpoint;
  f.failure = failure;
  f.message = message;
  store_->record_item_failure(run_id_, f);
}

void RunRecorder::record_load_replay(const results::LoadReplaySettings& settings) { store_->add_load_replay(run_id_, settings); }

void RunRecorder::record_load_requests(size_t config_index, std::vector<results::LoadRequest> requests) {
  KVGATE_CHECK(config_index < config_ids_.size(), "requests of a planned config");
  for (results::LoadRequest& r : requests) r.config_id = config_ids_[config_index];
  store_->add_load_requests(run_id_, requests);
}

void RunRecorder::record_capacity_prediction(size_t config_index, results::CapacityPrediction prediction) {
  KVGATE_CHECK(config_index < config_ids_.size(), "a prediction for a planned config");
  prediction.config_id = config_ids_[config_index];
  store_->add_capacity_prediction(run_id_, prediction);
}

void RunRecorder::finish(bool complete) {
  record_load();
  store_->finish_run(run_id_, complete ? results::RunStatus::complete : results::RunStatus::interrupted);
  ended_ = true;
}

void RunRecorder::fail() {
  if (run_id_ == 0) return;
  ended_ = true;
  // The error that failed the run is what the user must see; the load is only context.
  try {
    record_load();
  } catch (const std::exception&) {
  }
  store_->finish_run(run_id_, results::RunStatus::failed);
}

}  // namespace kvgate::harness
